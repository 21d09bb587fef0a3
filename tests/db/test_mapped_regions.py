"""Region kind "mapped": device memory an application maps itself into address space it
reserved (cuMemMap: PyTorch's expandable segments). It lies outside the recorded range,
where the application put it, and replay maps device memory there, as for managed memory."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import zarr
from db_support import BASE, INFO, STATIC, kernel_record
from mneme.replay.db import Database, DatabaseWriter, InstanceRecord, Region
from mneme.runtime.recording_format import IN_RANGE_KIND, OWN_ADDRESS_KINDS, REGION_KINDS

MAPPED_AT = 0x7F3A00000000  # a driver-chosen reservation, far from the recorded range


def mapped_instance() -> InstanceRecord:
    rng = np.random.default_rng(7)
    heap = rng.integers(0, 256, 4096, dtype=np.uint8)
    # two adjacent mappings of one reservation, as an expandable segment grows
    first, second = (rng.integers(0, 256, 2 << 20, dtype=np.uint8) for _ in range(2))
    return InstanceRecord(
        grid=(4, 1, 1), block=(256, 1, 1), args=MAPPED_AT.to_bytes(8, "little") + bytes(4),
        prologue=(Region("heap", BASE, heap), Region("mapped", MAPPED_AT, first),
                  Region("mapped", MAPPED_AT + (2 << 20), second)),
        epilogue=(Region("heap", BASE, heap), Region("mapped", MAPPED_AT, first[::-1].copy()),
                  Region("mapped", MAPPED_AT + (2 << 20), second)),
    )


def test_mapped_is_a_kind_replayed_at_its_own_address():
    assert "mapped" in REGION_KINDS and "mapped" in OWN_ADDRESS_KINDS
    assert IN_RANGE_KIND not in OWN_ADDRESS_KINDS


def test_mapped_regions_outside_the_range_round_trip_and_check(tmp_path):
    db = tmp_path / "db"
    record = mapped_instance()
    with DatabaseWriter.create(db, INFO) as writer:
        writer.add_kernel(kernel_record())
        dyn, _ = writer.add_instance(STATIC, record)
    inst = Database.open(db).instance(f"{STATIC}/{dyn}")
    assert [(r.kind, r.address) for r in inst.regions] == [
        ("heap", BASE), ("mapped", MAPPED_AT), ("mapped", MAPPED_AT + (2 << 20))]
    name = f"r-{MAPPED_AT:016x}"
    assert inst.epilogue(name).tobytes() == record.epilogue[1].data.tobytes()
    plain = zarr.open_group(str(db), mode="r")[f"kernels/{STATIC}/instances/{dyn}"]
    assert plain[f"prologue/{name}"].shape == (2 << 20,)
    check = subprocess.run([sys.executable, "-m", "mneme.cli", "check", str(db)],
                           capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr


def test_restore_plans_mapped_memory_at_its_own_address():
    """What replay maps: heap spans inside the range, mapped (like managed) spans at their
    own addresses, merged to whole granules."""
    from mneme.replay.engine.restore import merge_spans

    inst_regions = [r for r in mapped_instance().prologue]
    own = merge_spans([r.info() for r in inst_regions if r.kind in OWN_ADDRESS_KINDS], 2 << 20)
    assert [(s.address, s.size) for s in own] == [(MAPPED_AT, 4 << 20)]

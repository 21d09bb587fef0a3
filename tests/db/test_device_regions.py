"""Several GPUs in one recorded process (issue 25, docs/format.md "Devices"): each instance
says which GPU it ran on and that GPU's own address range; memory of another GPU that the
launch reached is a "peer" region naming its GPU. Written by the C++ writer (directly and
through the snapshot pipeline the recorder uses), read back, listed, checked; the layout
rules refuse a peer region without a GPU or inside the instance's own range."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from db_support import BASE
from mneme.replay.db import Database
from mneme.replay.db.integrity import check_database
from mneme.replay.db.region_layout import region_layout_problem
from mneme.replay.db.schema import RegionInfo

native = pytest.importorskip("mneme.runtime._native")

STATIC = "feedc0de00000025"
IR = b"BC\xc0\xde" + bytes(64)
SIZE = 1 << 30
STRIDE = 2 * SIZE  # the recorder's: the range, then the managed arena's room
GPU1_BASE = BASE + STRIDE


def _regions(rng, *placed):
    out = []
    for kind, address in placed:
        before = rng.integers(0, 256, 4096, dtype=np.uint8)
        after = before.copy()
        after[:16] ^= 0xFF
        out.append((kind, address, "", before, after))
    return out


def _write(writer, rng, pipeline: bool):
    writer.add_kernel(STATIC, "_Z3addPfPKfS1_i", "add(float*, float const*, float const*, int)", IR,
                      [(8, 8, 0, True, False)], [])
    # on GPU 1, reading GPU 0's memory (a peer region) beside its own heap
    own_then_peer = _regions(rng, ("peer", BASE + 4096), ("heap", GPU1_BASE + 8192))
    peer = writer.add_instance(STATIC, (4, 1, 1), (128, 1, 1), 0, b"\1" * 8, own_then_peer,
                               devices=native.InstanceDevices(1, GPU1_BASE, SIZE, [0, -1]))
    # on GPU 0, its own memory only
    alone = writer.add_instance(STATIC, (4, 1, 1), (128, 1, 1), 0, b"\2" * 8, _regions(rng, ("heap", BASE)),
                                devices=native.InstanceDevices(0, BASE, SIZE))
    # written as before recordings said (one GPU)
    old = writer.add_instance(STATIC, (4, 1, 1), (128, 1, 1), 0, b"\3" * 8, _regions(rng, ("heap", BASE + SIZE // 2)))
    if pipeline:
        writer.flush()
    return peer[0], alone[0], old[0]


@pytest.mark.parametrize("pipeline", [False, True], ids=["writer", "pipeline"])
def test_instances_say_their_gpu_range_and_peer_memory(tmp_path, pipeline):
    path = tmp_path / "two.rdb"
    rng = np.random.default_rng(25)
    if pipeline:
        writer = native.SnapshotWriter(str(path), BASE, SIZE)
    else:
        writer = native.RecordingWriter(str(path), BASE, SIZE)
    peer, alone, old = _write(writer, rng, pipeline)
    if pipeline:
        writer.close()
    db = Database.open(path)
    kernel = db.kernel(STATIC)
    on_gpu1 = kernel.instance(peer)
    assert on_gpu1.device == 1 and on_gpu1.address_range == (GPU1_BASE, SIZE)
    assert on_gpu1.peer_devices == (0,)
    assert [(r.kind, r.device) for r in on_gpu1.regions] == [("peer", 0), ("heap", None)]
    assert on_gpu1.epilogue(f"r-{BASE + 4096:016x}")[:16].tolist() != on_gpu1.prologue(f"r-{BASE + 4096:016x}")[:16].tolist()
    assert kernel.instance(alone).device == 0 and kernel.instance(alone).peer_devices == ()
    before = kernel.instance(old)
    assert before.device is None and before.address_range == (BASE, SIZE)
    assert [p for p in check_database(db) if p.fatal] == []
    listing = subprocess.run([sys.executable, "-m", "mneme.cli", "ls", str(path), "--json"],
                             capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr
    rows = {r["instance"].split("/")[1]: r for r in json.loads(listing.stdout)}
    assert (rows[peer]["device"], rows[peer]["peer_devices"]) == (1, [0])
    assert (rows[alone]["device"], rows[old]["device"]) == (0, None)
    table = subprocess.run([sys.executable, "-m", "mneme.cli", "ls", str(path)],
                           capture_output=True, text=True, timeout=120, env={"COLUMNS": "250"})
    assert table.returncode == 0 and "1+0" in table.stdout, table.stdout


def test_a_peer_region_must_name_its_gpu_and_lie_outside_the_own_range(tmp_path):
    rng = np.random.default_rng(3)
    writer = native.RecordingWriter(str(tmp_path / "bad.rdb"), BASE, SIZE)
    writer.add_kernel(STATIC, "_Z1kPf", "k(float*)", IR, [(8, 8, 0, True, False)], [])
    with pytest.raises(Exception, match="peer region .* names no device"):
        writer.add_instance(STATIC, (1, 1, 1), (32, 1, 1), 0, b"\0" * 8, _regions(rng, ("peer", BASE + 4096)),
                            devices=native.InstanceDevices(1, GPU1_BASE, SIZE))
    with pytest.raises(Exception, match="inside the instance's own address range"):
        writer.add_instance(STATIC, (1, 1, 1), (32, 1, 1), 0, b"\0" * 8, _regions(rng, ("peer", GPU1_BASE)),
                            devices=native.InstanceDevices(1, GPU1_BASE, SIZE, [0]))
    # the reader's rules say the same
    no_device = [RegionInfo("peer", BASE, 64)]
    assert "names no device" in region_layout_problem(no_device, GPU1_BASE, SIZE)
    inside = [RegionInfo("peer", GPU1_BASE + 64, 64, device=0)]
    assert "inside the instance's own address range" in region_layout_problem(inside, GPU1_BASE, SIZE)
    assert region_layout_problem([RegionInfo("peer", BASE, 64, device=0)], GPU1_BASE, SIZE) is None

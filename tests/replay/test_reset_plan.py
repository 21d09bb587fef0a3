"""What a timed iteration puts back (engine/reset_plan.py): the bytes the recorded launch
changed, read from the recording's metadata and chunk files alone, as both writers
(Python and the recorder's C++ writer) store them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from mneme.replay.db import Database, DatabaseWriter, InstanceRecord, Region
from mneme.replay.engine.reset_plan import MAX_COPIES, changed_ranges, merge, written_copies

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "db"))
from db_support import BASE, INFO, STATIC, kernel_record  # noqa: E402

CHUNK = 256 << 10
SIZE = 8 * CHUNK
ARGS = bytes(16)


def _regions():
    """An input the launch reads only, an output it changes in chunks 1 and 6, a
    scratch region it changes everywhere."""
    rng = np.random.default_rng(7)
    before = {name: rng.integers(0, 256, SIZE, dtype=np.uint8) for name in ("input", "output", "scratch")}
    after = {name: data.copy() for name, data in before.items()}
    after["output"][1 * CHUNK + 17] ^= 0xFF
    after["output"][6 * CHUNK: 6 * CHUNK + 4000] += 1
    after["scratch"] = rng.integers(0, 256, SIZE, dtype=np.uint8)
    names = list(before)
    address = {name: BASE + i * 2 * SIZE for i, name in enumerate(names)}
    return ([Region("heap", address[n], before[n]) for n in names],
            [Region("heap", address[n], after[n]) for n in names])


def _python_db(path: Path, epilogue_format: str):
    prologue, epilogue = _regions()
    with DatabaseWriter.create(path, INFO, chunk_size=CHUNK, epilogue_format=epilogue_format) as writer:
        writer.add_kernel(kernel_record())
        dyn, _ = writer.add_instance(STATIC, InstanceRecord((8, 1, 1), (128, 1, 1), ARGS, tuple(prologue),
                                                            tuple(epilogue)))
    return Database.open(path).kernel(STATIC).instance(dyn)


def _cpp_db(path: Path):
    native = pytest.importorskip("mneme.runtime._native")
    prologue, epilogue = _regions()
    writer = native.RecordingWriter(str(path), BASE, 1 << 30, "NVIDIA H100", "9.0", ["./app"], "diff", CHUNK, 1)
    writer.add_kernel(STATIC, "_Z1kPfi", "k(float*, int)", b"BC\xc0\xde" + bytes(60), [(8, 8, 0, True, False)], [])
    regions = [("heap", p.address, "", p.data, e.data) for p, e in zip(prologue, epilogue, strict=True)]
    dyn, _ = writer.add_instance(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, regions)
    del writer
    return Database.open(path).kernel(STATIC).instance(dyn)


@pytest.mark.parametrize("writer", ["python", "cpp"])
def test_only_the_chunks_the_launch_changed_are_put_back(tmp_path, writer):
    instance = _python_db(tmp_path / "p.rdb", "diff") if writer == "python" else _cpp_db(tmp_path / "c.rdb")
    regions = sorted(instance.regions, key=lambda r: r.address)
    unchanged, output, scratch = regions
    assert changed_ranges(instance, unchanged) == []
    assert changed_ranges(instance, output) == [(1 * CHUNK, 2 * CHUNK), (6 * CHUNK, 7 * CHUNK)]
    assert changed_ranges(instance, scratch) == [(0, SIZE)]


def test_an_epilogue_stored_as_bytes_is_put_back_whole_unless_its_checksums_agree(tmp_path):
    instance = _python_db(tmp_path / "b.rdb", "bytes")
    unchanged, output, _ = sorted(instance.regions, key=lambda r: r.address)
    assert changed_ranges(instance, unchanged) == []
    assert changed_ranges(instance, output) == [(0, SIZE)]


def test_copies_map_changed_ranges_into_the_pristine_spans(tmp_path):
    instance = _python_db(tmp_path / "p.rdb", "diff")
    regions = sorted(instance.regions, key=lambda r: r.address)
    # one span per region (as merge_spans makes them), their pristine copies far away
    pristine = [(int(r.address), 0x9000_0000_0000 + i * 0x100_0000, int(r.size)) for i, r in enumerate(regions)]
    copies = written_copies(instance, regions, pristine)
    out, scratch = regions[1].address, regions[2].address
    assert copies == [
        (out + 1 * CHUNK, pristine[1][1] + 1 * CHUNK, CHUNK),
        (out + 6 * CHUNK, pristine[1][1] + 6 * CHUNK, CHUNK),
        (scratch, pristine[2][1], SIZE),
    ]
    assert sum(size for *_, size in copies) == 10 * CHUNK  # of 24 chunks recorded


def test_close_ranges_merge_and_too_many_copies_fall_back_to_whole_spans(tmp_path, monkeypatch):
    assert merge([(0, 10), (100, 200), (1 << 20, 2 << 20)], gap=1000) == [(0, 200), (1 << 20, 2 << 20)]
    instance = _python_db(tmp_path / "p.rdb", "diff")
    regions = sorted(instance.regions, key=lambda r: r.address)
    pristine = [(int(r.address), 0x9000_0000_0000 + i * 0x100_0000, int(r.size)) for i, r in enumerate(regions)]
    import mneme.replay.engine.reset_plan as plan

    monkeypatch.setattr(plan, "MERGE_GAP", 1)
    monkeypatch.setattr(plan, "MAX_COPIES", 2)
    assert MAX_COPIES > 2
    # three copies needed, two allowed: the spans holding changes are copied whole
    assert plan.written_copies(instance, regions, pristine) == [pristine[1], pristine[2]]


def _with_predecessor(tmp_path, value: str):
    native = pytest.importorskip("mneme.runtime._native")
    prologue, epilogue = _regions()
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "pred.rdb"
    writer = native.RecordingWriter(str(path), BASE, 1 << 30, "NVIDIA H100", "9.0", ["./app"], "diff", CHUNK, 1)
    writer.add_kernel(STATIC, "_Z1kPfi", "k(float*, int)", b"BC\xc0\xde" + bytes(60), [(8, 8, 0, True, False)], [])
    regions = [("heap", p.address, "", p.data, e.data) for p, e in zip(prologue, epilogue, strict=True)]
    dyn, _ = writer.add_instance(STATIC, (8, 1, 1), (128, 1, 1), 0, ARGS, regions)
    writer.set_instance_attribute(STATIC, dyn, "predecessor", value)
    del writer
    return Database.open(path).kernel(STATIC).instance(dyn)


def test_app_mode_replays_what_the_launch_before_wrote_and_read(tmp_path):
    from mneme.replay.engine.predecessor_traffic import plan

    # the producer wrote the input region from 64 KiB in to its end, and 4 KiB the
    # instance did not record (scratch stands in for it); it read 1 MiB elsewhere
    start = BASE + (64 << 10)
    writes = [[start, SIZE - (64 << 10)], [BASE + (100 << 20), 4096]]
    reads = [[BASE + (200 << 20) + 3, 1 << 20]]
    instance = _with_predecessor(tmp_path, json.dumps({"kernel": "produce(float*)", "writes": writes,
                                                       "reads": reads}))
    assert instance.predecessor.kernel == "produce(float*)"
    assert instance.predecessor.reads == ((BASE + (200 << 20) + 3, 1 << 20),)
    assert "read 1 range(s)" in instance.predecessor.describe()
    spans = sorted((int(r.address), int(r.size)) for r in instance.regions)
    traffic = plan(instance, spans, l2_bytes=50 << 20)
    assert traffic.in_place == [(start, SIZE - (64 << 10), True)]
    # outside the recorded memory: on scratch, at its own offsets, whole 16-byte units
    assert traffic.elsewhere == [(0, 4096, True), (4096, (1 << 20) // 16 * 16, False)]
    assert traffic.scratch_bytes == 4096 + (1 << 20)
    assert traffic.segments(0x5000) == [(start, SIZE - (64 << 10), True), (0x5000, 4096, True),
                                        (0x5000 + 4096, 1 << 20, False)]


def test_app_mode_replays_only_the_end_of_traffic_larger_than_l2(tmp_path):
    from mneme.replay.engine.predecessor_traffic import TAIL_FACTOR, plan

    # 2 MiB written in place and two 2 MiB inputs read elsewhere, through a 1 MiB L2:
    # each range is cut to L2's size from its pointer, and of those 3 MiB only the last
    # TAIL_FACTOR MiB are replayed, the same fraction of each range's end
    writes = [[BASE, SIZE]]
    reads = [[BASE + (100 << 20), SIZE], [BASE + (200 << 20), SIZE]]
    instance = _with_predecessor(tmp_path, json.dumps({"kernel": "k", "writes": writes, "reads": reads}))
    spans = sorted((int(r.address), int(r.size)) for r in instance.regions)
    l2 = 1 << 20
    traffic = plan(instance, spans, l2_bytes=l2)
    kept = int(l2 * TAIL_FACTOR / 3)
    start = -(-(BASE + l2 - kept) // 16) * 16
    assert traffic.in_place == [(start, BASE + l2 - start, True)]
    assert traffic.elsewhere == [(0, kept // 16 * 16, False), (kept, kept // 16 * 16, False)]
    assert abs(traffic.bytes - TAIL_FACTOR * l2) < 64


def test_without_a_known_predecessor_app_mode_keeps_its_old_state(tmp_path):
    from mneme.replay.engine.predecessor_traffic import plan

    unknown = _with_predecessor(tmp_path, '{"kernel": "cublas_gemm", "writes": null}')
    assert unknown.predecessor.writes is None
    assert plan(unknown, [], 50 << 20) is None
    assert "unknown" in unknown.predecessor.describe()
    plain = _python_db(tmp_path / "plain.rdb", "diff")
    assert plain.predecessor is None and plan(plain, [], 50 << 20) is None
    # recorded before reads were kept: the writes alone
    older = _with_predecessor(tmp_path / "older", json.dumps({"kernel": "k", "writes": [[BASE, 4096]]}))
    assert older.predecessor.reads is None
    assert plan(older, [(BASE, SIZE)], 50 << 20).in_place == [(BASE, 4096, True)]


def test_the_touch_kernels_table_holds_address_units_and_whether_written():
    import struct

    from mneme.replay.engine.l2_touch import PTX, table_image

    image = table_image([(0x7000_0000_0000, 4096, True), (0x7100_0000_0000, 160, False)])
    assert struct.unpack("<6Q", image) == (0x7000_0000_0000, 256, 1, 0x7100_0000_0000, 10, 0)
    assert ".entry mneme_l2_touch" in PTX


def test_a_damaged_predecessor_is_one_line_in_check(tmp_path):
    from mneme.replay.db import CorruptDataError

    instance = _with_predecessor(tmp_path, '{"kernel": "k", "writes": [[1]]}')
    with pytest.raises(CorruptDataError, match="predecessor"):
        instance.predecessor  # noqa: B018
    assert "predecessor" in instance.problem()

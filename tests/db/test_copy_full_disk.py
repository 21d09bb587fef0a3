"""``mneme copy`` onto a disk that fills up (issue 35 item 5), on a real size-limited
tmpfs: one line naming the destination and what to do, a non-zero exit, and a destination
that checks out with whole kernels only (each with every instance of its source) and no
orphaned chunk in its content store."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from db_support import BASE
from mneme.cli.main import cli
from mneme.replay.db import (
    Database,
    DatabaseWriter,
    InstanceRecord,
    KernelRecord,
    RecordingInfo,
    Region,
    content_store,
)

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "examples.rdb"
STATIC = "feedc0de00000035"


@pytest.fixture
def small_disk(tmp_path):
    """Mounts a fresh tmpfs of the requested size; unmounted afterwards."""
    mounted: list[Path] = []

    def mount(kib: int) -> Path:
        point = tmp_path / f"disk-{uuid.uuid4().hex[:8]}"
        point.mkdir()
        if shutil.which("mount") is None:
            pytest.skip("no mount command: cannot make a small disk to fill")
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={kib}k", "tmpfs", str(point)],
                                capture_output=True, text=True)
        if result.returncode != 0:
            pytest.skip("mounting a size-limited tmpfs is not permitted here (needs root with "
                        f"CAP_SYS_ADMIN): {result.stderr.strip()}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", str(point)], check=False)


def run(*args) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception  # a traceback: the test fails
    return result.exit_code, result.stdout, result.stderr


# Sizes that run out inside a kernel at different points (measured with the examples
# database: before a kernel's first instance, between its two instances, and on the
# last kernel), so a kernel committed without all its instances would show.
@pytest.mark.parametrize("kib", [500, 1000, 1800])
def test_copy_onto_a_full_disk_names_the_destination_and_keeps_whole_kernels(small_disk, kib):
    dst = small_disk(kib) / "dst.rdb"
    code, out, err = run("copy", EXAMPLES, dst)
    assert code != 0, out
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert str(dst) in line and "No space left on device" in line, line
    assert str(EXAMPLES) not in line, line  # the source is not where space ran out
    assert "free space" in line and "another" in line, line

    source = {k.static_hash: set(k.instance_hashes()) for k in Database.open(EXAMPLES).kernels()}
    copied = {k.static_hash: set(k.instance_hashes()) for k in Database.open(dst).kernels()}
    assert len(copied) < len(source)  # the disk really filled
    for static, instances in copied.items():
        assert instances == source[static], f"kernel {static} kept without all its instances"
    assert out.count("copied ") == len(copied)  # each kernel kept was reported, no other
    code, check_out, check_err = run("check", dst)
    assert code == 0 and "ok:" in check_out, check_out + check_err
    store = content_store.store_dir(dst)
    if store.is_dir():
        orphans = [p for sub in store.iterdir() for p in sub.iterdir() if os.lstat(p).st_nlink < 2]
        assert orphans == []
    assert not any((dst / ".mneme" / "staging").iterdir())  # no half-copied node left behind



def test_a_failed_copy_leaves_no_orphaned_shared_chunk(small_disk, tmp_path):
    """A source whose instances share chunks (the content store): the store entries the
    failed kernel's instances linked at the destination are collected with them."""
    pytest.importorskip("mneme.runtime._native")  # the chunk digest: no store without it
    src = tmp_path / "shared.rdb"
    rng = np.random.default_rng(35)
    pool = rng.integers(0, 256, 512 << 10, dtype=np.uint8)  # incompressible, in every instance
    with DatabaseWriter.create(src, RecordingInfo(vas_base=BASE, vas_size=1 << 30),
                               chunk_size=64 << 10) as writer:
        writer.add_kernel(KernelRecord(STATIC, "_Z3barv", b"BC\xc0\xde" + bytes(256), "bar()"))
        for i in range(4):
            own = rng.integers(0, 256, 256 << 10, dtype=np.uint8)
            shared = Region("heap", BASE, pool)
            writer.add_instance(STATIC, InstanceRecord(
                (1, 1, 1), (32 * (i + 1), 1, 1), b"\0" * 8,
                (shared, Region("heap", BASE + (1 << 24), own)),
                (shared, Region("heap", BASE + (1 << 24), own[::-1].copy()))))
    dst = small_disk(1500) / "dst.rdb"  # the pool and two instances fit, not four
    code, _out, err = run("copy", src, dst)
    assert code != 0 and str(dst) in err
    assert Database.open(dst).kernels() == []
    store = content_store.store_dir(dst)
    assert [p for sub in store.iterdir() for p in sub.iterdir()] == []
    assert run("check", dst)[0] == 0

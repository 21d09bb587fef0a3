"""The file-system work of the recorder's writes, counted (issue 22, "writes at disk speed").

A framework process snapshots hundreds to thousands of small regions per launch, and each
region costs the writer folders, documents and chunk links: the directory operations
per region are what decide the write time there. Counted with strace on the real
pipeline (``_native.SnapshotWriter``): per instance, one rename for its zarr.json and one
for the commit and none per array (staged documents are written in place); no temporary
is created and removed per chunk (chunks are written as unnamed files and published by
one link); three folders per region (prologue array, its chunk folder, epilogue array).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

native = pytest.importorskip("mneme.runtime._native")

SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from mneme.runtime import _native as native

    path, instances, regions = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    base = 0x200000000000
    w = native.SnapshotWriter(path, base, 1 << 30, "g", "9.0", ["app"], "diff", 64 << 10, 1, 0, 2)
    w.add_kernel("feedc0de00000022", "_Z1kv", "k()", b"BC\\xc0\\xde" + bytes(64), [], [])
    rng = np.random.default_rng(5)
    for k in range(instances):
        regs = []
        for r in range(regions):
            before = rng.integers(0, 256, 256 + 64 * r, dtype=np.uint8)  # all distinct chunks
            after = before.copy()
            after[:8] = ~before[:8]  # deltas all distinct too (0xFF... beside random bytes)
            after[8:16] = rng.integers(0, 256, 8, dtype=np.uint8)
            regs.append(("heap", base + r * 65536, "", before, after))
        dyn, new = w.add_instance("feedc0de00000022", (k + 1, 1, 1), (1, 1, 1), 0, k.to_bytes(8, "little"), regs)
        assert new
    w.flush()
    assert w.error() == "", w.error()
    w.close()
""")

CALLS = "rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,link,linkat"
CALL = re.compile(r'^(?:\d+ +)?(\w+)\((.*)\) += (-?\d+)')


def calls(tmp_path: Path, name: str, instances: int, regions: int) -> list[tuple[str, str, int]]:
    """(call, arguments, result) of every traced call of one run of SCRIPT."""
    out = tmp_path / f"{name}.strace"
    script = tmp_path / "write.py"
    script.write_text(SCRIPT)
    result = subprocess.run(["strace", "-f", "-qq", "-e", f"trace={CALLS}", "-o", str(out), sys.executable,
                             str(script), str(tmp_path / f"{name}.rdb"), str(instances), str(regions)],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0 and "ptrace" in result.stderr.lower():
        pytest.skip("strace cannot trace here (ptrace refused)")
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    # calls another thread interrupted: "mkdir(... <unfinished ...>" then "<... mkdir resumed>) = 0"
    pending: dict[str, str] = {}
    found = []
    for line in text.splitlines():
        pid = line.split(" ", 1)[0]
        if line.endswith("<unfinished ...>"):
            pending[pid] = line[: -len("<unfinished ...>")].rstrip()
            continue
        if "resumed>" in line:
            line = pending.pop(pid, "") + line.split("resumed>", 1)[1]
        m = CALL.match(line)
        if m:
            found.append((m.group(1), m.group(2), int(m.group(3))))
    return found


def per_instance(tmp_path: Path, instances: int, regions: int, keep, tag: str = "") -> dict[str, float]:
    """Calls per instance for which keep(call, arguments, result) holds, by kind, beyond
    what creating the database and storing the kernel take."""
    totals = []
    for name, n in ((f"none{tag}", 0), (f"some{tag}", instances)):
        count = {"rename": 0, "unlink": 0, "mkdir": 0, "link": 0}
        for call, args, result in calls(tmp_path, name, n, regions):
            kind = next(k for k in count if call.startswith(k))
            count[kind] += keep(call, args, result)
        totals.append(count)
    return {k: (totals[1][k] - totals[0][k]) / instances for k in totals[0]}


def tmpfile_supported(folder: Path) -> bool:
    try:
        fd = os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o644)
    except (OSError, AttributeError):
        return False
    os.close(fd)
    return True


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_directory_operations_per_instance_and_region(tmp_path):
    regions, instances = 40, 3
    done = per_instance(tmp_path, instances, regions, lambda call, args, result: result == 0)
    # the instance's zarr.json (replaced atomically) and the commit; nothing per array
    assert done["rename"] == 2, done
    # four folders per region (prologue and epilogue arrays, each with c/: every region
    # changed here) and a few per node (staging, node, prologue, epilogue, args, args/c);
    # the content store's 256 folders are made once per database
    assert done["mkdir"] <= 4 * regions + 6 + 256 / instances, done
    # every chunk is new here, prologue and delta (and args): one link publishes it in the
    # store, one puts it in its array
    assert done["link"] == 2 * (2 * regions + 1), done
    if tmpfile_supported(tmp_path):
        in_store = per_instance(tmp_path, instances, regions, lambda call, args, result: "/.mneme/chunks/" in args
                                and call.startswith("unlink"), tag="-store")
        assert in_store["unlink"] == 0, in_store  # no named temporaries created and removed

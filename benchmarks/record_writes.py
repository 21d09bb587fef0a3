"""The recorder's background writes (diff, compress, write, commit) against the disk's own
sequential write bandwidth, in one run, without a GPU.

    hatch run python benchmarks/record_writes.py [--mib 160] [--instances 19] [--dir DIR]
                                                  [--threads 0] [--level 1] [--strace]

Pushes framework-like snapshots through the real pipeline and writer
(``_native.SnapshotWriter``: the C++ SnapshotPipeline and RecordingWriter of ``mneme
record``, host memory standing in for the device) into a temporary database. The working
set imitates a PyTorch eager process: caching-allocator segments holding float32 weights
(normal, small), activations (ReLU'd: half zeros), never-touched zero memory, odd-sized
small tensors, and `--small` tiny regions (device globals and small buffers, most of them
zero, a few rewritten by each launch). Every instance snapshots the whole working set; its kernel rewrites one
activation tensor (the epilogue changes part of the prologue), and unrecorded work between
two launches rewrites another, so later prologues are mostly chunks already stored. The
issue's PyTorch script: 19 instances, 6.5 GB of snapshots, 0.46 GB stored (`--mib 170`).

Prints bytes in (snapshot bytes), bytes stored, the application's time in captures, the
drain at the end (as `drain_s` at exit), the wall time, the background thread-seconds per
stage (the pipeline's statistics), the file-system calls of the writes when `--strace`
is given (strace -c -f of a child run), and the ratios of the write throughput (stored
bytes per wall second of the background work, and per write thread-second) to the disk's
sequential write bandwidth measured in the same run (one large file written and
fsync'ed, and the same without fsync: page-cache speed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

BASE = 0x200000000000
VAS = 1 << 40
STATIC = "be0c4b0000000022"
SEGMENT = 20 << 20  # PyTorch's caching allocator: large segments of 20 MiB (and 2 MiB)


def disk_bandwidth(folder: Path, size: int) -> tuple[float, float]:
    """(bytes/s written with fsync, bytes/s into the page cache) of one large file."""
    block = np.random.default_rng(1).integers(0, 256, 8 << 20, dtype=np.uint8).tobytes()
    results = []
    for sync in (True, False):
        path = folder / f"disk-bandwidth-{int(sync)}.bin"
        start = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        written = 0
        while written < size:
            written += os.write(fd, block)
        if sync:
            os.fsync(fd)
        os.close(fd)
        results.append(written / (time.perf_counter() - start))
        os.unlink(path)
    return results[0], results[1]


class WorkingSet:
    """Regions of a framework process: (address, kind of content, bytes)."""

    def __init__(self, total: int, small: int, rng):
        self.rng = rng
        self.regions: list[list] = []  # [address, kind, array]
        address, made = BASE, 0
        kinds = ["weights", "activations", "zeros", "activations", "weights", "small"]
        i = 0
        while made < total:
            kind = kinds[i % len(kinds)]
            if kind == "small":
                size = int(rng.integers(1, 64)) * 4096 + int(rng.integers(0, 1024)) * 4
            else:
                size = min(SEGMENT * int(rng.integers(1, 4)), max(4096, total - made))
            size = size // 4 * 4
            self.regions.append([address, kind, self.fill(kind, size)])
            address += (size + (2 << 20) - 1) // (2 << 20) * (2 << 20)
            made += size
            i += 1
        if len(self.regions) == 1:  # a small working set: one segment, an activation
            self.regions[0][1:] = ["activations", self.fill("activations", self.regions[0][2].size)]
        # Device globals and small tensors: many regions of a few bytes to 64 KiB, most of
        # them zero, a few rewritten by each launch.
        for _ in range(small):
            size = int(rng.choice([4, 8, 64, 256, 4096, 65536]))
            data = np.zeros(size, np.uint8) if rng.random() < 0.7 else rng.integers(0, 256, size, dtype=np.uint8)
            self.regions.append([address, "global", data])
            address += (size + 511) // 512 * 512
        self.outputs = [k for k, r in enumerate(self.regions) if r[1] == "activations"]
        self.small = [k for k, r in enumerate(self.regions) if r[1] == "global"]

    def fill(self, kind: str, size: int) -> np.ndarray:
        n = size // 4
        if kind == "zeros":
            return np.zeros(size, np.uint8)
        if kind == "weights":
            return (self.rng.standard_normal(n, dtype=np.float32) * 0.02).view(np.uint8)
        if kind == "small":
            return self.rng.standard_normal(n, dtype=np.float32).view(np.uint8)
        a = self.rng.standard_normal(n, dtype=np.float32)
        np.maximum(a, 0, out=a)  # ReLU: half the values zero
        if n > 4:
            a[n - n // 8:] = 0  # the tail of a segment the allocator has not handed out
        return a.view(np.uint8)

    def launch(self, k: int):
        """One instance's regions (kind, address, symbol, before, after), then the state moves on."""
        out = self.outputs[k % len(self.outputs)]
        new = self.fill("activations", self.regions[out][2].size)
        regions = []
        touched = set(self.rng.choice(self.small, min(len(self.small), 8), replace=False).tolist()) if self.small else set()
        for j, (address, _kind, data) in enumerate(self.regions):
            after = new if j == out else data
            if j in touched:  # a counter or a small buffer the kernel writes
                after = self.rng.integers(0, 256, data.size, dtype=np.uint8)
                self.regions[j][2] = after
            regions.append(("heap", address, "", data, after))
        self.regions[out][2] = new
        other = self.outputs[(k * 7 + 3) % len(self.outputs)]  # unrecorded work between launches
        self.regions[other][2] = self.fill("activations", self.regions[other][2].size)
        return regions


def run(args) -> dict:
    from mneme.runtime import _native as native

    work = Path(tempfile.mkdtemp(prefix="mneme-writes-", dir=args.dir))
    try:
        rng = np.random.default_rng(22)
        ws = WorkingSet(int(args.mib * (1 << 20)), args.small, rng)
        launches = [ws.launch(k) for k in range(args.instances)]  # made before timing
        snapshot = sum(2 * r[3].size for regions in launches for r in regions)
        db = work / "bench.rdb"
        start = time.perf_counter()
        w = native.SnapshotWriter(str(db), BASE, VAS, "bench", "9.0", ["bench"], "diff", 4 << 20, args.level,
                                  int(args.host_memory * (1 << 30)), args.threads)
        w.add_kernel(STATIC, "_Z5benchPf", "bench(float*)", b"BC\xc0\xde" + bytes(64), [(8, 8, 0, True, False)], [])
        strace = Strace(args.strace)
        cpu = os.times()
        start = time.perf_counter()  # (strace attaches first)
        captured = 0.0
        for k, regions in enumerate(launches):
            t = time.perf_counter()
            dyn, new = w.add_instance(STATIC, (k + 1, 1, 1), (256, 1, 1), 0, k.to_bytes(8, "little"), regions)
            captured += time.perf_counter() - t
            assert new
        t = time.perf_counter()
        w.flush()
        drain = time.perf_counter() - t
        wall = time.perf_counter() - start
        cpu_end = os.times()
        cpu_s = (cpu_end.user - cpu.user) + (cpu_end.system - cpu.system)
        syscalls = strace.close()
        stats = w.stats()
        error = w.error()
        w.close()
        if error:
            raise SystemExit(f"the pipeline failed: {error}")
        disk = sum(f.stat().st_size for f in db.rglob("*") if f.is_file() and f.stat().st_nlink == 1) + sum(
            f.stat().st_size for f in (db / ".mneme" / "chunks").rglob("*") if f.is_file())
        if args.check:
            from mneme.replay.db import Database
            from mneme.replay.db.integrity import check_database

            problems = check_database(Database.open(db))
            if problems:
                raise SystemExit(f"mneme check: {problems[:3]}")
        fsync_bw, cache_bw = disk_bandwidth(work, args.disk_mib << 20)
        return {"snapshot_bytes": snapshot, "stats": stats, "captured_s": captured, "drain_s": drain,
                "wall_s": wall, "cpu_s": cpu_s, "disk_bytes": disk, "disk_fsync_Bps": fsync_bw, "disk_cache_Bps": cache_bw,
                "instances": args.instances, "cores": os.cpu_count(), "syscalls": syscalls}
    finally:
        shutil.rmtree(work, ignore_errors=True)


class Strace:
    """strace -c of this process's threads (the pipeline's included) while it is open."""

    CALLS = ("openat,write,close,link,linkat,unlink,unlinkat,rename,renameat,renameat2,mkdir,mkdirat,"
             "newfstatat,statx,fsync,fdatasync,syncfs,sync_file_range,getdents64,lseek,read")

    def __init__(self, enabled: bool):
        self.process = None
        self.out = None
        if not enabled or not shutil.which("strace"):
            return
        self.out = tempfile.NamedTemporaryFile(suffix=".txt", delete=False)
        tids = [a for t in os.listdir("/proc/self/task") for a in ("-p", t)]
        self.process = subprocess.Popen(["strace", "-c", "-f", "-e", f"trace={self.CALLS}", "-o",
                                         self.out.name, *tids], stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # attached

    def close(self) -> str:
        if not self.process:
            return ""
        self.process.send_signal(signal.SIGINT)
        self.process.wait()
        text = Path(self.out.name).read_text()
        os.unlink(self.out.name)
        return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mib", type=float, default=160, help="working set, MiB (170: the issue's script)")
    parser.add_argument("--instances", type=int, default=19)
    parser.add_argument("--small", type=int, default=1000,
                        help="small regions per instance (device globals, small tensors)")
    parser.add_argument("--threads", type=int, default=0, help="background threads (0: the pipeline's default)")
    parser.add_argument("--level", type=int, default=1, help="zstd level")
    parser.add_argument("--host-memory", type=float, default=0, help="staging cap, GiB (0: default)")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--disk-mib", type=int, default=1024, help="size of the disk-bandwidth file")
    parser.add_argument("--check", action="store_true", help="mneme check the database afterwards")
    parser.add_argument("--strace", action="store_true", help="count the system calls (slows the run)")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args()
    r = run(args)
    if args.json:
        print(json.dumps(r))
        return
    s = r["stats"]
    gb = 1e9
    stored = s["stored_bytes"]
    print(f"record_writes: {r['instances']} instances, {r['cores']} cores, {s['threads']} background threads, "
          f"zstd level {args.level}")
    print(f"  bytes in (snapshots)   {r['snapshot_bytes'] / gb:8.3f} GB   (unchanged, not copied: "
          f"{s['unchanged_bytes'] / gb:.3f} GB)")
    print(f"  bytes stored           {stored / gb:8.3f} GB   (on disk {r['disk_bytes'] / gb:.3f} GB, "
          f"{s['deduplicated_chunks']} chunks deduplicated)")
    print(f"  wall                   {r['wall_s']:8.2f} s    (captures {r['captured_s']:.2f} s, "
          f"drain at the end {r['drain_s']:.2f} s, blocked_s {s['blocked_s']:.2f}, wait_s {s['wait_s']:.2f})")
    print(f"  process CPU time       {r['cpu_s']:8.2f} s    (all threads, user + system)")
    print("  thread-seconds         " + "  ".join(f"{k}={s[k]:.2f}" for k in
                                                  ("write_s", "commit_s", "encode_s", "hash_s", "crc_s", "delta_s", "decode_s") if k in s))
    disk = r["disk_fsync_Bps"]
    e2e = stored / r["wall_s"]
    per_thread = stored / s["write_s"] if s["write_s"] > 0 else float("inf")
    print(f"  disk sequential write  {disk / gb:8.3f} GB/s with fsync, {r['disk_cache_Bps'] / gb:.3f} GB/s "
          f"into the page cache ({args.disk_mib} MiB file)")
    print(f"  stored / wall          {e2e / gb:8.3f} GB/s = {e2e / disk:.2f}x the disk")
    print(f"  stored / write_s       {per_thread / gb:8.3f} GB/s = {per_thread / disk:.2f}x the disk "
          f"(the write stage alone, per thread-second)")
    print(f"  snapshots / wall       {r['snapshot_bytes'] / r['wall_s'] / gb:8.3f} GB/s")
    if r["syscalls"]:
        print("  file-system calls of the captures and writes (strace -c -f; times under strace are slower):")
        print(r["syscalls"])


if __name__ == "__main__":
    main()

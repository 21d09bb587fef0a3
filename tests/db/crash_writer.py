"""A writer process for the crash and concurrency tests: writes instances forever (or N).

    python crash_writer.py DB START [COUNT]

Instance i is fully determined by i (see ``make_instance``), so a reader can check every
listed instance byte for byte; each also holds one of three shared pools, which the
content store keeps once.
"""

from __future__ import annotations

import sys

import numpy as np
from mneme.replay.db import DatabaseWriter, InstanceRecord, KernelRecord, RecordingInfo, Region

BASE = 0x7F0000000000
INFO = RecordingInfo(vas_base=BASE, vas_size=1 << 30)
STATIC = "c0ffee0000000001"
KERNEL = KernelRecord(STATIC, "_Z5crashv", b"BC\xc0\xde" + bytes(100), "crash()")
CHUNK = 64 << 10


#: inputs many instances share (a lookup table, a mesh): deduplicated through the content store
POOLS = [np.random.default_rng(10_000 + p).integers(0, 256, 256 << 10, dtype=np.uint8) for p in range(3)]


def make_instance(i: int) -> InstanceRecord:
    rng = np.random.default_rng(i)
    size = int(rng.integers(1 << 18, 3 << 20))
    before = rng.integers(0, 256, size, dtype=np.uint8)
    after = before.copy()
    after[rng.integers(0, size, 64)] ^= 0xA5
    second = np.full(int(rng.integers(1, 1 << 16)), i % 251, dtype=np.uint8)
    return InstanceRecord(
        grid=(1, 1, 1), block=(32, 1, 1), args=i.to_bytes(8, "little"),
        prologue=(Region("heap", BASE, before), Region("heap", BASE + (4 << 20), second),
                  Region("heap", BASE + (8 << 20), POOLS[i % 3])),
        epilogue=(Region("heap", BASE, after), Region("heap", BASE + (4 << 20), second[::-1].copy()),
                  Region("heap", BASE + (8 << 20), POOLS[i % 3])),
    )


def main() -> None:
    path, start = sys.argv[1], int(sys.argv[2])
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 30
    with DatabaseWriter.create(path, INFO, chunk_size=CHUNK) as writer:
        writer.add_kernel(KERNEL)
        print("ready", flush=True)
        for i in range(start, start + count):
            writer.add_instance(STATIC, make_instance(i))


if __name__ == "__main__":
    main()

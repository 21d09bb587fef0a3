"""Host bytes streamed to the device through two alternating buffers (restore's host
path, restore.py): a batch decompresses into one while the other's copy runs."""

from __future__ import annotations

import numpy as np

#: bytes decompressed per batch while the previous batch is copied to the device: 64
#: chunks of 4 MiB, enough to keep the pool's threads busy (64 MiB made 8.6 GB restore at
#: 1.3 GB/s on the H200 host, the threads waiting at each batch's end)
STREAM_BATCH = 256 << 20
#: batches smaller than this go through ordinary host memory (page-locking costs more)
_PINNED_FROM = 1 << 20


class HostBatches:
    """Host bytes on their way to the device through two buffers that alternate (page-
    locked for large regions): a batch decompresses into one while the other's copy runs."""

    def __init__(self, device, stream, batch: int, progress=None):
        self.device, self.stream, self.batch = device, stream, max(batch, 1)
        self.progress = progress
        pinned = self.batch >= _PINNED_FROM
        self._buffers = [device.pinned_array(self.batch) if pinned else np.empty(self.batch, np.uint8)
                         for _ in range(2)]
        self._turn = 0

    def stream_in(self, size: int, dst: int, read, xor=None) -> None:
        """``size`` bytes that ``read(lo, hi, out)`` writes into ``out``, to ``dst``; with
        ``xor=(verifier, staging)``: XORed into the bytes at ``dst`` instead, through the
        two ``batch``-sized halves of the device buffer ``staging``."""
        for lo in range(0, size, self.batch):
            hi = min(lo + self.batch, size)
            turn, self._turn = self._turn % 2, self._turn + 1
            buffer = self._buffers[turn][: hi - lo]
            read(lo, hi, buffer)  # while the other buffer's copy runs
            # Waits for the other buffer's copy; this buffer's own last copy was waited for
            # before that one was queued.
            self.stream.synchronize()
            if xor is None:
                self.device.copy_to_device(dst + lo, buffer, self.stream)
            else:
                verifier, staging = xor
                half = staging + turn * self.batch
                self.device.copy_to_device(half, buffer, self.stream)
                verifier.xor_into(dst + lo, half, hi - lo, self.stream)
            if self.progress is not None:
                self.progress(hi - lo)

    def finish(self) -> None:
        self.stream.synchronize()
        self._buffers = []

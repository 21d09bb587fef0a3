"""SpaceContext: what a space builds its parameters from (the recorded launch, the
device's limits); spaces (base.py, builtin.py) and their binding (bound.py) take it."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .parameters import Dim3

__all__ = ["SpaceContext"]


@dataclass(frozen=True)
class SpaceContext:
    """The recorded launch and the device limits a space builds its parameters from.

    Attributes:
        grid: the recorded grid.
        block: the recorded block.
        shared_mem: the recorded dynamic shared memory in bytes.
        scalar_params: indices of the kernel's scalar (non-pointer) parameters
        max_threads_per_block: the device's limit.
        warp_size: the device's warp size.
        multiprocessor_count: the device's multiprocessors.
        max_registers_per_thread: the device's limit.
        max_shared_memory_per_block: dynamic shared memory a block may use (the opt-in
            limit; 48 KiB without a device)
        cluster: the recorded launch's thread-block cluster shape (None: no clusters); every
            grid tried must be a whole number of clusters
        cooperative: the recorded launch was cooperative (its grid synchronises): every grid
            tried must be co-resident on the GPU
        max_threads_per_multiprocessor: resident threads one multiprocessor holds (bounds a
            cooperative grid; without a device, the largest of any NVIDIA GPU, so that no shape
            is excluded wrongly).
        max_blocks_per_multiprocessor: resident blocks one multiprocessor holds (likewise).
    """

    grid: Dim3
    block: Dim3
    shared_mem: int = 0
    scalar_params: tuple[int, ...] = ()
    max_threads_per_block: int = 1024
    warp_size: int = 32
    multiprocessor_count: int = 132
    max_registers_per_thread: int = 255
    max_shared_memory_per_block: int = 48 * 1024
    cluster: Dim3 | None = None
    cooperative: bool = False
    max_threads_per_multiprocessor: int = 2048
    max_blocks_per_multiprocessor: int = 32

    @classmethod
    def from_instance(cls, instance, properties=None) -> SpaceContext:
        """The context of a recorded instance on a device.

        Parameters:
            instance: the instance (its launch, its kernel's parameters).
            properties: the device's properties; None for the defaults (no device).

        Returns:
            The context.
        """
        kernel = instance.kernel
        limits = {}
        if properties is not None:
            limits = {
                "max_threads_per_block": int(properties.max_threads_per_block),
                "warp_size": int(properties.warp_size),
                "multiprocessor_count": int(properties.multiprocessor_count),
            }
            for key in ("max_threads_per_multiprocessor", "max_blocks_per_multiprocessor"):
                if int(getattr(properties, key, 0) or 0):  # (0: not said, as HIP's blocks)
                    limits[key] = int(getattr(properties, key))
            optin = int(getattr(properties, "max_shared_memory_per_block_optin", 0) or 0)
            if optin or getattr(properties, "max_shared_memory_per_block", 0):
                limits["max_shared_memory_per_block"] = optin or int(
                    properties.max_shared_memory_per_block)
        return cls(
            grid=tuple(int(v) for v in instance.grid),  # type: ignore[arg-type]
            block=tuple(int(v) for v in instance.block),  # type: ignore[arg-type]
            shared_mem=int(instance.shared_mem),
            cluster=getattr(instance, "cluster", None),
            cooperative=bool(getattr(instance, "cooperative", False)),
            scalar_params=tuple(i for i, p in enumerate(kernel.params) if not p.is_pointer),
            **limits,
        )

    @property
    def shared_per_thread(self) -> int | None:
        """Bytes of dynamic shared memory per thread when the recorded amount is a whole
        multiple of the block size (``extern __shared__ T s[]`` sized by blockDim): a
        launch with another block size gets that many bytes per thread, not the recorded
        total (which would overrun or starve the kernel's indexing)."""
        threads = math.prod(self.block)
        if self.shared_mem > 0 and threads > 1 and self.shared_mem % threads == 0:
            return self.shared_mem // threads
        return None

    @property
    def dimensions(self) -> int:
        """How many axes the recorded launch uses (1, 2 or 3)."""
        used = [g > 1 or b > 1 for g, b in zip(self.grid, self.block, strict=True)]
        return 3 if used[2] else 2 if used[1] else 1

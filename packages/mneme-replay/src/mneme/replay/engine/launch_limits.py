"""What a launch may be: CUDA's grid and block limits, the device's threads per block,
the recorded thread-block clusters (checked before anything compiles or runs), and, for a
cooperative launch, co-residency (checked once the compiled kernel's occupancy is known)."""

from __future__ import annotations

import math

from .errors import LaunchConfigError

#: CUDA's fixed limits on launch shapes
MAX_BLOCK = (1024, 1024, 64)
MAX_GRID = (2**31 - 1, 65535, 65535)
DEFAULT_SHARED_LIMIT = 48 * 1024

def product(dims) -> int:
    return math.prod(int(d) for d in dims)


def check_clusters(grid, cluster) -> None:
    """Check that a grid can be cut into the recorded launch's thread-block clusters
    (the driver refuses a launch where it cannot).

    Parameters:
        grid: the grid.
        cluster: the recorded cluster shape; None (or empty) for none.

    Raises:
        LaunchConfigError: the grid is not a whole number of clusters.
    """
    if cluster and any(g % c for g, c in zip(grid, cluster, strict=True)):
        raise LaunchConfigError(
            f"grid {'x'.join(map(str, grid))} is not a whole number of the recorded launch's "
            f"thread-block clusters of {'x'.join(map(str, cluster))} blocks: choose a grid "
            "divisible by the cluster shape"
        )


def check_co_residency(grid, block, shared_mem: int, blocks_per_multiprocessor: int,
                       multiprocessors: int) -> None:
    """Check that a cooperative launch's blocks can all be resident at once: a grid-wide
    synchronisation (cooperative_groups' ``this_grid().sync()``) needs every block on the
    GPU together, so the grid is at most the blocks one multiprocessor holds with this
    code (its occupancy for this block and dynamic shared memory) times the
    multiprocessors. The driver would refuse such a launch
    (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE).

    Parameters:
        grid: the grid.
        block: the block.
        shared_mem: dynamic shared memory per block.
        blocks_per_multiprocessor: the blocks one multiprocessor holds with this code.
        multiprocessors: the GPU's multiprocessors.

    Raises:
        LaunchConfigError: the grid is larger.
    """
    blocks, most = product(grid), int(blocks_per_multiprocessor) * int(multiprocessors)
    if blocks > most:
        threads = product(block)
        why = (f"{blocks_per_multiprocessor} such blocks fit on one multiprocessor"
               if blocks_per_multiprocessor else "no such block fits on a multiprocessor")
        raise LaunchConfigError(
            f"cooperative launch of {blocks} blocks is not co-resident: with this code, blocks of "
            f"{threads} threads and {shared_mem} bytes of dynamic shared memory, {why}, so at most "
            f"{most} blocks on the {multiprocessors} multiprocessors; choose a smaller grid or "
            "code with fewer registers"
        )


def check_launch(grid, block, shared_mem: int, properties=None) -> None:
    """Check that a launch can run: CUDA's limits, and the device's when known.

    Parameters:
        grid: the grid.
        block: the block.
        shared_mem: dynamic shared memory per block.
        properties: the device's properties (``Device.properties``); None checks CUDA's
            limits only.

    Raises:
        LaunchConfigError: a dimension, the block's threads or the shared memory is
            above a limit.
    """
    for axis, (value, limit) in enumerate(zip(block, MAX_BLOCK, strict=True)):
        if value > limit:
            raise LaunchConfigError(
                f"block dimension {'xyz'[axis]} = {value} exceeds CUDA's limit of {limit}"
            )
    for axis, (value, limit) in enumerate(zip(grid, MAX_GRID, strict=True)):
        if value > limit:
            raise LaunchConfigError(
                f"grid dimension {'xyz'[axis]} = {value} exceeds CUDA's limit of {limit}"
            )
    threads = product(block)
    limit = int(properties.max_threads_per_block) if properties is not None else 1024
    if threads > limit:
        raise LaunchConfigError(
            f"block of {'x'.join(map(str, block))} = {threads} threads exceeds the device "
            f"limit of {limit} threads per block"
        )
    if properties is not None:
        optin = int(properties.max_shared_memory_per_block_optin) or int(
            properties.max_shared_memory_per_block
        )
        if shared_mem > optin:
            raise LaunchConfigError(
                f"{shared_mem} bytes of dynamic shared memory exceed the device limit of "
                f"{optin} bytes per block"
            )

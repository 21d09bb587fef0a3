"""Cooperative launches in replay (issue 35): an instance recorded from a cooperative launch
synchronises its whole grid (cooperative_groups' ``this_grid().sync()``), so every block
must be resident on the replaying GPU at once (docs/replay.md, "Cooperative launches").

The application's build met that for its grid, but another assembler may spend more
registers on the same IR, so such an instance's code gets launch bounds for its grid
(:func:`launch_bounds`, which ``derive_compile_config`` adds); and a launch the compiled
code's occupancy cannot keep resident is refused before it runs, in one line
(:func:`check_resident`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import LAUNCH_REFUSED, KernelFailedError
from .launch_limits import check_co_residency, product

if TYPE_CHECKING:
    from ..jit import CompileConfig
    from .session import ReplaySession

__all__ = ["check_resident", "launch_bounds"]


def launch_bounds(instance, base: CompileConfig, grid, block, multiprocessors: int | None) -> dict[str, Any]:
    """The CompileConfig changes that keep a cooperative instance's ``grid`` resident on
    ``multiprocessors`` (None: compile-only, nothing derived): at most the block's threads
    (unless ``base`` bounds them) and at least the grid's blocks over the multiprocessors
    per multiprocessor (unless ``base`` asks for more). Nothing for other instances."""
    if not getattr(instance, "cooperative", False) or not multiprocessors:
        return {}
    changes: dict[str, Any] = {}
    if base.max_threads is None:
        changes["max_threads"] = product(block)
    resident = -(-product(grid) // int(multiprocessors))
    if base.min_blocks is None or base.min_blocks < resident:
        changes["min_blocks"] = resident
    return changes


def check_resident(session: ReplaySession, function, grid, block, shared: int) -> None:
    """Raise LaunchConfigError (launch-refused) when ``function`` (compiled and loaded) on
    the session's GPU cannot keep ``grid`` blocks of ``block`` with ``shared`` bytes of
    dynamic shared memory resident at once: its occupancy times the multiprocessors."""
    from mneme.runtime import DriverError

    try:
        per_sm = function.max_active_blocks_per_multiprocessor(product(block), shared)
    except DriverError as error:
        raise session._driver_failure(f"the occupancy of the compiled kernel could not be read: {error}",
                                      error, LAUNCH_REFUSED, KernelFailedError) from None
    check_co_residency(grid, block, shared, per_sm, int(session.device.properties.multiprocessor_count))

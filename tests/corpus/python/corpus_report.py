"""Output lines shared by the Python corpus scripts (standard library only).

Each script prints what it computed as ``CHECKSUM <name> <value>`` lines (integers as they
are, floats to 6 significant digits) and its timings as ``TIME <name> <seconds> s`` lines. A
run under ``mneme record`` must print the same CHECKSUM lines as a plain run, within the
tolerance the test gives for float reductions whose order may change between runs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: exit status of a script whose framework is installed without GPU support (the test skips)
SKIP_EXIT = 77
#: exit status of a script whose own result check failed
CHECK_FAILED_EXIT = 2


def checksum(name: str, value: float | int) -> None:
    text = str(value) if isinstance(value, int) else f"{float(value):.6g}"
    print(f"CHECKSUM {name} {text}", flush=True)


@contextmanager
def timed(name: str, synchronize: Callable[[], object] | None = None) -> Iterator[None]:
    """Print how long the block took; ``synchronize`` waits for the GPU work it queued."""
    start = time.perf_counter()
    yield
    if synchronize is not None:
        synchronize()
    print(f"TIME {name} {time.perf_counter() - start:.3f} s", flush=True)


def skip(reason: str) -> None:
    print(f"SKIP {reason}", flush=True)
    sys.exit(SKIP_EXIT)


def require(condition: bool, what: str) -> None:
    """The script's own result check: one line on stderr and exit 2 when it fails."""
    if not condition:
        print(f"RESULT fail: {what}", file=sys.stderr, flush=True)
        sys.exit(CHECK_FAILED_EXIT)

"""The GPU driver's start on a thread of its own, begun first of all in ``mneme tune``.

Loading libcuda and cuInit (and NVML's init, for the clock lock) take 0.1-0.3 s of a
tuning command's fixed start, and release the GIL while they run: begun before the
command imports the replay engine, Optuna and rich, they run beside those imports
instead of after them. The command's own calls (driver_available, the clock lock) then
find them done, or wait for what is left; a driver that fails is seen there, as without
this thread. Once the driver is found, the same thread starts the command's GPU workers
(workers/_early_workers.py), which make their CUDA contexts while the command imports;
in a command server's process (mneme.cli._server), which has nothing left to import, they
fork from the process itself, before the driver starts.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Sequence

from ._option_values import device_ordinals
from .workers._worker_server import fork_context

__all__ = ["start_gpu_driver", "worker_slots"]

#: the NVIDIA driver's control device: where it is missing, no GPU worker is forked early
GPU_NODE = "/dev/nvidiactl"


def worker_slots(devices: str | None, per_device: int) -> list[int] | None:
    """The GPU of each worker ``--devices`` and ``--workers-per-device`` ask for, in the
    executor's slot order (GPU 0 without --devices); None for a value the command itself
    will refuse, with its own line."""
    from .workers._early_workers import gpu_slots

    try:
        return gpu_slots([0] if devices is None else device_ordinals(devices), per_device)
    except ValueError:
        return None


def start_gpu_driver(nvml: bool, workers: Sequence[int] | None = None) -> threading.Thread:
    """Start the CUDA driver (and NVML where ``nvml``: the clocks are to be locked) on a
    thread now, then the workers of the GPUs ``workers`` names (one per entry) once the
    driver is found; nothing it meets is raised (the command's own calls report it).

    Parameters:
        nvml: initialise NVML too.
        workers: the GPU of each worker to start (None: none).

    Returns:
        The thread (not a daemon: the process waits for the driver's start at its end
        rather than leave a thread inside cuInit while the interpreter ends).
    """

    # Imported here, not on the thread: two threads importing at once could meet in an
    # import cycle of a library (importlib then fails one of them); the thread imports
    # nothing, and its calls release the GIL.
    from mneme.runtime import driver_available  # (NumPy, the binding: imported later anyway)
    from mneme.runtime.clock_control import open_nvml

    from .workers import _early_workers

    early = _early_workers.begin(workers) if workers else None  # (an executor waits for them)
    forked = False
    if early is not None and early.workers:  # (started already: a command server's warm ones)
        forked = True
        if forking := fork_context():
            with contextlib.suppress(Exception):  # (the executor starts its own)
                early.fork_compile_pool(forking)
        early = None
    elif early is not None and os.path.exists(GPU_NODE) and (forking := fork_context()):
        # A command server's process, which imported the workers' modules: they fork from
        # it now, before the driver is loaded here (after that, a child could not use the
        # GPU), and make their contexts while the command opens its study; so does the
        # compile pool, which from the workers' fork server would wait for its imports.
        # The command then needs no driver of its own (parse_devices: the workers' start
        # says there is one): this process's cuInit, 0.2-0.3 s on the H200 host, would
        # have run beside theirs and slowed them.
        with contextlib.suppress(Exception):  # (the executor starts its own, saying why)
            early.start(forking)
            early.fork_compile_pool(forking)
        forked = bool(early.workers)
        early = None

    def start() -> None:
        try:
            if not forked and not driver_available():
                return
            if nvml:
                open_nvml()  # (nvmlInit is counted: the lock's own init then returns at once)
            if early is not None:
                early.start()  # (each waits for the workers' server to have imported)
        except Exception:  # noqa: BLE001 - the command's own driver calls say what failed
            return
        finally:
            if early is not None:
                early.done()

    thread = threading.Thread(target=start, name="mneme-gpu-start")
    thread.start()
    return thread

"""The GPU driver's start on a thread of its own, begun first of all in ``mneme tune``.

Loading libcuda and cuInit (and NVML's init, for the clock lock) take 0.1-0.3 s of a
tuning command's fixed start, and release the GIL while they run: begun before the
command imports the replay engine, Optuna and rich, they run beside those imports
instead of after them. The command's own calls (driver_available, the clock lock) then
find them done, or wait for what is left; a driver that fails is seen there, as without
this thread.
"""

from __future__ import annotations

import threading

__all__ = ["start_gpu_driver"]


def start_gpu_driver(nvml: bool) -> threading.Thread:
    """Start the CUDA driver (and NVML where ``nvml``: the clocks are to be locked) on a
    thread now; nothing it meets is raised (the command's own calls report it).

    Parameters:
        nvml: initialise NVML too.

    Returns:
        The thread (not a daemon: the process waits for the driver's start at its end
        rather than leave a thread inside cuInit while the interpreter ends).
    """

    def start() -> None:
        try:
            from mneme.runtime import driver_available  # (its imports: NumPy, the binding)

            if driver_available() and nvml:
                from mneme.runtime.clock_control import open_nvml

                open_nvml()  # (nvmlInit is counted: the lock's own init then returns at once)
        except Exception:  # noqa: BLE001 - the command's own driver calls say what failed
            return

    thread = threading.Thread(target=start, name="mneme-gpu-start")
    thread.start()
    return thread

"""Values that ``mneme tune``'s options name, in a module that imports nothing: the command
defines its options, and starts the workers' fork server, before it imports the replay
engine, Optuna or rich (tune_command.py), and every import before the server's start
delays the workers. The modules that use them (study/_study.py, tune_types.py) import
them from here, so each is written once."""

from __future__ import annotations

__all__ = ["CACHE_MODES", "DEFAULT_CANDIDATES", "PROBE_WORKERS", "SAMPLERS", "device_ordinals"]

#: the samplers --sampler takes
SAMPLERS = ("tpe", "random", "grid", "cmaes", "nsga2")
#: spare workers per device lent to try the probe's shapes beside each other (a shape that
#: runs is replayed again alone for its times). 0: on an H200, 4 of them did not raise
#: trials/s on the faulting kernels (the driver's handling of each fault is the floor, and
#: faults in parallel processes on one GPU did not overlap usefully) and delayed the slot's
#: next task after a failure from 2.4 ms to 1.7 s (docs/tune.md)
PROBE_WORKERS = 0
#: configurations run in the application when --confirm-in-app is given without a number
#: (app_confirm.py; here so that the command reads it without importing that module)
DEFAULT_CANDIDATES = 5
#: --cache's modes: mneme.replay.engine.timing.CACHE_MODES, whose package this module
#: must not import (tests/tune/test_start_order.py checks that the two agree)
CACHE_MODES = ("warm", "cold", "app", "auto")


def device_ordinals(text: str) -> list[int]:
    """--devices' GPU ordinals: ``"0,1"`` -> [0, 1] (read before the driver starts, for the
    early workers: tune/_gpu_start.py, and by the command: _tune_run.py's parse_devices).

    Parameters:
        text: the option's value.

    Returns:
        The ordinals, in the order given.

    Raises:
        ValueError: not distinct whole numbers >= 0 (its message the command's line).
    """
    try:
        devices = [int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        raise ValueError(f"--devices takes GPU ordinals such as 0,1, not {text!r}") from None
    if not devices or any(d < 0 for d in devices):
        raise ValueError(f"--devices takes GPU ordinals such as 0,1, not {text!r}")
    if len(set(devices)) != len(devices):
        raise ValueError("--devices names a GPU twice (use --workers-per-device)")
    return devices

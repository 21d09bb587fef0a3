"""Launch shapes already tried with an instance's recorded code, kept with the recording.

Whether a launch (grid, block, dynamic shared memory) runs the recorded code is a fact of
the instance, not of one tuning run: a kernel sized for its block faults with more
threads whatever the space, pipeline or objective of the run that finds it. Finding out
is what makes a probe slow: on an H200 each faulting shape costs about 0.8 s of search
(the device's handling of the fault and a new worker), so a kernel with 30 invalid shapes
spends 20 s of a 60-trial run on them. The probe's answers are therefore kept beside the
database, like the determinism profile (``.mneme/launch_shapes/<static>/<dynamic>.json``,
a cache any run can rebuild), and a later ``mneme tune`` of the instance starts knowing
them: no known shape is probed again and no known-invalid one proposed.

An entry holds the code it was learned with (the recorded configuration's code key): a run
whose baseline compiles other code (another pipeline, specialization) learns afresh.
"""

from __future__ import annotations

import json
from pathlib import Path

from mneme.replay.files import write_atomic

#: what a shape that ran under the recorded code is stored as (failures: their kind)
VALID = "valid"
_VERSION = 1
_MAX_BYTES = 1 << 24


def cache_path(instance) -> Path:
    """Where the launch shapes learned for an instance are kept, beside its database.

    Parameters:
        instance: the instance.

    Returns:
        ``.mneme/launch_shapes/<static hash>/<dynamic hash>.json`` in the database.
    """
    return (Path(instance.kernel.db.root) / ".mneme" / "launch_shapes" / instance.kernel.static_hash
            / f"{instance.dynamic_hash}.json")


def launch_key(grid, block, shared_mem: int) -> str:
    """One launch, as the cache names it.

    Parameters:
        grid: the grid.
        block: the block.
        shared_mem: the dynamic shared memory.

    Returns:
        ``grid 64x1x1 block 256x1x1 shared 0``.
    """
    return (f"grid {'x'.join(map(str, grid))} block {'x'.join(map(str, block))} "
            f"shared {int(shared_mem)}")


def load(instance, code: str) -> dict[str, str]:
    """The launch shapes learned for an instance with some code.

    Parameters:
        instance: the instance.
        code: the code's identity (what the shapes were learned with).

    Returns:
        Launch key -> ``valid`` or the failure kind; empty when nothing is kept, the
        file is unreadable, or it was learned with other code.
    """
    path = cache_path(instance)
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > _MAX_BYTES:
            return {}
        document = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict) or document.get("version") != _VERSION or document.get("code") != code:
        return {}
    launches = document.get("launches")
    if not isinstance(launches, dict):
        return {}
    return {k: v for k, v in launches.items() if isinstance(k, str) and isinstance(v, str)}


def store(instance, code: str, launches: dict[str, str]) -> bool:
    """Add launch shapes to what is kept for some code (atomically; what another run
    stored meanwhile stays).

    Parameters:
        instance: the instance.
        code: the code's identity.
        launches: launch key -> ``valid`` or the failure kind.

    Returns:
        False where the database is read-only.
    """
    if not launches:
        return True
    path = cache_path(instance)
    merged = {**load(instance, code), **launches}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"version": _VERSION, "code": code, "launches": merged},
                                      indent=1, sort_keys=True).encode())
        return True
    except OSError:
        return False

"""A recording with an application profile, without a GPU: a copy of the shipped CG-solver
recording with a profile written by the C++ writer, as the recorder writes it at exit
(shares chosen: one dominant kernel, a library kernel with no recorded code)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from mneme.replay.db import Database
from tune_support import DATA

EXAMPLES = DATA / "examples.rdb"
# kernel static hash -> in-app ms of its shape, as a recorder would measure
TIMES = {"49130a0ea84acb42": 50.0,   # spmv_csr: the dominant kernel
         "e791b48ba2bccc98": 20.0,   # dot_partial
         "73653fb7628a7afb": 12.0,   # cg_update_xr
         "89521669c746dea4": 8.0,    # cg_update_p
         "0135c0ba31442cad": 1.0}    # cg_reduce
LIBRARY_MS = 9.0  # a library kernel with no recorded code (cuBLAS, say)


def profile_json(db: Database) -> dict:
    entries = []
    for kernel in db.kernels():
        ms = TIMES.get(kernel.static_hash)
        if ms is None:
            continue
        instances = kernel.instances()
        first = instances[0]
        entries.append({
            "name": kernel.name, "device": 0, "grid": list(first.grid), "block": list(first.block),
            "shared_mem": first.shared_mem, "launches": 40, "snapshotted": len(instances),
            "total_ms": ms, "median_ms": ms / 40, "instances": [i.id for i in instances]})
    entries.append({"name": "_Z14library_kernelPf", "device": 0, "grid": [8, 1, 1], "block": [128, 1, 1],
                    "shared_mem": 0, "launches": 3, "snapshotted": 0, "total_ms": LIBRARY_MS,
                    "median_ms": LIBRARY_MS / 3, "instances": []})
    return {"method": "cupti", "kernel_ms": sum(e["total_ms"] for e in entries),
            "launches": sum(e["launches"] for e in entries), "dropped": 0, "instances_tagged": True,
            "kernels": entries}


def profiled_copy(folder: Path) -> Path:
    """``folder``/app.rdb: the shipped recording with the profile above."""
    from mneme.runtime import _native as native

    path = folder / "app.rdb"
    shutil.copytree(EXAMPLES, path)
    db = Database.open(path)
    writer = native.RecordingWriter(str(path), db.info.vas_base, db.info.vas_size)
    writer.set_root_attribute("app_profile", json.dumps(profile_json(db)))
    return path

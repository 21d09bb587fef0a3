"""What a saved configuration was tuned on: the ``identity`` section of a ``best.json``.

``mneme tune --report`` writes, beside the configuration, the database, the kernel (static
hash, mangled and demangled name), the instance(s) and the code (its kind and checksum)
it was tuned on:

    {"compile": {...}, "replay": {...},
     "identity": {"version": 1, "database": "/abs/app.rdb",
                  "kernel": {"static_hash": "5acf...", "name": "_Z5saxpy...",
                             "demangled_name": "saxpy(float, ...)"},
                  "instance": "5acf.../1b78...", "instances": ["5acf.../1b78..."],
                  "code": {"kind": "llvm-bitcode", "crc32c": 1234}, "study": "..."}}

``mneme replay --config best.json`` then needs no ``-rid`` (it replays that instance; no
``-rdb`` either when the database is still where it was), and refuses, in one line, to
apply the configuration to another kernel. Files without an identity (older reports,
``--json`` output of a replay) are read as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .engine import ReplayConfigError

KEY = "identity"
VERSION = 1


def make_identity(database: str | Path, instances: list, **extra: Any) -> dict[str, Any]:
    """The identity of a configuration tuned on ``instances`` (of one kernel) of
    ``database``; ``extra`` adds fields (study, objective, ...)."""
    kernel = instances[0].kernel
    try:
        checksum = kernel.ir_checksum
    except Exception:  # noqa: BLE001 - a format-1 database has none; identity stays usable
        checksum = None
    return {
        "version": VERSION,
        "database": str(Path(database).resolve()),
        "kernel": {"static_hash": kernel.static_hash, "name": kernel.name,
                   "demangled_name": kernel.demangled_name},
        "instance": instances[0].id if len(instances) == 1 else None,
        "instances": [i.id for i in instances],
        "code": {"kind": kernel.code, "crc32c": checksum},
        **extra,
    }


def _text(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= 4096


def read_identity(path: Path) -> dict[str, Any] | None:
    """The identity a ``--config`` file carries, or None; a malformed one is one line."""
    from .db.metadata import read_json_file

    data = read_json_file(path, error=ReplayConfigError)
    if not isinstance(data, dict) or KEY not in data:
        return None
    identity = data[KEY]
    kernel = identity.get("kernel") if isinstance(identity, dict) else None
    instances = identity.get("instances", []) if isinstance(identity, dict) else None
    if (not isinstance(kernel, dict) or not _text(kernel.get("static_hash"))
            or not isinstance(instances, list) or not all(_text(i) for i in instances)
            or not (identity.get("database") is None or _text(identity.get("database")))
            or not (identity.get("instance") is None or _text(identity.get("instance")))):
        raise ReplayConfigError(
            f"{path}: its identity section is malformed (expected kernel.static_hash, "
            "instances and database as written by mneme tune --report)")
    return identity


def database_of(identity: dict[str, Any] | None, path: Path) -> str:
    """The database to replay when ``-rdb`` is not given: the one the file names, if it
    is still there."""
    where = identity.get("database") if identity else None
    if where is None:
        raise ReplayConfigError(
            f"-rdb is needed: {path} does not name the database it was tuned on")
    if not (Path(where) / "zarr.json").is_file():
        raise ReplayConfigError(
            f"{path} was tuned on {where}, which is not there any more: give the database "
            "with -rdb")
    return where


def record_id_of(identity: dict[str, Any] | None, db, path: Path) -> str | None:
    """The instance a file was tuned on, when ``-rid`` is not given and the database
    holds it (for a per-kernel study: the first of its instances)."""
    if not identity:
        return None
    tuned = identity["kernel"]
    if tuned["static_hash"] not in db.kernel_hashes():
        name = tuned.get("demangled_name") or tuned.get("name") or "?"
        raise ReplayConfigError(
            f"{path} was tuned for kernel {name} ({tuned['static_hash']}), which {db.root} "
            "does not hold: give the database it was tuned on with -rdb")
    wanted = identity.get("instance") or (identity.get("instances") or [None])[0]
    kernel_hash, _, instance_hash = (wanted or "").partition("/")
    if kernel_hash == tuned["static_hash"] and (
            instance_hash in db.kernel(kernel_hash).instance_hashes()):
        return wanted
    return tuned["static_hash"]  # not that instance: the kernel's only one, or ask for -rid


def check_kernel(identity: dict[str, Any] | None, instance, path: Path) -> None:
    """Refuse a configuration tuned on another kernel (or on other code of it)."""
    if not identity:
        return
    tuned = identity["kernel"]
    kernel = instance.kernel
    name = tuned.get("demangled_name") or tuned.get("name") or "?"
    if tuned["static_hash"] != kernel.static_hash:
        raise ReplayConfigError(
            f"{path} was tuned for kernel {name} ({tuned['static_hash']}), not "
            f"{kernel.demangled_name} ({kernel.static_hash}): replay it on the kernel it "
            "was tuned for")
    code = identity.get("code") or {}
    try:
        checksum = kernel.ir_checksum
    except Exception:  # noqa: BLE001 - nothing to compare against
        checksum = None
    if (isinstance(code, dict) and code.get("crc32c") is not None and checksum is not None
            and code["crc32c"] != checksum):
        raise ReplayConfigError(
            f"{path} was tuned on other code of kernel {name} (code checksum "
            f"{code['crc32c']}, this database's {checksum}): tune it again on this recording")

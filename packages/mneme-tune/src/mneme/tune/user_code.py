"""Loading a user's Python object named on the command line (``module:attr`` or
``path/to/file.py:attr``), with one-line errors."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from .errors import SpaceError


def load_attribute(spec: str):
    """The object ``attr`` of the module or file before the last ':'."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise SpaceError(f"{spec!r} is not of the form module:name or file.py:name")
    if where.endswith(".py") or "/" in where:
        path = Path(where)
        if not path.is_file():
            raise SpaceError(f"space file {path} does not exist")
        module_name = f"mneme_user_space_{abs(hash(str(path.resolve())))}"
        module_spec = importlib.util.spec_from_file_location(module_name, path)
        module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
        sys.modules[module_name] = module  # classes defined in it find their module (pickle, dataclasses)
        try:
            module_spec.loader.exec_module(module)  # type: ignore[union-attr]
        except Exception as error:  # noqa: BLE001 - the user's file: report it in one line
            raise SpaceError(f"cannot load {path}: {type(error).__name__}: {error}") from None
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as error:
            raise SpaceError(f"cannot import {where}: {error}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise SpaceError(f"{where} has no {attr!r}") from None

"""Bounded JSON parsing and a small declarative schema for the metadata of a database.

Everything read from a ``zarr.json`` (or a configuration file) goes through
``parse_json`` (strict UTF-8, bounded size and nesting, no NaN/Infinity, no duplicate
keys) and then through a schema that checks every type and range before any field is
used, so damaged metadata becomes one ``CorruptDataError`` line naming the field instead
of a ``KeyError``/``TypeError``/``MemoryError`` deep inside a tool.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import CorruptDataError, InvalidNameError, JSONLimitError

#: Deepest nesting of arrays/objects accepted; our documents nest at most 5 levels.
MAX_DEPTH = 32
#: Largest metadata document read (an instance with a million regions is ~200 MB).
MAX_JSON_BYTES = 256 << 20

_BRACKETS = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _depth_ok(raw: bytes, limit: int) -> bool:
    depth = 0
    for match in _BRACKETS.finditer(raw):
        token = match.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return False
        elif token in (b"]", b"}"):
            depth -= 1
    return True


def _no_constants(name: str):
    raise JSONLimitError(f"{name} is not a JSON number")


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise JSONLimitError(f"duplicate key {key!r}")
        out[key] = value
    return out


def parse_json(raw: bytes | str, where: str, *, max_depth: int = MAX_DEPTH,
               error: type[Exception] = CorruptDataError) -> Any:
    """Parse a JSON document within bounds; any problem is one ``error`` line."""
    if isinstance(raw, str):
        try:
            raw = raw.encode("utf-8")
        except UnicodeEncodeError:
            raise error(f"{where}: malformed JSON (not UTF-8)") from None
    if len(raw) > MAX_JSON_BYTES:
        raise error(f"{where}: metadata of {len(raw)} bytes is larger than {MAX_JSON_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{where}: malformed JSON (not UTF-8 at byte {exc.start})") from None
    if not _depth_ok(raw, max_depth):
        raise error(f"{where}: malformed JSON (nested deeper than {max_depth} levels)")
    try:
        return json.loads(text, parse_constant=_no_constants, object_pairs_hook=_no_duplicates)
    except (ValueError, RecursionError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise error(f"{where}: malformed JSON ({message})") from None


def read_json_file(path: Path, *, error: type[Exception] = CorruptDataError) -> Any:
    """Read and parse a JSON file within the same bounds (directories, unreadable files,
    oversize files: one line)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        with open(fd, "rb") as handle:
            raw = handle.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise error(f"cannot read {path}: it is missing") from None
    except IsADirectoryError:
        raise error(f"{path} is a directory, expected a JSON file") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise error(f"{path} is a symbolic link (not followed)") from None
        raise error(f"cannot read {path}: {exc.strerror or exc}") from None
    return parse_json(raw, str(path), error=error)


# -- schema ---------------------------------------------------------------------------


class Spec:
    """A check of one JSON value; ``check`` returns the (unchanged) value or raises."""

    def check(self, value: Any, where: str) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    @staticmethod
    def fail(where: str, message: str) -> CorruptDataError:
        return CorruptDataError(f"{where}: {message}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class Int(Spec):
    lo: int = 0
    hi: int = (1 << 64) - 1

    def check(self, value, where):
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(where, f"expected an integer, got {_short(value)}")
        if not self.lo <= value <= self.hi:
            raise self.fail(where, f"{value} is outside [{self.lo}, {self.hi}]")
        return value


@dataclass(frozen=True)
class Float(Spec):
    lo: float = 0.0
    hi: float = math.inf

    def check(self, value, where):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(where, f"expected a number, got {_short(value)}")
        if not (math.isfinite(value) and self.lo <= value <= self.hi):
            raise self.fail(where, f"{value} is outside [{self.lo:g}, {self.hi:g}]")
        return value


@dataclass(frozen=True)
class Str(Spec):
    max_len: int = 1 << 20
    pattern: str | None = None

    def check(self, value, where):
        if not isinstance(value, str):
            raise self.fail(where, f"expected a string, got {_short(value)}")
        if len(value) > self.max_len:
            raise self.fail(where, f"string longer than {self.max_len}")
        if self.pattern is not None and not re.fullmatch(self.pattern, value):
            raise self.fail(where, f"{_short(value)} does not match {self.pattern}")
        return value


@dataclass(frozen=True)
class Name(Str):
    """A name that becomes part of a path: a mismatch is an ``InvalidNameError``."""

    def check(self, value, where):
        try:
            return super().check(value, where)
        except CorruptDataError as exc:
            raise InvalidNameError(str(exc)) from None


@dataclass(frozen=True)
class Bool(Spec):
    def check(self, value, where):
        if not isinstance(value, bool):
            raise self.fail(where, f"expected true or false, got {_short(value)}")
        return value


@dataclass(frozen=True)
class OneOf(Spec):
    values: tuple

    def check(self, value, where):
        if isinstance(value, bool) or value not in self.values or isinstance(value, list | dict):
            raise self.fail(where, f"{_short(value)} is not one of {list(self.values)}")
        return value


@dataclass(frozen=True)
class Nullable(Spec):
    inner: Spec

    def check(self, value, where):
        return None if value is None else self.inner.check(value, where)


@dataclass(frozen=True)
class Array(Spec):
    item: Spec
    min_len: int = 0
    max_len: int = 1 << 24

    def check(self, value, where):
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list, got {_short(value)}")
        if not self.min_len <= len(value) <= self.max_len:
            raise self.fail(where, f"expected {self.min_len}..{self.max_len} items, got {len(value)}")
        for i, item in enumerate(value):
            self.item.check(item, f"{where}[{i}]")
        return value


@dataclass(frozen=True)
class Mapping(Spec):
    key: Spec
    value: Spec

    def check(self, value, where):
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {_short(value)}")
        for k, v in value.items():
            self.key.check(k, f"{where} key")
            self.value.check(v, f"{where}.{k}")
        return value


@dataclass(frozen=True)
class Obj(Spec):
    """An object with required and optional keys; others are refused unless ``extra``."""

    required: dict[str, Spec]
    optional: dict[str, Spec] = field(default_factory=dict)
    extra: bool = True
    rule: Callable[[dict, str], None] | None = None

    def check(self, value, where):
        if not isinstance(value, dict):
            raise self.fail(where, f"expected an object, got {_short(value)}")
        for key, spec in self.required.items():
            if key not in value:
                raise self.fail(where, f"missing field {key!r}")
            spec.check(value[key], f"{where}.{key}")
        for key, spec in self.optional.items():
            if key in value:
                spec.check(value[key], f"{where}.{key}")
        if not self.extra:
            unknown = set(value) - set(self.required) - set(self.optional)
            if unknown:
                raise self.fail(where, f"unexpected field(s) {sorted(unknown)}")
        if self.rule is not None:
            self.rule(value, where)
        return value


@dataclass(frozen=True)
class Exactly(Spec):
    """A value that must equal ``expected`` exactly (same JSON types too)."""

    expected: Any

    def check(self, value, where):
        if not _same(value, self.expected):
            raise self.fail(where, f"expected {_short(self.expected)}, got {_short(value)}")
        return value


def _same(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


__all__ = [
    "MAX_DEPTH",
    "Array",
    "Bool",
    "Exactly",
    "Float",
    "Int",
    "Mapping",
    "Name",
    "Nullable",
    "Obj",
    "OneOf",
    "Spec",
    "Str",
    "parse_json",
    "read_json_file",
]

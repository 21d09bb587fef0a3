"""The records a recording database holds, and their JSON form in Zarr attributes.

Each ``from_json`` validates what it reads, so malformed metadata on disk becomes one
``CorruptDataError`` line instead of a KeyError deep inside a tool.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from .errors import CorruptDataError
from .layout import REGION_KINDS, check_hash, check_region_name, region_name

Dim3 = tuple[int, int, int]


def _dim3(value, what: str) -> Dim3:
    if not (isinstance(value, list | tuple) and len(value) == 3):
        raise CorruptDataError(f"{what} must be three integers, got {value!r}")
    dims = tuple(int(v) for v in value)
    if any(d < 1 or d >= 1 << 31 for d in dims):
        raise CorruptDataError(f"{what} out of range: {value!r}")
    return dims  # type: ignore[return-value]


def _field(doc: dict, key: str, kind, what: str):
    try:
        value = doc[key]
    except (KeyError, TypeError):
        raise CorruptDataError(f"{what}: missing field {key!r}") from None
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        raise CorruptDataError(f"{what}: field {key!r} has the wrong type ({value!r})")
    return value


@dataclass(frozen=True)
class RecordingInfo:
    """Root attributes: where and how the recording was made."""

    vas_base: int
    vas_size: int
    gpu_name: str = ""
    compute_capability: str = ""
    driver_version: str = ""
    runtime_version: str = ""
    host: str = ""
    command_line: tuple[str, ...] = ()
    created: str = ""
    tool_version: str = ""
    format_version: int = 0

    def to_json(self) -> dict:
        return {
            "format_version": self.format_version,
            "tool_version": self.tool_version,
            "created": self.created,
            "host": self.host,
            "gpu": {"name": self.gpu_name, "compute_capability": self.compute_capability},
            "driver_version": self.driver_version,
            "runtime_version": self.runtime_version,
            "address_space": {"base": self.vas_base, "size": self.vas_size},
            "command_line": list(self.command_line),
        }

    @classmethod
    def from_json(cls, doc: dict) -> RecordingInfo:
        what = "database attributes"
        gpu = _field(doc, "gpu", dict, what)
        vas = _field(doc, "address_space", dict, what)
        base, size = _field(vas, "base", int, what), _field(vas, "size", int, what)
        if base < 0 or size <= 0 or base + size > 1 << 64:
            raise CorruptDataError(f"{what}: invalid address space base={base} size={size}")
        return cls(
            vas_base=base,
            vas_size=size,
            gpu_name=_field(gpu, "name", str, what),
            compute_capability=_field(gpu, "compute_capability", str, what),
            driver_version=_field(doc, "driver_version", str, what),
            runtime_version=_field(doc, "runtime_version", str, what),
            host=_field(doc, "host", str, what),
            command_line=tuple(str(a) for a in _field(doc, "command_line", list, what)),
            created=_field(doc, "created", str, what),
            tool_version=_field(doc, "tool_version", str, what),
            format_version=_field(doc, "format_version", int, what),
        )


@dataclass(frozen=True)
class Param:
    """One kernel parameter as laid out in the argument buffer."""

    size: int
    align: int
    offset: int
    is_pointer: bool = False
    by_value: bool = False

    @classmethod
    def from_json(cls, doc: dict) -> Param:
        what = "parameter"
        return cls(
            size=_field(doc, "size", int, what),
            align=_field(doc, "align", int, what),
            offset=_field(doc, "offset", int, what),
            is_pointer=_field(doc, "is_pointer", bool, what),
            by_value=_field(doc, "by_value", bool, what),
        )


@dataclass(frozen=True)
class GlobalVar:
    """A device global a kernel uses (``__device__``, ``__constant__``)."""

    name: str
    size: int
    address_space: int = 1

    @classmethod
    def from_json(cls, doc: dict) -> GlobalVar:
        what = "global"
        return cls(
            name=_field(doc, "name", str, what),
            size=_field(doc, "size", int, what),
            address_space=_field(doc, "address_space", int, what),
        )


@dataclass(frozen=True)
class KernelRecord:
    """A static kernel: its identity, its IR and its parameter layout."""

    static_hash: str
    name: str
    ir: bytes
    demangled_name: str = ""
    params: tuple[Param, ...] = ()
    globals: tuple[GlobalVar, ...] = ()
    launch_bounds: dict | None = None

    def __post_init__(self):
        check_hash(self.static_hash, "static hash")

    def attributes(self) -> dict:
        return {
            "kind": "kernel",
            "static_hash": self.static_hash,
            "name": self.name,
            "demangled_name": self.demangled_name or self.name,
            "params": [asdict(p) for p in self.params],
            "globals": [asdict(g) for g in self.globals],
            "launch_bounds": self.launch_bounds,
            "ir_size": len(self.ir),
        }


@dataclass(frozen=True)
class Annotation:
    """Tolerance for verifying a region: compare as ``dtype`` elements.

    An element passes when ``|a - b| <= atol + rtol * |b|``; with ``norm`` ("l2" or "max")
    the whole region passes when the norm of the difference is within that bound instead.
    """

    dtype: str
    atol: float = 0.0
    rtol: float = 0.0
    norm: str | None = None

    def __post_init__(self):
        try:
            np.dtype(self.dtype)
        except TypeError:
            raise CorruptDataError(f"annotation: unknown dtype {self.dtype!r}") from None
        if self.norm not in (None, "l2", "max"):
            raise CorruptDataError(f"annotation: norm must be l2 or max, not {self.norm!r}")
        if not (math.isfinite(self.atol) and math.isfinite(self.rtol)) or min(
            self.atol, self.rtol
        ) < 0:
            raise CorruptDataError("annotation: tolerances must be finite and >= 0")

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> Annotation:
        what = "annotation"
        norm = doc.get("norm") if isinstance(doc, dict) else None
        return cls(
            dtype=_field(doc, "dtype", str, what),
            atol=float(_field(doc, "atol", int | float, what)),
            rtol=float(_field(doc, "rtol", int | float, what)),
            norm=norm,
        )


@dataclass(frozen=True)
class RegionInfo:
    """A device memory region of an instance: a live heap allocation or a device global."""

    kind: str
    address: int
    size: int
    symbol: str | None = None

    @property
    def name(self) -> str:
        return region_name(self.address)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "kind": self.kind,
            "address": self.address,
            "size": self.size,
            "symbol": self.symbol,
        }

    @classmethod
    def from_json(cls, doc: dict) -> RegionInfo:
        what = "region"
        kind = _field(doc, "kind", str, what)
        if kind not in REGION_KINDS:
            raise CorruptDataError(f"region: unknown kind {kind!r}")
        symbol = doc.get("symbol")
        if symbol is not None and not isinstance(symbol, str):
            raise CorruptDataError("region: symbol must be a string")
        info = cls(kind, _field(doc, "address", int, what), _field(doc, "size", int, what), symbol)
        if info.address < 0 or info.size < 0:
            raise CorruptDataError(f"region {info.address:#x}: negative address or size")
        if check_region_name(_field(doc, "name", str, what)) != info.name:
            raise CorruptDataError(f"region {doc['name']!r} does not match its address")
        return info


@dataclass(frozen=True)
class Region:
    """A region with its bytes, as handed to the writer."""

    kind: str
    address: int
    data: np.ndarray | bytes
    symbol: str | None = None

    def info(self) -> RegionInfo:
        return RegionInfo(self.kind, self.address, as_bytes_array(self.data).size, self.symbol)


def as_bytes_array(data: np.ndarray | bytes | bytearray | memoryview) -> np.ndarray:
    """View any buffer as a flat uint8 array without copying."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


@dataclass(frozen=True)
class InstanceRecord:
    """One dynamic kernel instance: launch configuration, arguments and memory."""

    grid: Dim3
    block: Dim3
    args: bytes
    prologue: tuple[Region, ...]
    epilogue: tuple[Region, ...]
    shared_mem: int = 0
    annotations: dict[str, Annotation] = field(default_factory=dict)
    stream: int = 0

"""The records a recording database holds, and their JSON form in Zarr attributes.

Each ``from_json`` validates what it reads, so malformed metadata on disk becomes one
``CorruptDataError`` line instead of a KeyError deep inside a tool.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np

from . import layout
from .errors import CorruptDataError
from .hashing import content_checksum
from .layout import CODE_KINDS, REGION_KINDS, check_hash, check_region_name, region_name
from .metadata import (
    Array,
    Bool,
    Exactly,
    Float,
    Int,
    Mapping,
    Name,
    Nullable,
    Obj,
    OneOf,
    Str,
)
from .param_layout import check_params

Dim3 = tuple[int, int, int]

# -- the metadata schema (docs/format.md) ------------------------------------------------
# Every node's attributes are checked against these before any field is used.

U32 = Int(0, (1 << 32) - 1)
U64 = Int(0, (1 << 64) - 1)
HASH = Name(pattern=r"[0-9a-f]{16}")
REGION_NAME = Name(pattern=r"r-[0-9a-f]{16}")
DIM = Int(1, (1 << 31) - 1)
DIM3 = Array(DIM, 3, 3)
#: Largest argument buffer (CUDA allows 32,764 bytes; HIP similar): the args array bound.
MAX_ARGS_SIZE = 1 << 20
#: Documented annotation ranges: rtol above 1 accepts any value of the same sign (and 0),
#: atol above 1e6 hides any realistic error.
MAX_RTOL = 1.0
MAX_ATOL = 1e6
#: Element types an annotation may compare as.
ANNOTATION_DTYPES = (
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64",
)


def _vas_rule(doc: dict, where: str) -> None:
    vas = doc["address_space"]
    if vas["base"] + vas["size"] > 1 << 64:
        raise CorruptDataError(f"{where}: address space runs past 2^64")


ADDRESS_SPACE_SCHEMA = Obj({"base": U64, "size": Int(1, 1 << 64)})
ROOT_SCHEMA = Obj(
    {
        "format_version": Int(1, 1 << 31),
        "tool_version": Str(),
        "created": Str(),
        "host": Str(),
        "gpu": Obj({"name": Str(), "compute_capability": Str()}),
        "driver_version": Str(),
        "runtime_version": Str(),
        "address_space": ADDRESS_SPACE_SCHEMA,
        "command_line": Array(Str()),
    },
    rule=_vas_rule,
)

PARAM_SCHEMA = Obj({
    "size": Int(0, MAX_ARGS_SIZE),
    "align": Int(0, MAX_ARGS_SIZE),
    "offset": Int(0, MAX_ARGS_SIZE),
    "is_pointer": Bool(),
    "by_value": Bool(),
})
GLOBAL_SCHEMA = Obj({"name": Str(), "size": U64, "address_space": U32})
KERNEL_SCHEMA = Obj(
    {
        "kind": Exactly("kernel"),
        "static_hash": HASH,
        "name": Str(),
        "demangled_name": Str(),
        "params": Array(PARAM_SCHEMA),
        "globals": Array(GLOBAL_SCHEMA),
        "launch_bounds": Nullable(Obj({}, {"max_threads": DIM, "min_blocks": Int(0, (1 << 31) - 1)})),
        "ir_size": U64,
    },
    # origin: the file the kernel's code came from (optional; a path, never empty)
    {"ir_crc32c": U32, "code": OneOf(CODE_KINDS), "origin": Str(max_len=4096, pattern=r"(?s).+")},
    rule=check_params,
)
ANNOTATION_SCHEMA = Obj(
    {
        "dtype": OneOf(ANNOTATION_DTYPES),
        "atol": Float(0.0, MAX_ATOL),
        "rtol": Float(0.0, MAX_RTOL),
    },
    {"norm": Nullable(OneOf(("l2", "max")))},
)
REGION_SCHEMA = Obj(
    {
        "name": REGION_NAME,
        "kind": OneOf(REGION_KINDS),
        "address": U64,
        "size": U64,
        "symbol": Nullable(Str()),
        "epilogue_encoding": OneOf(("bytes", "xor-prologue")),
    },
    # "device": the GPU (CUDA ordinal in the recorded process) of a "peer" region
    {"prologue_crc32c": U32, "epilogue_crc32c": U32, "device": Int(0, 1 << 31)},
)
INSTANCE_SCHEMA = Obj(
    {
        "kind": Exactly("instance"),
        "dynamic_hash": HASH,
        "grid": DIM3,
        "block": DIM3,
        "shared_mem": U32,
        "stream": U64,
        "args_size": Int(0, MAX_ARGS_SIZE),
        "occurrences": Int(1, (1 << 63) - 1),
        "epilogue_format": OneOf(layout.EPILOGUE_FORMATS),
        "regions": Array(REGION_SCHEMA),
        "annotations": Mapping(REGION_NAME, ANNOTATION_SCHEMA),
        "recorded": Str(),
    },
    {
        # "reachable": only the allocations the launch could reach were captured
        "capture": OneOf(("all", "reachable")),
        # the root's address range when the instance was written: a later edit of the
        # root's range disagrees with it (mneme check). With "device": that GPU's range.
        "address_space": ADDRESS_SPACE_SCHEMA,
        # the GPU it ran on (CUDA ordinal in the recorded process; docs/format.md, "Devices")
        "device": Int(0, 1 << 31),
        # thread-block cluster shape set at launch (absent: no clusters; docs/format.md)
        "cluster": DIM3,
        # a cooperative launch (absent: not cooperative; docs/format.md)
        "cooperative": Bool(),
    },
)


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
    """Root attributes: where and how the recording was made.

    Attributes:
        vas_base: the first address of the recorded address range.
        vas_size: its size in bytes.
        gpu_name: the recording GPU's name.
        compute_capability: its compute capability (``"9.0"``).
        driver_version: the CUDA driver's version.
        runtime_version: the CUDA runtime's version.
        host: the machine's host name.
        command_line: the recorded command.
        created: when the database was created (ISO 8601).
        tool_version: the mneme version that wrote it.
        format_version: the recording format's version.
    """

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
        """The root attributes as stored (docs/format.md).

        Returns:
            The JSON document.
        """
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
        """Read the root attributes, checked against their schema.

        Parameters:
            doc: the stored JSON document.

        Returns:
            The recording's information.

        Raises:
            CorruptDataError: the document breaks the schema.
        """
        ROOT_SCHEMA.check(doc, "database attributes")
        gpu, vas = doc["gpu"], doc["address_space"]
        return cls(
            vas_base=vas["base"],
            vas_size=vas["size"],
            gpu_name=gpu["name"],
            compute_capability=gpu["compute_capability"],
            driver_version=doc["driver_version"],
            runtime_version=doc["runtime_version"],
            host=doc["host"],
            command_line=tuple(doc["command_line"]),
            created=doc["created"],
            tool_version=doc["tool_version"],
            format_version=doc["format_version"],
        )


@dataclass(frozen=True)
class Param:
    """One kernel parameter as laid out in the argument buffer.

    Attributes:
        size: its size in bytes.
        align: its alignment.
        offset: where it starts in the argument buffer.
        is_pointer: whether it is a pointer (false for kernels whose code does not
            say: nvcc builds).
        by_value: whether it is an aggregate passed by value.
    """

    size: int
    align: int
    offset: int
    is_pointer: bool = False
    by_value: bool = False

    @classmethod
    def from_json(cls, doc: dict) -> Param:
        """Read a stored parameter, checked against its schema.

        Parameters:
            doc: the stored JSON document.

        Returns:
            The parameter.
        """
        PARAM_SCHEMA.check(doc, "parameter")
        return cls(doc["size"], doc["align"], doc["offset"], doc["is_pointer"], doc["by_value"])


@dataclass(frozen=True)
class GlobalVar:
    """A device global a kernel uses (``__device__``, ``__constant__``).

    Attributes:
        name: its (mangled) name.
        size: its size in bytes.
        address_space: its LLVM address space (1 global, 4 constant).
    """

    name: str
    size: int
    address_space: int = 1

    @classmethod
    def from_json(cls, doc: dict) -> GlobalVar:
        """Read a stored global, checked against its schema.

        Parameters:
            doc: the stored JSON document.

        Returns:
            The global.
        """
        GLOBAL_SCHEMA.check(doc, "global")
        return cls(doc["name"], doc["size"], doc["address_space"])


@dataclass(frozen=True)
class KernelRecord:
    """A static kernel as handed to the writer: its identity, its code and its
    parameter layout.

    Attributes:
        static_hash: the kernel's static hash (16 hex digits).
        name: its mangled name.
        ir: its code: LLVM bitcode, or what ``code`` says.
        demangled_name: its demangled name ("": the mangled one).
        params: its parameters in order.
        globals: the device globals it uses.
        launch_bounds: its launch bounds (``max_threads``, ``min_blocks``, ...), if any.
        code: what ``ir`` holds (``layout.CODE_KINDS``).
        origin: the file the code came from (docs/format.md); metadata only, not in the
            static hash.

    Raises:
        InvalidNameError: ``static_hash`` is not a hash.
        ValueError: ``code`` is not a known code kind.
    """

    static_hash: str
    name: str
    ir: bytes
    demangled_name: str = ""
    params: tuple[Param, ...] = ()
    globals: tuple[GlobalVar, ...] = ()
    launch_bounds: dict | None = None
    #: what ``ir`` holds (layout.CODE_KINDS)
    code: str = "llvm-bitcode"
    #: the file the code came from (docs/format.md); metadata only, not in the static hash
    origin: str | None = None

    def __post_init__(self):
        check_hash(self.static_hash, "static hash")
        if self.code not in CODE_KINDS:
            raise ValueError(f"unknown kernel code kind {self.code!r}")

    def attributes(self) -> dict:
        """The kernel node's attributes as the writer stores them (docs/format.md).

        Returns:
            The JSON document.
        """
        return {
            "kind": "kernel",
            "static_hash": self.static_hash,
            "name": self.name,
            "demangled_name": self.demangled_name or self.name,
            "params": [asdict(p) for p in self.params],
            "globals": [asdict(g) for g in self.globals],
            "launch_bounds": self.launch_bounds,
            "ir_size": len(self.ir),
            "ir_crc32c": content_checksum(as_bytes_array(self.ir)),
            **({"code": self.code} if self.code != "llvm-bitcode" else {}),
            **({"origin": self.origin} if self.origin else {}),
        }


@dataclass(frozen=True)
class Annotation:
    """Tolerance for verifying a region: compare as ``dtype`` elements.

    An element passes when ``|a - b| <= atol + rtol * |b|``; with ``norm`` ("l2" or "max")
    the whole region passes when the norm of the difference is within that bound instead.

    Attributes:
        dtype: the element type (``ANNOTATION_DTYPES``: float32, float64, ...).
        atol: the absolute tolerance.
        rtol: the relative tolerance.
        norm: None (element by element), ``"l2"`` or ``"max"``.

    Raises:
        CorruptDataError: an unknown dtype or norm, or a tolerance that is not a
            finite number in range.
    """

    dtype: str
    atol: float = 0.0
    rtol: float = 0.0
    norm: str | None = None

    def __post_init__(self):
        if self.dtype not in ANNOTATION_DTYPES:
            raise CorruptDataError(
                f"annotation: dtype {self.dtype!r} is not one of {', '.join(ANNOTATION_DTYPES)}"
            )
        if self.norm not in (None, "l2", "max"):
            raise CorruptDataError(f"annotation: norm must be l2 or max, not {self.norm!r}")
        for name, value, top in (("atol", self.atol, MAX_ATOL), ("rtol", self.rtol, MAX_RTOL)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                math.isfinite(value) and 0 <= value <= top
            ):
                raise CorruptDataError(f"annotation: {name} must be a number in [0, {top:g}], not {value!r}")

    def to_json(self) -> dict:
        """The annotation as stored.

        Returns:
            The JSON document.
        """
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> Annotation:
        """Read a stored annotation, checked against its schema.

        Parameters:
            doc: the stored JSON document.

        Returns:
            The annotation.
        """
        ANNOTATION_SCHEMA.check(doc, "annotation")
        return cls(
            dtype=doc["dtype"], atol=float(doc["atol"]), rtol=float(doc["rtol"]), norm=doc.get("norm")
        )


@dataclass(frozen=True)
class RegionInfo:
    """A device memory region of an instance: a live heap allocation, a device global,
    or memory of another GPU it reached (its name follows from its address).

    Attributes:
        kind: ``heap``, ``global``, ``managed``, ``mapped`` or ``peer``.
        address: its first address.
        size: its size in bytes.
        symbol: a global's name; None for other regions.
        device: for ``peer`` regions, the GPU whose memory it is (its CUDA ordinal in
            the recorded process); None otherwise.
    """

    kind: str
    address: int
    size: int
    symbol: str | None = None
    #: "peer" regions: the GPU (CUDA ordinal in the recorded process) whose memory it is
    device: int | None = None

    @property
    def name(self) -> str:
        return region_name(self.address)

    def to_json(self) -> dict:
        """The region as stored in its instance's metadata.

        Returns:
            The JSON document.
        """
        doc = {
            "name": self.name,
            "kind": self.kind,
            "address": self.address,
            "size": self.size,
            "symbol": self.symbol,
        }
        if self.device is not None:
            doc["device"] = self.device
        return doc

    @classmethod
    def from_json(cls, doc: dict) -> RegionInfo:
        """Read a stored region, checked against its schema.

        Parameters:
            doc: the stored JSON document.

        Returns:
            The region.

        Raises:
            CorruptDataError: its name does not match its address, or it runs past the
                end of the address space.
        """
        REGION_SCHEMA.check(doc, "region")
        info = cls(doc["kind"], doc["address"], doc["size"], doc["symbol"], doc.get("device"))
        if check_region_name(doc["name"]) != info.name:
            raise CorruptDataError(f"region {doc['name']!r} does not match its address")
        if info.address + info.size > 1 << 64:
            raise CorruptDataError(f"region {info.name}: runs past the end of the address space")
        return info


@dataclass(frozen=True)
class Region:
    """A region with its bytes, as handed to the writer.

    Attributes:
        kind: the region's kind (``heap``, ``global``, ...).
        address: its first address.
        data: its bytes (any buffer; viewed as bytes).
        symbol: a global's name; None for other regions.
    """

    kind: str
    address: int
    data: np.ndarray | bytes
    symbol: str | None = None

    def info(self) -> RegionInfo:
        """The region without its bytes.

        Returns:
            Its RegionInfo.
        """
        return RegionInfo(self.kind, self.address, as_bytes_array(self.data).size, self.symbol)


def as_bytes_array(data: np.ndarray | bytes | bytearray | memoryview) -> np.ndarray:
    """View any buffer as a flat uint8 array without copying."""
    if isinstance(data, np.ndarray):
        return np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    return np.frombuffer(data, dtype=np.uint8)


@dataclass(frozen=True)
class InstanceRecord:
    """One dynamic kernel instance as handed to the writer: launch configuration,
    arguments and memory.

    Attributes:
        grid: the launch's grid.
        block: its block.
        args: the raw argument buffer.
        prologue: every region before the launch.
        epilogue: the same regions after it (same addresses and sizes).
        shared_mem: dynamic shared memory in bytes.
        annotations: verification tolerances by region name.
        stream: the stream it was launched on (metadata).
        cluster: the thread-block cluster shape, if launched in clusters.
        cooperative: whether it was launched cooperatively.
    """

    grid: Dim3
    block: Dim3
    args: bytes
    prologue: tuple[Region, ...]
    epilogue: tuple[Region, ...]
    shared_mem: int = 0
    annotations: dict[str, Annotation] = field(default_factory=dict)
    stream: int = 0
    cluster: Dim3 | None = None
    #: launched cooperatively (cudaLaunchCooperativeKernel, the COOPERATIVE attribute)
    cooperative: bool = False

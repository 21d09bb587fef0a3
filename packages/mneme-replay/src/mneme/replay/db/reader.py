"""Reading a recording database: kernels, instances and memory regions as numpy arrays.

Only committed nodes are visible (see writer.py); names found on disk are validated
before they become paths, and sizes declared in metadata are checked against the
recorded address range before any memory is allocated for them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

from . import layout
from .chunks import ArrayInfo, load_json, read_array_info, read_range, stored_bytes
from .errors import (
    CorruptDataError,
    FormatVersionError,
    InvalidNameError,
    NotADatabaseError,
    NotFoundError,
)
from .schema import Annotation, GlobalVar, Param, RecordingInfo, RegionInfo, _dim3, _field


def check_format_version(root: Path, attrs: dict) -> None:
    found = attrs.get("format_version")
    if not isinstance(found, int) or isinstance(found, bool):
        raise CorruptDataError(f"{root}: missing or malformed format_version")
    if found > layout.FORMAT_VERSION:
        raise FormatVersionError(
            f"{root} uses recording format {found}, newer than this mneme reads "
            f"({layout.FORMAT_VERSION}): upgrade mneme-replay"
        )
    if found < 1:
        raise CorruptDataError(f"{root}: invalid format_version {found}")


def _attrs(path: Path, kind: str) -> dict:
    doc = load_json(path / "zarr.json")
    attrs = doc.get("attributes")
    attrs = attrs.get(layout.ATTRS_KEY) if isinstance(attrs, dict) else None
    if not isinstance(attrs, dict) or attrs.get("kind") != kind:
        raise CorruptDataError(f"{path}: not a mneme {kind} node")
    return attrs


@dataclass(frozen=True)
class RegionChange:
    """How one region differs between prologue and epilogue."""

    name: str
    kind: str
    size: int
    changed_bytes: int
    first_offset: int | None


class Database:
    """A recording database opened for reading."""

    def __init__(self, root: Path, info: RecordingInfo):
        self.root = root
        self.info = info

    @classmethod
    def open(cls, path: str | os.PathLike) -> Database:
        root = Path(path)
        if not root.exists():
            raise NotADatabaseError(f"{root} does not exist")
        if not root.is_dir():
            raise NotADatabaseError(f"{root} is not a directory (expected a recording database)")
        if not (root / "zarr.json").is_file():
            raise NotADatabaseError(
                f"{root} is not a mneme recording database (no zarr.json): "
                "pass the directory given to mneme record -rdb"
            )
        doc = load_json(root / "zarr.json")
        attrs = doc.get("attributes")
        attrs = attrs.get(layout.ATTRS_KEY) if isinstance(attrs, dict) else None
        if doc.get("node_type") != "group" or not isinstance(attrs, dict):
            raise NotADatabaseError(f"{root} is a Zarr hierarchy but not a mneme recording database")
        check_format_version(root, attrs)
        return cls(root, RecordingInfo.from_json(attrs))

    # -- kernels ------------------------------------------------------------------------

    def kernel_hashes(self) -> list[str]:
        """Static hashes of the committed kernels (nodes with their metadata in place)."""
        base = self.root / layout.KERNELS
        try:
            names = os.listdir(base)
        except FileNotFoundError:
            return []
        return sorted(
            n for n in names if _is_hash(n) and (base / n / "zarr.json").is_file()
        )

    def kernels(self) -> list[Kernel]:
        kernels = [Kernel(self, h) for h in self.kernel_hashes()]
        return sorted(kernels, key=lambda k: (k.demangled_name, k.static_hash))

    def kernel(self, key: str) -> Kernel:
        """A kernel by static hash (or a unique prefix of it), mangled or demangled name."""
        hashes = self.kernel_hashes()
        if key in hashes:
            return Kernel(self, key)
        matches = [k for k in self.kernels() if key in (k.name, k.demangled_name)]
        if not matches:  # the bare function name, as people type it: saxpy, box_sum<float, 1>
            matches = [k for k in self.kernels() if _base_name(k.demangled_name) == key]
        if not matches and key and all(c in "0123456789abcdef" for c in key):
            matches = [Kernel(self, h) for h in hashes if h.startswith(key)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            known = ", ".join(f"{k.static_hash} ({k.demangled_name})" for k in self.kernels())
            raise NotFoundError(f"no kernel {key!r} in {self.root}; recorded: {known or 'none'}")
        raise NotFoundError(
            f"{key!r} names {len(matches)} kernels in {self.root}: use a static hash ("
            + ", ".join(k.static_hash for k in matches) + ")"
        )

    def instance(self, spec: str) -> Instance:
        """``KERNEL/INSTANCE``, or ``KERNEL`` alone when it has exactly one instance."""
        kernel_key, _, instance_key = spec.partition("/")
        kernel = self.kernel(kernel_key)
        if instance_key:
            return kernel.instance(instance_key)
        instances = kernel.instances()
        if len(instances) != 1:
            listed = ", ".join(i.dynamic_hash for i in instances) or "none"
            raise NotFoundError(
                f"kernel {kernel.static_hash} has {len(instances)} instances ({listed}): "
                "name one as KERNEL/INSTANCE"
            )
        return instances[0]

    def instances(self) -> Iterator[Instance]:
        for kernel in self.kernels():
            yield from kernel.instances()

    def stored_bytes(self) -> int:
        return stored_bytes(self.root)

    def __repr__(self) -> str:
        return f"Database({str(self.root)!r})"


def _base_name(demangled: str) -> str:
    """``void box_sum<float, 1>(float const*)`` → ``box_sum<float, 1>``."""
    head = demangled.partition("(")[0]
    return head[4:] if head.startswith("void ") else head


def _is_hash(name: str) -> bool:
    try:
        layout.check_hash(name, "hash")
        return True
    except InvalidNameError:
        return False


class Kernel:
    """A static kernel of a database."""

    def __init__(self, db: Database, static_hash: str):
        self.db = db
        self.static_hash = static_hash
        self.path = layout.kernel_dir(db.root, static_hash)

    @cached_property
    def _attrs(self) -> dict:
        attrs = _attrs(self.path, "kernel")
        if attrs.get("static_hash") != self.static_hash:
            raise CorruptDataError(f"{self.path}: static hash in metadata does not match its name")
        return attrs

    @property
    def name(self) -> str:
        return _field(self._attrs, "name", str, f"kernel {self.static_hash}")

    @property
    def demangled_name(self) -> str:
        return _field(self._attrs, "demangled_name", str, f"kernel {self.static_hash}")

    @property
    def params(self) -> list[Param]:
        return [Param.from_json(p) for p in _field(self._attrs, "params", list, "kernel")]

    @property
    def globals(self) -> list[GlobalVar]:
        return [GlobalVar.from_json(g) for g in _field(self._attrs, "globals", list, "kernel")]

    @property
    def launch_bounds(self) -> dict | None:
        return self._attrs.get("launch_bounds")

    def _ir_info(self) -> ArrayInfo:
        return read_array_info(self.path / layout.IR, self.db.info.vas_size)

    @property
    def ir_size(self) -> int:
        return self._ir_info().size

    def ir(self) -> bytes:
        """The kernel's LLVM IR module as bitcode."""
        data = read_range(self._ir_info()).tobytes()
        if data[:4] not in (b"BC\xc0\xde", b"\xde\xc0\x17\x0b"):
            raise CorruptDataError(f"kernel {self.static_hash}: stored IR is not LLVM bitcode")
        return data

    def instance_hashes(self) -> list[str]:
        base = self.path / layout.INSTANCES
        try:
            names = os.listdir(base)
        except FileNotFoundError:
            return []
        return sorted(n for n in names if _is_hash(n) and (base / n / "zarr.json").is_file())

    def instances(self) -> list[Instance]:
        return [Instance(self, h) for h in self.instance_hashes()]

    def instance(self, key: str) -> Instance:
        hashes = self.instance_hashes()
        matches = [h for h in hashes if h == key] or [h for h in hashes if key and h.startswith(key)]
        if len(matches) == 1:
            return Instance(self, matches[0])
        listed = ", ".join(hashes) or "none"
        raise NotFoundError(
            f"kernel {self.static_hash} has no single instance {key!r}; recorded: {listed}"
        )

    def stored_bytes(self) -> int:
        return stored_bytes(self.path)

    def __repr__(self) -> str:
        return f"Kernel({self.static_hash}, {self.demangled_name!r})"


class Instance:
    """A recorded kernel instance: launch configuration, arguments, memory before/after."""

    def __init__(self, kernel: Kernel, dynamic_hash: str):
        self.kernel = kernel
        self.dynamic_hash = dynamic_hash
        self.path = layout.instance_dir(kernel.db.root, kernel.static_hash, dynamic_hash)

    @cached_property
    def _attrs(self) -> dict:
        attrs = _attrs(self.path, "instance")
        if attrs.get("dynamic_hash") != self.dynamic_hash:
            raise CorruptDataError(f"{self.path}: dynamic hash in metadata does not match its name")
        return attrs

    @property
    def id(self) -> str:
        return f"{self.kernel.static_hash}/{self.dynamic_hash}"

    @property
    def grid(self):
        return _dim3(self._attrs.get("grid"), f"instance {self.id} grid")

    @property
    def block(self):
        return _dim3(self._attrs.get("block"), f"instance {self.id} block")

    @property
    def shared_mem(self) -> int:
        return _field(self._attrs, "shared_mem", int, f"instance {self.id}")

    @property
    def occurrences(self) -> int:
        return _field(self._attrs, "occurrences", int, f"instance {self.id}")

    @property
    def epilogue_format(self) -> str:
        return _field(self._attrs, "epilogue_format", str, f"instance {self.id}")

    @cached_property
    def regions(self) -> list[RegionInfo]:
        return [RegionInfo.from_json(r) for r in _field(self._attrs, "regions", list, f"instance {self.id}")]

    def region(self, name: str) -> RegionInfo:
        for r in self.regions:
            if r.name == name:
                return r
        raise NotFoundError(
            f"instance {self.id} has no region {name!r}; regions: "
            + (", ".join(r.name for r in self.regions) or "none")
        )

    @property
    def annotations(self) -> dict[str, Annotation]:
        raw = self._attrs.get("annotations", {})
        if not isinstance(raw, dict):
            raise CorruptDataError(f"instance {self.id}: malformed annotations")
        return {layout.check_region_name(k): Annotation.from_json(v) for k, v in raw.items()}

    @property
    def args(self) -> bytes:
        info = read_array_info(self.path / layout.ARGS, 1 << 20)
        return read_range(info).tobytes()

    def _array(self, side: str, name: str) -> tuple[ArrayInfo, RegionInfo]:
        region = self.region(layout.check_region_name(name))
        info = read_array_info(self.path / side / region.name, self.kernel.db.info.vas_size)
        if info.size != region.size:
            raise CorruptDataError(
                f"instance {self.id} region {name}: array holds {info.size} bytes, "
                f"metadata says {region.size}"
            )
        return info, region

    def _epilogue_encoding(self, info: ArrayInfo) -> str:
        encoding = info.attributes.get(layout.ATTRS_KEY, {}).get("encoding")
        if encoding not in ("bytes", "xor-prologue"):
            raise CorruptDataError(f"{info.path}: unknown epilogue encoding {encoding!r}")
        return encoding

    def prologue(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Bytes of a region before the launch (all, or [start, stop))."""
        info, _ = self._array(layout.PROLOGUE, name)
        return read_range(info, start, stop)

    def epilogue(self, name: str, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Bytes of a region after the launch; XOR deltas are resolved against the prologue."""
        info, _ = self._array(layout.EPILOGUE, name)
        if self._epilogue_encoding(info) == "bytes":
            return read_range(info, start, stop)
        delta = read_range(info, start, stop, missing_is_zero=True)
        return np.bitwise_xor(self.prologue(name, start, stop), delta, out=delta)

    def changes(self) -> list[RegionChange]:
        """Which regions the launch changed, and how many bytes of each."""
        result = []
        for region in self.regions:
            changed, first = 0, None
            step = 64 << 20
            for lo in range(0, region.size, step):
                hi = min(lo + step, region.size)
                diff = np.flatnonzero(self.prologue(region.name, lo, hi) != self.epilogue(region.name, lo, hi))
                if diff.size and first is None:
                    first = lo + int(diff[0])
                changed += int(diff.size)
            result.append(RegionChange(region.name, region.kind, region.size, changed, first))
        return result

    def raw_bytes(self) -> int:
        """Bytes the prologue and epilogue represent (uncompressed)."""
        return 2 * sum(r.size for r in self.regions) + int(self._attrs.get("args_size", 0))

    def stored_bytes(self) -> int:
        return stored_bytes(self.path)

    def describe(self) -> dict:
        """Everything about the instance as plain JSON data."""
        return {
            "id": self.id,
            "kernel": self.kernel.demangled_name,
            "static_hash": self.kernel.static_hash,
            "dynamic_hash": self.dynamic_hash,
            "grid": list(self.grid),
            "block": list(self.block),
            "shared_mem": self.shared_mem,
            "occurrences": self.occurrences,
            "epilogue_format": self.epilogue_format,
            "args": self.args.hex(),
            "regions": [r.to_json() for r in self.regions],
            "annotations": {k: v.to_json() for k, v in self.annotations.items()},
            "raw_bytes": self.raw_bytes(),
            "stored_bytes": self.stored_bytes(),
            "recorded": self._attrs.get("recorded"),
        }

    def __repr__(self) -> str:
        return f"Instance({self.id})"

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
from .app_time import APP_TIME_KEY, AppTime
from .chunks import (
    GROUP_SCHEMA,
    ArrayInfo,
    disk_bytes,
    load_json,
    own_bytes,
    read_array_info,
    read_range,
    stored_bytes,
)
from .errors import (
    CorruptDataError,
    DatabaseError,
    FormatVersionError,
    InvalidNameError,
    NotADatabaseError,
    NotFoundError,
)
from .metadata import Spec
from .predecessor import PREDECESSOR_KEY, Predecessor
from .region_layout import address_space_problem, region_layout_problem
from .schema import (
    INSTANCE_SCHEMA,
    KERNEL_SCHEMA,
    MAX_ARGS_SIZE,
    Annotation,
    GlobalVar,
    Param,
    RecordingInfo,
    RegionInfo,
)


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


def _attrs(path: Path, kind: str, schema: Spec, where: str) -> dict:
    """A node's ``attributes.mneme``, checked against its schema before any use."""
    doc = load_json(path / "zarr.json")
    GROUP_SCHEMA.check(doc, f"{path}/zarr.json")
    attrs = doc.get("attributes")
    attrs = attrs.get(layout.ATTRS_KEY) if isinstance(attrs, dict) else None
    if not isinstance(attrs, dict) or attrs.get("kind") != kind:
        raise CorruptDataError(f"{path}: not a mneme {kind} node")
    schema.check(attrs, where)
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
        GROUP_SCHEMA.check(doc, f"{root}/zarr.json")
        check_format_version(root, attrs)
        return cls(root, RecordingInfo.from_json(attrs))

    # -- kernels ------------------------------------------------------------------------

    def kernel_hashes(self) -> list[str]:
        """Static hashes of the committed kernels (nodes with their metadata in place)."""
        base = layout.no_symlinks(self.root, self.root / layout.KERNELS)
        try:
            names = os.listdir(base)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(n for n in names if _is_hash(n) and _is_node(base / n))

    def kernels(self) -> list[Kernel]:
        """Every committed kernel by name; one whose metadata is damaged comes last (by
        hash) instead of hiding the others (``Kernel.problem`` says what is wrong)."""
        kernels = [Kernel(self, h) for h in self.kernel_hashes()]
        return sorted(kernels, key=lambda k: (k.problem() is not None, _names(k)[-1:], k.static_hash))

    def kernel(self, key: str) -> Kernel:
        """A kernel by static hash (or a unique prefix of it), mangled or demangled name."""
        hashes = self.kernel_hashes()
        if key in hashes:
            return Kernel(self, key)
        matches = [k for k in self.kernels() if key in _names(k)]
        if not matches:  # the bare function name, as people type it: saxpy, box_sum<float, 1>
            matches = [k for k in self.kernels() if key in map(_base_name, _names(k)[1:])]
        if not matches and key and all(c in "0123456789abcdef" for c in key):
            matches = [Kernel(self, h) for h in hashes if h.startswith(key)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            known = ", ".join(f"{k.static_hash} ({k.display_name})" for k in self.kernels())
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

    def disk_bytes(self) -> int:
        """Bytes of the recordings on disk, chunks shared through the content store once."""
        return disk_bytes(self.root / layout.KERNELS)

    def __repr__(self) -> str:
        return f"Database({str(self.root)!r})"


def _names(kernel: Kernel) -> tuple[str, ...]:
    """(mangled, demangled) name of a kernel; () when its metadata is damaged."""
    try:
        return kernel.name, kernel.demangled_name
    except DatabaseError:
        return ()


def _base_name(demangled: str) -> str:
    """``void box_sum<float, 1>(float const*)`` → ``box_sum<float, 1>``."""
    head = demangled.partition("(")[0]
    return head[4:] if head.startswith("void ") else head


def _is_node(path: Path) -> bool:
    """A committed node: a real directory (no symlink) with its metadata in place."""
    return not path.is_symlink() and (path / "zarr.json").is_file()


def _arch_number(arch: str) -> int:
    """"sm_90" / "compute_90a" → 90."""
    digits = "".join(c for c in arch.split("_")[-1] if c.isdigit())
    return int(digits or 0)


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
        layout.no_symlinks(self.db.root, self.path / "zarr.json")
        attrs = _attrs(self.path, "kernel", KERNEL_SCHEMA, f"kernel {self.static_hash}")
        if attrs["static_hash"] != self.static_hash:
            raise CorruptDataError(f"{self.path}: static hash in metadata does not match its name")
        return attrs

    @property
    def name(self) -> str:
        return self._attrs["name"]

    @property
    def demangled_name(self) -> str:
        return self._attrs["demangled_name"]

    @property
    def display_name(self) -> str:
        """The demangled name, or "damaged metadata" when it cannot be read."""
        return _names(self)[-1] if _names(self) else "damaged metadata"

    def problem(self) -> str | None:
        """Why this kernel's metadata cannot be read, as one line; None when it reads."""
        try:
            self._attrs  # noqa: B018 - validated on first use
        except DatabaseError as error:
            return str(error)
        return None

    @property
    def params(self) -> list[Param]:
        return [Param.from_json(p) for p in self._attrs["params"]]

    @property
    def globals(self) -> list[GlobalVar]:
        return [GlobalVar.from_json(g) for g in self._attrs["globals"]]

    @property
    def ir_checksum(self) -> int | None:
        """CRC-32C of the IR bytes recorded at write time (format 2; None in format 1)."""
        value = self._attrs.get("ir_crc32c")
        if value is None and self.db.info.format_version >= 2:
            raise CorruptDataError(f"kernel {self.static_hash}: IR checksum is missing")
        return value

    @property
    def launch_bounds(self) -> dict | None:
        return self._attrs.get("launch_bounds")

    def _ir_info(self) -> ArrayInfo:
        path = layout.no_symlinks(self.db.root, self.path / layout.IR / "c")
        return read_array_info(path.parent, self.db.info.vas_size)

    @property
    def ir_size(self) -> int:
        return self._ir_info().size

    @property
    def code(self) -> str:
        """What the kernel's code array holds (layout.CODE_KINDS): "llvm-bitcode" (an
        instrumented build), "cuda-fatbin" (the fatbinary an nvcc build registered), "ptx"
        or "cubin" (a module the application loaded itself)."""
        return self._attrs.get("code", "llvm-bitcode")

    @property
    def origin(self) -> str | None:
        """The file the kernel's code came from: the shared object or executable that
        registered it, the object that loaded it, or the file loaded (docs/format.md);
        None when the database does not say (written before origins were recorded)."""
        return self._attrs.get("origin")

    @property
    def has_ir(self) -> bool:
        return self.code == "llvm-bitcode"

    def code_bytes(self) -> bytes:
        """The stored code as it is (bitcode or fatbinary)."""
        return read_range(self._ir_info()).tobytes()

    def code_images(self) -> list:
        """This kernel's PTX and cubin entries in its stored code
        (``mneme.instrument.fatbin.FatbinEntry``), cubins first, newest arch first."""
        from mneme.instrument.fatbin import FatbinError, parse_code_image

        if self.code == "llvm-bitcode":
            return []
        try:
            entries = parse_code_image(self.code_bytes(), f"kernel {self.static_hash}")
        except FatbinError as error:
            raise CorruptDataError(str(error)) from None
        mine = [e for e in entries if e.data is not None and self.name in {k.name for k in e.kernels}]
        return sorted(mine, key=lambda e: (e.kind != "cubin", -_arch_number(e.arch)))

    @property
    def code_kinds(self) -> list[str]:
        """The code kinds this kernel holds: "llvm-bc", "ptx", "cubin"."""
        if self.code == "llvm-bitcode":
            return ["llvm-bc"]
        return sorted({e.kind for e in self.code_images() if e.kind in ("ptx", "cubin")})

    def ir(self) -> bytes:
        """The kernel's LLVM IR module as bitcode."""
        if self.code != "llvm-bitcode":
            raise NotFoundError(
                f"kernel {self.demangled_name} was recorded from an nvcc build: it has "
                f"{' and '.join(self.code_kinds) or 'no usable code'}, no LLVM IR"
            )
        data = read_range(self._ir_info()).tobytes()
        if data[:4] not in (b"BC\xc0\xde", b"\xde\xc0\x17\x0b"):
            raise CorruptDataError(f"kernel {self.static_hash}: stored IR is not LLVM bitcode")
        return data

    def instance_hashes(self) -> list[str]:
        base = layout.no_symlinks(self.db.root, self.path / layout.INSTANCES)
        try:
            names = os.listdir(base)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(n for n in names if _is_hash(n) and _is_node(base / n))

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
        layout.no_symlinks(self.kernel.db.root, self.path / "zarr.json")
        attrs = _attrs(self.path, "instance", INSTANCE_SCHEMA, f"instance {self.id}")
        if attrs["dynamic_hash"] != self.dynamic_hash:
            raise CorruptDataError(f"{self.path}: dynamic hash in metadata does not match its name")
        return attrs

    @property
    def id(self) -> str:
        return f"{self.kernel.static_hash}/{self.dynamic_hash}"

    @property
    def grid(self):
        return tuple(self._attrs["grid"])

    @property
    def block(self):
        return tuple(self._attrs["block"])

    @property
    def shared_mem(self) -> int:
        return self._attrs["shared_mem"]

    @property
    def cluster(self) -> tuple[int, int, int] | None:
        """The thread-block cluster shape the launch set (cuLaunchKernelEx's attribute);
        None for a launch without clusters."""
        value = self._attrs.get("cluster")
        return None if value is None else tuple(value)

    @property
    def occurrences(self) -> int:
        return self._attrs["occurrences"]

    @property
    def epilogue_format(self) -> str:
        return self._attrs["epilogue_format"]

    @property
    def app_time(self) -> AppTime | None:
        """The kernel's time inside the recorded application (format revision
        "app_time"); None for instances recorded without it."""
        raw = self._attrs.get(APP_TIME_KEY)
        return None if raw is None else AppTime.from_json(raw, f"instance {self.id}")

    @property
    def predecessor(self) -> Predecessor | None:
        """The launch before this instance on its stream in the recorded application
        (format revision "predecessor"); None for instances recorded without it."""
        raw = self._attrs.get(PREDECESSOR_KEY)
        return None if raw is None else Predecessor.from_json(raw, f"instance {self.id}")

    @property
    def capture(self) -> str:
        """"all": every live allocation was captured; "reachable": only those the launch's
        arguments and device globals reach (a replay that reads elsewhere faults)."""
        return self._attrs.get("capture", "all")

    @property
    def device(self) -> int | None:
        """The GPU it ran on (CUDA ordinal in the recorded process); None for instances
        recorded before recordings said (a process of one GPU)."""
        return self._attrs.get("device")

    @property
    def address_range(self) -> tuple[int, int]:
        """(base, size) of the address range its heap regions lie in: its GPU's own range
        (each GPU of a process has one), else the recording's."""
        recorded = self._attrs.get("address_space")
        if recorded is not None and "device" in self._attrs:
            return recorded["base"], recorded["size"]
        info = self.kernel.db.info
        return info.vas_base, info.vas_size

    @property
    def peer_devices(self) -> tuple[int, ...]:
        """The other GPUs whose memory the launch reached through peer pointers (its
        "peer" regions), sorted; empty when it touched only its own GPU's memory."""
        return tuple(sorted({r.device for r in self.regions if r.kind == layout.PEER_KIND}))

    @cached_property
    def regions(self) -> list[RegionInfo]:
        """The regions, checked against the layout rules of docs/format.md: sorted by
        address, not overlapping, heap regions inside the recorded address range."""
        regions = [RegionInfo.from_json(r) for r in self._attrs["regions"]]
        info = self.kernel.db.info
        recorded = self._attrs.get("address_space")  # absent before writers stored it
        own_range = recorded is not None and "device" in self._attrs  # a GPU's own range
        if own_range:
            problem = address_space_problem(recorded["base"], recorded["size"])
            if problem:
                raise CorruptDataError(f"instance {self.id}: {problem}")
        elif recorded is not None and (recorded["base"], recorded["size"]) != (info.vas_base, info.vas_size):
            raise CorruptDataError(
                f"instance {self.id} was recorded in address range {recorded['base']:#x}+"
                f"{recorded['size']:#x}, but the database's root metadata says "
                f"{info.vas_base:#x}+{info.vas_size:#x} (the root metadata was changed)"
            )
        base, size = self.address_range
        problem = region_layout_problem(regions, base, size)
        if problem:
            raise CorruptDataError(f"instance {self.id}: {problem}")
        return regions

    def problem(self) -> str | None:
        """Why this instance cannot be read (its metadata breaks the schema or the layout
        rules), as one line; None when it reads. Its chunks are not read (``mneme check``)."""
        try:
            self._attrs, self.regions, self.annotations, self.app_time, self.predecessor  # noqa: B018
        except DatabaseError as error:
            return str(error)
        return None

    def region_checksums(self, name: str) -> tuple[int, int] | None:
        """(prologue, epilogue) CRC-32C of the region's full bytes recorded at write time
        (format 2); None in format 1 databases."""
        for r in self._attrs["regions"]:
            if r["name"] == name and "prologue_crc32c" in r and "epilogue_crc32c" in r:
                return r["prologue_crc32c"], r["epilogue_crc32c"]
        if self.kernel.db.info.format_version >= 2:
            raise CorruptDataError(f"instance {self.id} region {name}: content checksums are missing")
        return None

    def epilogue_encoding(self, name: str) -> str:
        """How the epilogue of a region is stored (``bytes`` or ``xor-prologue``)."""
        self.region(name)
        return next(r["epilogue_encoding"] for r in self._attrs["regions"] if r["name"] == name)

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
        raw = self._attrs["annotations"]
        names = {r.name for r in self.regions}
        unknown = sorted(set(raw) - names)
        if unknown:
            raise CorruptDataError(f"instance {self.id}: annotations name unknown regions {unknown}")
        return {k: Annotation.from_json(v) for k, v in raw.items()}

    @property
    def args(self) -> bytes:
        path = layout.no_symlinks(self.kernel.db.root, self.path / layout.ARGS / "c")
        info = read_array_info(path.parent, MAX_ARGS_SIZE)
        if info.size != self._attrs["args_size"]:
            raise CorruptDataError(
                f"instance {self.id}: args holds {info.size} bytes, metadata says {self._attrs['args_size']}"
            )
        return read_range(info).tobytes()

    def _array(self, side: str, name: str) -> tuple[ArrayInfo, RegionInfo]:
        region = self.region(layout.check_region_name(name))
        path = layout.no_symlinks(self.kernel.db.root, self.path / side / region.name / "c")
        info = read_array_info(path.parent, self.kernel.db.info.vas_size)
        if info.size != region.size:
            raise CorruptDataError(
                f"instance {self.id} region {name}: array holds {info.size} bytes, "
                f"metadata says {region.size}"
            )
        return info, region

    def _epilogue_encoding(self, info: ArrayInfo) -> str:
        encoding = info.encoding
        if encoding not in ("bytes", "xor-prologue"):
            raise CorruptDataError(f"{info.path}: unknown epilogue encoding {encoding!r}")
        return encoding

    def _prologue_encoding(self, info: ArrayInfo) -> None:
        if info.encoding != "bytes":
            raise CorruptDataError(f"{info.path}: a prologue array must have encoding bytes")

    def stored_array(self, side: str, name: str) -> tuple[ArrayInfo, str]:
        """The prologue or epilogue array of a region as stored (its chunk files, for
        readers that decompress them elsewhere: restore's device path) and its encoding,
        checked as ``prologue`` and ``stored_epilogue`` check them."""
        if side == layout.PROLOGUE:
            info, _ = self._array(layout.PROLOGUE, name)
            self._prologue_encoding(info)
            return info, "bytes"
        info, region = self._array(layout.EPILOGUE, name)
        encoding = self._epilogue_encoding(info)
        if encoding != self.epilogue_encoding(region.name):
            raise CorruptDataError(
                f"instance {self.id} region {name}: epilogue array is {encoding}, "
                f"metadata says {self.epilogue_encoding(region.name)}"
            )
        return info, encoding

    def prologue(
        self, name: str, start: int = 0, stop: int | None = None, *, out: np.ndarray | None = None
    ) -> np.ndarray:
        """Bytes of a region before the launch (all, or [start, stop)); ``out``: a buffer of
        that many bytes to decompress into (restore streams through page-locked buffers)."""
        info, _ = self._array(layout.PROLOGUE, name)
        self._prologue_encoding(info)
        return read_range(info, start, stop, out=out)

    def stored_epilogue(
        self, name: str, start: int = 0, stop: int | None = None, *, out: np.ndarray | None = None
    ) -> tuple[str, np.ndarray]:
        """The epilogue array as stored, and its encoding: ``bytes`` (the bytes after the
        launch) or ``xor-prologue`` (their XOR with the prologue; zeros where a chunk is
        absent). For readers that resolve the XOR themselves (restore does it on the device)."""
        info, encoding = self.stored_array(layout.EPILOGUE, name)
        return encoding, read_range(info, start, stop, missing_is_zero=encoding != "bytes", out=out)

    def epilogue(
        self, name: str, start: int = 0, stop: int | None = None, *, prologue: np.ndarray | None = None
    ) -> np.ndarray:
        """Bytes of a region after the launch; XOR deltas are resolved against the prologue
        (``prologue``: its bytes [start, stop) when the caller has them already, so they
        are not read and decompressed again)."""
        encoding, delta = self.stored_epilogue(name, start, stop)
        if encoding == "bytes":
            return delta
        if prologue is None:
            prologue = self.prologue(name, start, stop)
        elif prologue.nbytes != delta.nbytes:
            raise ValueError(f"prologue of {prologue.nbytes} bytes given for {delta.nbytes} bytes of {name}")
        return np.bitwise_xor(prologue.view(np.uint8).reshape(-1), delta, out=delta)

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
        return 2 * sum(r.size for r in self.regions) + self._attrs["args_size"]

    def stored_bytes(self) -> int:
        return stored_bytes(self.path)

    def unique_bytes(self) -> int:
        """Stored bytes no other instance shares (what deleting it would free)."""
        return own_bytes(self.path)

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
            "cluster": list(self.cluster) if self.cluster else None,
            "occurrences": self.occurrences,
            "epilogue_format": self.epilogue_format,
            "capture": self.capture,
            "device": self.device,
            "peer_devices": list(self.peer_devices),
            "args": self.args.hex(),
            "regions": [r.to_json() for r in self.regions],
            "annotations": {k: v.to_json() for k, v in self.annotations.items()},
            "raw_bytes": self.raw_bytes(),
            "stored_bytes": self.stored_bytes(),
            "recorded": self._attrs.get("recorded"),
        }

    def __repr__(self) -> str:
        return f"Instance({self.id})"

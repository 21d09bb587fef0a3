"""Reading a recording database: the database and its kernels, by hash or name (an
instance, its metadata and memory regions as numpy arrays: instance.py).

Only committed nodes are visible (see writer.py); names found on disk are validated
before they become paths, and sizes declared in metadata are checked against the
recorded address range before any memory is allocated for them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from functools import cached_property
from pathlib import Path

from . import layout
from .app_profile import APP_PROFILE_KEY, AppProfile
from .chunks import (
    GROUP_SCHEMA,
    ArrayInfo,
    disk_bytes,
    load_json,
    read_array_info,
    read_range,
    refuse_sparse,
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
from .instance import Instance
from .node_attributes import node_attributes
from .schema import KERNEL_SCHEMA, GlobalVar, Param, RecordingInfo


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


class Database:
    """A recording database opened for reading. Open one with :meth:`open`.

    Parameters:
        root: the database's folder.
        info: what the recording says about itself (its root's attributes).
    """

    def __init__(self, root: Path, info: RecordingInfo):
        self.root = root
        self.info = info

    @classmethod
    def open(cls, path: str | os.PathLike) -> Database:
        """Open a recording database, checking that it is one and that this mneme reads
        its format.

        Parameters:
            path: the folder given to ``mneme record -rdb``.

        Returns:
            The database (kernels and instances are read when asked for).

        Raises:
            NotADatabaseError: ``path`` does not exist, is not a folder, or is not a
                mneme recording database.
            FormatVersionError: it was written in a newer format than this mneme reads.
            CorruptDataError: its root metadata is malformed.
        """
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

    @property
    def app_profile(self) -> AppProfile | None:
        """The recorded application's kernel-time profile (format revision
        "app_profile"), read now: the recorder adds it when the application exits. None
        for databases recorded before the revision or without in-app timing."""
        doc = load_json(self.root / "zarr.json")
        raw = (doc.get("attributes") or {}).get(layout.ATTRS_KEY, {}).get(APP_PROFILE_KEY)
        return None if raw is None else AppProfile.from_json(raw, f"{self.root}/zarr.json")

    # -- kernels ------------------------------------------------------------------------

    def kernel_hashes(self) -> list[str]:
        """The static hashes of the committed kernels (nodes with their metadata in
        place).

        Returns:
            The hashes, sorted.
        """
        base = layout.no_symlinks(self.root, self.root / layout.KERNELS)
        try:
            names = os.listdir(base)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(n for n in names if _is_hash(n) and _is_node(base / n))

    def kernels(self) -> list[Kernel]:
        """Every committed kernel by name; one whose metadata is damaged comes last (by
        hash) instead of hiding the others (``Kernel.problem`` says what is wrong).

        Returns:
            The kernels.
        """
        kernels = [Kernel(self, h) for h in self.kernel_hashes()]
        return sorted(kernels, key=lambda k: (k.problem() is not None, _names(k)[-1:], k.static_hash))

    def kernel(self, key: str) -> Kernel:
        """One kernel, by any name a user types for it.

        Parameters:
            key: its static hash or a unique prefix of it, its mangled or demangled
                name, or its bare function name (``saxpy``, ``box_sum<float, 1>``).

        Returns:
            The kernel.

        Raises:
            NotFoundError: no kernel, or several, answer to ``key`` (the message lists
                them).
        """
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
        """One instance, as the commands name it.

        Parameters:
            spec: ``KERNEL/INSTANCE`` (each any key :meth:`kernel` and
                :meth:`Kernel.instance` take), or ``KERNEL`` alone when that kernel has
                exactly one instance.

        Returns:
            The instance.

        Raises:
            NotFoundError: no such kernel or instance, or ``KERNEL`` alone names a
                kernel with several instances.
        """
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
        """Every instance of every kernel, kernel by kernel.

        Yields:
            The instances.
        """
        for kernel in self.kernels():
            yield from kernel.instances()

    def stored_bytes(self) -> int:
        """The bytes of the database's files, every file counted (a chunk shared by
        several instances once per instance).

        Returns:
            The total.
        """
        return stored_bytes(self.root)

    def disk_bytes(self) -> int:
        """The bytes the recordings take on disk, a chunk shared through the content
        store counted once.

        Returns:
            The total.
        """
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
    """A static kernel of a database: its code, parameters, globals and instances.
    Metadata is read on first use. Get one from :meth:`Database.kernel` or
    :meth:`Database.kernels`.

    Parameters:
        db: the database.
        static_hash: the kernel's static hash (its folder's name).
    """

    def __init__(self, db: Database, static_hash: str):
        self.db = db
        self.static_hash = static_hash
        self.path = layout.kernel_dir(db.root, static_hash)

    @cached_property
    def _attrs(self) -> dict:
        layout.no_symlinks(self.db.root, self.path / "zarr.json")
        attrs = node_attributes(self.path, "kernel", KERNEL_SCHEMA, f"kernel {self.static_hash}")
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
        """Whether the kernel's metadata reads.

        Returns:
            Why it cannot be read, as one line; None when it reads.
        """
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
        info = read_array_info(path.parent, self.db.info.vas_size)
        refuse_sparse(info, "ir")
        return info

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
        """The stored code as it is.

        Returns:
            The bytes of the code array: bitcode, a fatbinary, PTX or a cubin (:attr:`code`
            says which).
        """
        return read_range(self._ir_info()).tobytes()

    def code_images(self) -> list:
        """This kernel's PTX and cubin entries in its stored code
        (``mneme.instrument.fatbin.FatbinEntry``), cubins first, newest arch first.

        Returns:
            The entries; empty for a kernel recorded with LLVM IR.

        Raises:
            CorruptDataError: the stored fatbinary or image does not parse.
        """
        from mneme.instrument.errors import FatbinError
        from mneme.instrument.fatbin import parse_code_image

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
        """The kernel's LLVM IR module.

        Returns:
            The bitcode.

        Raises:
            NotFoundError: the kernel was recorded from an nvcc build (no LLVM IR).
            CorruptDataError: the stored bytes are not bitcode.
        """
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
        """The dynamic hashes of the kernel's committed instances.

        Returns:
            The hashes, sorted.
        """
        base = layout.no_symlinks(self.db.root, self.path / layout.INSTANCES)
        try:
            names = os.listdir(base)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return sorted(n for n in names if _is_hash(n) and _is_node(base / n))

    def instances(self) -> list[Instance]:
        """The kernel's committed instances.

        Returns:
            The instances, by dynamic hash.
        """
        return [Instance(self, h) for h in self.instance_hashes()]

    def instance(self, key: str) -> Instance:
        """One instance of the kernel.

        Parameters:
            key: its dynamic hash or a unique prefix of it.

        Returns:
            The instance.

        Raises:
            NotFoundError: no instance, or several, answer to ``key``.
        """
        hashes = self.instance_hashes()
        matches = [h for h in hashes if h == key] or [h for h in hashes if key and h.startswith(key)]
        if len(matches) == 1:
            return Instance(self, matches[0])
        listed = ", ".join(hashes) or "none"
        raise NotFoundError(
            f"kernel {self.static_hash} has no single instance {key!r}; recorded: {listed}"
        )

    def stored_bytes(self) -> int:
        """The bytes of the kernel's files, its instances' included.

        Returns:
            The total.
        """
        return stored_bytes(self.path)

    def __repr__(self) -> str:
        return f"Kernel({self.static_hash}, {self.demangled_name!r})"

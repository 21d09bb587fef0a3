"""A recorded kernel instance as the reader sees it: launch configuration, arguments,
metadata checked against the layout rules, and its memory before and after the launch
(prologue, epilogue) as numpy arrays. Database and Kernel (reader.py) lead to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from . import layout
from .app_time import APP_TIME_KEY, AppTime
from .chunks import (
    ArrayInfo,
    map_chunks,
    own_bytes,
    present_chunks,
    read_array_info,
    read_chunk_file,
    read_range,
    refuse_sparse,
    stored_bytes,
    stored_chunk_indices,
)
from .codec import decode_chunk
from .errors import CorruptDataError, DatabaseError, NotFoundError
from .node_attributes import node_attributes
from .predecessor import PREDECESSOR_KEY, Predecessor
from .region_layout import address_space_problem, region_layout_problem
from .schema import INSTANCE_SCHEMA, MAX_ARGS_SIZE, Annotation, RegionInfo

if TYPE_CHECKING:
    from .reader import Kernel


@dataclass(frozen=True)
class RegionChange:
    """How one region differs between prologue and epilogue (:meth:`Instance.changes`).

    Attributes:
        name: the region's name.
        kind: its kind (heap, global, ...).
        size: its size in bytes.
        changed_bytes: how many of its bytes the launch changed.
        first_offset: the offset of the first changed byte; None when none changed.
    """

    name: str
    kind: str
    size: int
    changed_bytes: int
    first_offset: int | None


class Instance:
    """A recorded kernel instance: launch configuration, arguments, memory before and
    after. Metadata is read on first use, bytes only when asked for (a region's range
    at a time). Get one from :meth:`Database.instance` or :meth:`Kernel.instances`.

    Parameters:
        kernel: the kernel it belongs to.
        dynamic_hash: its dynamic hash (its folder's name).
    """

    def __init__(self, kernel: Kernel, dynamic_hash: str):
        self.kernel = kernel
        self.dynamic_hash = dynamic_hash
        self.path = layout.instance_dir(kernel.db.root, kernel.static_hash, dynamic_hash)

    @cached_property
    def _attrs(self) -> dict:
        layout.no_symlinks(self.kernel.db.root, self.path / "zarr.json")
        attrs = node_attributes(self.path, "instance", INSTANCE_SCHEMA, f"instance {self.id}")
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
    def cooperative(self) -> bool:
        """Whether the launch was cooperative (cudaLaunchCooperativeKernel,
        cuLaunchCooperativeKernel or the COOPERATIVE launch attribute): its blocks were all
        resident at once and may synchronise the whole grid. Replay launches it so. False
        for instances recorded before the key."""
        return self._attrs.get("cooperative") is True

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
        return tuple(sorted({r.device for r in self.regions  # type: ignore[misc]
                             if r.kind == layout.PEER_KIND}))

    @cached_property
    def regions(self) -> list[RegionInfo]:
        """The regions, checked against the layout rules of docs/format.md: sorted by
        address, not overlapping, heap regions inside the recorded address range."""
        regions = [RegionInfo.from_json(r) for r in self._attrs["regions"]]
        info = self.kernel.db.info
        recorded = self._attrs.get("address_space")  # absent before writers stored it
        own_range = recorded is not None and "device" in self._attrs  # a GPU's own range
        if own_range:
            problem = address_space_problem(recorded["base"], recorded["size"])  # type: ignore[index]
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
        """Whether the instance's metadata reads (its schema, the layout rules); its
        chunks are not read (``mneme check`` reads them).

        Returns:
            Why it cannot be read, as one line; None when it reads.
        """
        try:
            self._attrs, self.regions, self.annotations, self.app_time, self.predecessor  # noqa: B018
        except DatabaseError as error:
            return str(error)
        return None

    def region_checksums(self, name: str) -> tuple[int, int] | None:
        """The content checksums of a region, recorded at write time (format 2).

        Parameters:
            name: the region's name.

        Returns:
            CRC-32C of its prologue and of its epilogue (all its bytes); None in a
            format 1 database.

        Raises:
            CorruptDataError: a format 2 database lacks them.
        """
        for r in self._attrs["regions"]:
            if r["name"] == name and "prologue_crc32c" in r and "epilogue_crc32c" in r:
                return r["prologue_crc32c"], r["epilogue_crc32c"]
        if self.kernel.db.info.format_version >= 2:
            raise CorruptDataError(f"instance {self.id} region {name}: content checksums are missing")
        return None

    def epilogue_encoding(self, name: str) -> str:
        """How the epilogue of a region is stored.

        Parameters:
            name: the region's name.

        Returns:
            ``bytes`` or ``xor-prologue`` (its XOR with the prologue).
        """
        self.region(name)
        return next(r["epilogue_encoding"] for r in self._attrs["regions"] if r["name"] == name)

    def region(self, name: str) -> RegionInfo:
        """One region of the instance.

        Parameters:
            name: the region's name.

        Returns:
            The region.

        Raises:
            NotFoundError: the instance has no such region (the message lists them).
        """
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
        refuse_sparse(info, "args")
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
        refuse_sparse(info, "epilogue")
        return encoding

    def _prologue_encoding(self, info: ArrayInfo) -> None:
        if info.encoding != "bytes":
            raise CorruptDataError(f"{info.path}: a prologue array must have encoding bytes")

    def stored_array(self, side: str, name: str) -> tuple[ArrayInfo, str]:
        """The prologue or epilogue array of a region as stored (its chunk files, for
        readers that decompress them elsewhere: restore's device path) and its encoding,
        checked as ``prologue`` and ``stored_epilogue`` check them. Where
        ``info.absent_is_zero`` (a sparse prologue, an ``xor-prologue`` epilogue) an absent
        chunk reads as zeros; elsewhere it is corruption.

        Parameters:
            side: ``prologue`` or ``epilogue`` (``layout.PROLOGUE``, ``layout.EPILOGUE``).
            name: the region's name.

        Returns:
            The array's chunk files and its encoding.

        Raises:
            CorruptDataError: the array's size or encoding does not match the metadata.
        """
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
        """Bytes of a region before the launch; only the chunks of the range are read (an
        absent chunk of a sparse prologue reads as zeros).

        Parameters:
            name: the region's name.
            start: the first byte (an offset in the region).
            stop: the end of the range; None for the region's end.
            out: a buffer of ``stop - start`` bytes to decompress into (restore streams
                through page-locked buffers); None for a new array.

        Returns:
            The bytes, as a uint8 array.
        """
        info, _ = self._array(layout.PROLOGUE, name)
        self._prologue_encoding(info)
        return read_range(info, start, stop, out=out)

    def stored_epilogue(
        self, name: str, start: int = 0, stop: int | None = None, *, out: np.ndarray | None = None
    ) -> tuple[str, np.ndarray]:
        """The epilogue array as stored, and its encoding: ``bytes`` (the bytes after the
        launch) or ``xor-prologue`` (their XOR with the prologue; zeros where a chunk is
        absent). For readers that resolve the XOR themselves (restore does it on the device).

        Parameters:
            name: the region's name.
            start: the first byte.
            stop: the end of the range; None for the region's end.
            out: a buffer to decompress into; None for a new array.

        Returns:
            The encoding and the stored bytes.
        """
        info, encoding = self.stored_array(layout.EPILOGUE, name)
        return encoding, read_range(info, start, stop, out=out)

    def epilogue(
        self, name: str, start: int = 0, stop: int | None = None, *, prologue: np.ndarray | None = None
    ) -> np.ndarray:
        """Bytes of a region after the launch; XOR deltas are resolved against the
        prologue.

        Parameters:
            name: the region's name.
            start: the first byte.
            stop: the end of the range; None for the region's end.
            prologue: the prologue's bytes of the same range when the caller has them
                already (they are not read and decompressed again).

        Returns:
            The bytes, as a uint8 array.

        Raises:
            ValueError: ``prologue`` is not the range's size.
        """
        encoding, delta = self.stored_epilogue(name, start, stop)
        if encoding == "bytes":
            return delta
        if prologue is None:
            prologue = self.prologue(name, start, stop)
        elif prologue.nbytes != delta.nbytes:
            raise ValueError(f"prologue of {prologue.nbytes} bytes given for {delta.nbytes} bytes of {name}")
        return np.bitwise_xor(prologue.view(np.uint8).reshape(-1), delta, out=delta)

    def changes(self) -> list[RegionChange]:
        """Which regions the launch changed, and how many bytes of each (every region
        read, 64 MiB at a time).

        Returns:
            One change per region, in region order.
        """
        result = []
        for region in self.regions:
            if self.epilogue_encoding(region.name) == "xor-prologue":
                result.append(self._delta_change(region))
                continue
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

    def _delta_change(self, region: RegionInfo) -> RegionChange:
        """A region stored as an XOR delta changed where the delta is not zero: only
        stored chunks are read and decoded (the prologue's too, so that damage shows as it
        would when reading the bytes), never the zeros of absent ones: a sparse 100 GB
        region costs what is stored."""
        pro, _ = self.stored_array(layout.PROLOGUE, region.name)
        delta, _ = self.stored_array(layout.EPILOGUE, region.name)
        present = present_chunks(pro)

        def decoded(info: ArrayInfo, index: int) -> np.ndarray:
            lo, hi = info.chunk_bounds(index)
            blob = read_chunk_file(info, index)
            if blob is None:
                if info.absent_is_zero:  # removed since it was listed: reads as zeros
                    return np.zeros(hi - lo, np.uint8)
                raise CorruptDataError(f"{info.path}: chunk {index} is missing (data truncated)")
            return decode_chunk(blob, info.chunk_size, f"{info.path} chunk {index}")[: hi - lo]

        def nonzero(index: int) -> tuple[int, int | None]:
            found = np.flatnonzero(decoded(delta, index))
            first = delta.chunk_bounds(index)[0] + int(found[0]) if found.size else None
            return int(found.size), first

        for _ in map_chunks(lambda i: decoded(pro, present[i]).size, len(present)):
            pass
        changed, first = 0, None
        indices = stored_chunk_indices(delta)
        for count, at in map_chunks(lambda i: nonzero(indices[i]), len(indices)):
            changed += count
            if first is None and at is not None:
                first = at
        return RegionChange(region.name, region.kind, region.size, changed, first)

    def raw_bytes(self) -> int:
        """The bytes the instance represents uncompressed.

        Returns:
            Its regions twice (prologue and epilogue) and its arguments.
        """
        return 2 * sum(r.size for r in self.regions) + self._attrs["args_size"]

    def stored_bytes(self) -> int:
        """The bytes of the instance's files (a chunk shared with others counted too).

        Returns:
            The total.
        """
        return stored_bytes(self.path)

    def unique_bytes(self) -> int:
        """The stored bytes no other instance shares: what deleting it would free.

        Returns:
            The total.
        """
        return own_bytes(self.path)

    def describe(self) -> dict:
        """Everything about the instance as plain JSON data (what ``mneme show --json``
        prints).

        Returns:
            The description.
        """
        return {
            "id": self.id,
            "kernel": self.kernel.demangled_name,
            "static_hash": self.kernel.static_hash,
            "dynamic_hash": self.dynamic_hash,
            "grid": list(self.grid),
            "block": list(self.block),
            "shared_mem": self.shared_mem,
            "cluster": list(self.cluster) if self.cluster else None,
            "cooperative": self.cooperative,
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

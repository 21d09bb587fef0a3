"""Verification of a replayed region against its recorded epilogue.

The comparison runs on the device (``DeviceVerifier``, kernels from verify_kernels.py);
``reference_words`` is the same computation in numpy, used to test the semantics without
a GPU and to cross-check the device kernels on one. Both fill the same 8-word result
slot, and ``evaluate`` turns a slot into a ``Mismatch`` (or None) identically.

Semantics (per region):

- no tolerance: bit-exact; count = mismatching bytes, first offset = first such byte;
- ``dtype`` + ``atol``/``rtol``: element ``a`` (replayed) passes against ``b`` (recorded)
  when ``|a - b| <= atol + rtol * |b|``; NaN matches NaN; count = failing elements;
- ``norm`` "l2": the region passes when ``||a - b||_2 <= atol + rtol * ||b||_2``,
  "max": when ``max|a - b| <= atol + rtol * max|b|``; count = differing elements.
"""

from __future__ import annotations

import math
import struct
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from .errors import ReplayConfigError
from .verify_cubin import verification_cubin
from .verify_kernels import (
    BLOCK_THREADS,
    RAW_WIDTHS,
    RESULT_BYTES,
    RESULT_WORDS,
    TYPED_DTYPES,
    multiset_kernel_name,
    raw_kernel_name,
    typed_kernel_name,
    xor_kernel_name,
)

NORMS = (None, "l2", "max")
_NO_INDEX = 2**64 - 1


@dataclass(frozen=True)
class Tolerance:
    """How one region is compared; the default is bit-exact.

    Attributes:
        dtype: the element type to compare as (a numpy dtype name); None compares bytes.
        atol: the absolute tolerance.
        rtol: the relative tolerance (an element passes when |a - b| <= atol + rtol * |b|).
        norm: None (element by element), "l2" or "max": the whole region passes when the
            norm of the difference is within the bound.

    Raises:
        ReplayConfigError: an unknown dtype or norm, a tolerance that is not a finite
            number >= 0, or a tolerance without the dtype to compare as.
    """

    dtype: str | None = None
    atol: float = 0.0
    rtol: float = 0.0
    norm: str | None = None

    def __post_init__(self) -> None:
        if self.dtype is not None:
            try:
                dtype = np.dtype(self.dtype)
            except TypeError:
                raise ReplayConfigError(f"unknown dtype {self.dtype!r} in a tolerance") from None
            object.__setattr__(self, "dtype", dtype.name)
        for name in ("atol", "rtol"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise ReplayConfigError(f"{name} must be a number, not {value!r}")
            if not math.isfinite(value) or value < 0:
                raise ReplayConfigError(f"{name} must be finite and >= 0, not {value!r}")
            object.__setattr__(self, name, float(value))
        if self.norm not in NORMS:
            raise ReplayConfigError(f"norm must be 'l2' or 'max' (or none), not {self.norm!r}")
        if (self.atol or self.rtol or self.norm) and self.dtype is None:
            raise ReplayConfigError("a tolerance or norm needs the dtype to compare elements as")

    @property
    def exact(self) -> bool:
        return self.norm is None and self.atol == 0.0 and self.rtol == 0.0

    @classmethod
    def from_annotation(cls, annotation: Any) -> Tolerance:
        """The tolerance a recording's annotation asks for.

        Parameters:
            annotation: a database Annotation (dtype, atol, rtol, norm).

        Returns:
            The tolerance.
        """
        return cls(
            dtype=annotation.dtype,
            atol=float(annotation.atol),
            rtol=float(annotation.rtol),
            norm=annotation.norm,
        )

    def to_dict(self) -> dict[str, Any]:
        """The tolerance as plain JSON data.

        Returns:
            Its fields.
        """
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tolerance:
        """A tolerance from plain data.

        Parameters:
            data: ``{dtype, atol, rtol, norm}`` (absent fields keep their defaults).

        Returns:
            The tolerance.

        Raises:
            ReplayConfigError: ``data`` is not an object, or names an unknown field.
        """
        if not isinstance(data, dict):
            raise ReplayConfigError("a tolerance must be an object {dtype, atol, rtol, norm}")
        unknown = set(data) - {f.name for f in fields(cls)}
        if unknown:
            raise ReplayConfigError(f"unknown tolerance field(s): {', '.join(sorted(unknown))}")
        return cls(**data)


@dataclass(frozen=True)
class Mismatch:
    """One region that failed verification.

    Attributes:
        region: the region's name.
        address: its address.
        size: its size in bytes.
        unit: "bytes" (bit-exact) or the dtype the region was compared as
        count: mismatching bytes (bit-exact) or elements
        first_offset: byte offset of the first mismatch inside the region
        max_error: max |replayed - recorded| over mismatches (None for bit-exact bytes)
        norm_error: for norm checks: the norm of the difference.
        norm_bound: for norm checks: the bound it had to meet.
    """

    region: str
    address: int
    size: int
    unit: str
    count: int
    first_offset: int
    max_error: float | None = None
    norm_error: float | None = None
    norm_bound: float | None = None

    def describe(self) -> str:
        """The mismatch for people.

        Returns:
            One line: the region, how many bytes or elements differ, where, by how much.
        """
        text = (
            f"{self.region} ({self.size} bytes at {self.address:#x}): {self.count} "
            f"{'bytes' if self.unit == 'bytes' else self.unit + ' elements'} differ, "
            f"first at offset {self.first_offset}"
        )
        if self.max_error is not None:
            text += f", max error {self.max_error:.6g}"
        if self.norm_error is not None:
            text += f", norm {self.norm_error:.6g} > bound {self.norm_bound:.6g}"
        return text

    def to_dict(self) -> dict[str, Any]:
        """The mismatch as plain JSON data.

        Returns:
            Its fields.
        """
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Mismatch:
        """A mismatch from the data :meth:`to_dict` writes.

        Parameters:
            data: the fields.

        Returns:
            The mismatch.
        """
        return cls(**data)


@dataclass(frozen=True)
class CheckPlan:
    """Which kernel compares a region, over how many elements of what size."""

    kernel: str
    count: int
    itemsize: int
    typed: bool
    mode: int  # typed only: 0 exact, 1 elementwise tolerance, 2 norm
    dtype: str | None  # the element dtype of a typed check
    unit: str


def plan_check(tolerance: Tolerance, size: int, *addresses: int) -> CheckPlan:
    """Choose the comparison for a region: typed (with its tolerance) where the region is
    a whole number of aligned elements, else bytes in the widest words that fit.

    Parameters:
        tolerance: how the region is compared.
        size: its size in bytes.
        *addresses: the addresses the kernel reads it at (their alignment counts).

    Returns:
        The plan: which kernel, over how many elements of what size.

    Raises:
        ReplayConfigError: a tolerance that cannot apply (a size or address that is not
            a whole number of aligned elements, a dtype without a typed comparison).
        AssertionError: never (one-byte words always fit).
    """
    if tolerance.dtype is not None and not (tolerance.exact and tolerance.dtype == "uint8"):
        dtype = np.dtype(tolerance.dtype)
        element = dtype
        if dtype.kind == "c":  # complex: compare real and imaginary parts as floats
            element = np.dtype(f"float{dtype.itemsize * 4}")
        itemsize = element.itemsize
        aligned = size % dtype.itemsize == 0 and all(a % itemsize == 0 for a in addresses)
        if element.name in TYPED_DTYPES and aligned:
            mode = 0 if tolerance.exact else (2 if tolerance.norm else 1)
            return CheckPlan(
                typed_kernel_name(element.name),
                size // itemsize,
                itemsize,
                True,
                mode,
                element.name,
                tolerance.dtype,
            )
        if not tolerance.exact:
            why = (
                f"{size} bytes is not a whole number of {dtype.name} elements"
                if size % dtype.itemsize
                else "its address is not aligned to the element"
                if not aligned
                else f"dtype {dtype.name} cannot be compared with a tolerance"
            )
            raise ReplayConfigError(f"cannot compare a region as {dtype.name}: {why}")
    for width in RAW_WIDTHS:
        if size % width == 0 and all(a % width == 0 for a in addresses):
            return CheckPlan(raw_kernel_name(width), size // width, width, False, 0, None, "bytes")
    raise AssertionError("unreachable: width 1 always fits")


def initial_words(slots: int) -> np.ndarray:
    """The host-initialised result slots (first mismatch = ~0, everything else 0)."""
    words = np.zeros((slots, RESULT_WORDS), dtype=np.uint64)
    words[:, 1] = _NO_INDEX
    return words


def _as_double(word: int) -> float:
    return struct.unpack("<d", int(word).to_bytes(8, "little"))[0]


def evaluate(
    words: np.ndarray, plan: CheckPlan, tolerance: Tolerance, region: str, address: int, size: int
) -> Mismatch | None:
    """Decide one region from its result slot.

    Parameters:
        words: the slot's words, as the kernel left them.
        plan: the comparison that ran.
        tolerance: the region's tolerance.
        region: its name (for the mismatch).
        address: its recorded address (for the mismatch).
        size: its size in bytes.

    Returns:
        The mismatch, or None when the region verifies.
    """
    count = int(words[0])
    first = int(words[1])
    first_offset = first if not plan.typed else first * plan.itemsize
    max_error = _as_double(words[2]) if plan.typed else None
    if plan.typed and plan.mode == 2:
        error: float | None
        if tolerance.norm == "l2":
            error = math.sqrt(_as_double(words[3]))
            bound = tolerance.atol + tolerance.rtol * math.sqrt(_as_double(words[4]))
        else:
            error = max_error if count else 0.0
            bound = tolerance.atol + tolerance.rtol * _as_double(words[5])
        if error <= bound:  # type: ignore[operator]
            return None
        return Mismatch(
            region,
            address,
            size,
            plan.unit,
            count,
            first_offset if count else 0,
            max_error,
            error,
            bound,
        )
    if count == 0:
        return None
    return Mismatch(region, address, size, plan.unit, count, first_offset, max_error)


def reference_words(
    actual: np.ndarray | bytes, expected: np.ndarray | bytes, plan: CheckPlan, tolerance: Tolerance
) -> np.ndarray:
    """What the device kernel computes for ``plan``, in numpy: the reference the device
    results are tested against.

    Parameters:
        actual: the replayed bytes.
        expected: the recorded bytes.
        plan: the comparison.
        tolerance: the region's tolerance.

    Returns:
        One result slot's words.
    """
    a_bytes = np.frombuffer(bytes(actual), dtype=np.uint8)
    b_bytes = np.frombuffer(bytes(expected), dtype=np.uint8)
    words = initial_words(1)[0]
    if not plan.typed:
        differ = np.flatnonzero(a_bytes != b_bytes)
        words[0] = differ.size
        if differ.size:
            words[1] = differ[0]
        return words
    a_bits = a_bytes.view(f"u{plan.itemsize}")
    b_bits = b_bytes.view(f"u{plan.itemsize}")
    ne = a_bits != b_bits
    with np.errstate(all="ignore"):
        fa = a_bytes.view(plan.dtype).astype(np.float64)  # type: ignore[arg-type]
        fb = b_bytes.view(plan.dtype).astype(np.float64)  # type: ignore[arg-type]
        diff = np.abs(fa - fb)
        err = np.where(ne, np.where(np.isnan(diff), np.inf, diff), 0.0)
        afb = np.where(np.isnan(fb), 0.0, np.abs(fb))
        bound = tolerance.atol + tolerance.rtol * afb
        both_nan = np.isnan(fa) & np.isnan(fb)
        bad = ~((err <= bound) | both_nan) if plan.mode == 1 else ne
        index = np.flatnonzero(bad)
        words[0] = index.size
        if index.size:
            words[1] = index[0]
            words[2] = np.float64(err[bad].max()).view(np.uint64)
        if plan.mode == 2:
            words[3] = np.float64(np.sum(err * err)).view(np.uint64)
            words[4] = np.float64(np.sum(afb * afb)).view(np.uint64)
            words[5] = np.float64(afb.max() if afb.size else 0.0).view(np.uint64)
    return words


def verify_host(
    actual: np.ndarray | bytes,
    expected: np.ndarray | bytes,
    tolerance: Tolerance = Tolerance(),  # noqa: B008 - frozen, immutable
    region: str = "region",
    address: int = 0,
) -> Mismatch | None:
    """Verify one region on the host (reference semantics; the engine uses the device).

    Parameters:
        actual: the replayed bytes.
        expected: the recorded bytes.
        tolerance: how to compare them.
        region: the region's name (for the mismatch).
        address: its recorded address.

    Returns:
        The mismatch, or None when they agree.

    Raises:
        ValueError: ``actual`` and ``expected`` differ in size.
        ReplayConfigError: the tolerance cannot apply to the region.
    """
    size = len(bytes(expected))
    if len(bytes(actual)) != size:
        raise ValueError("actual and expected differ in size")
    plan = plan_check(tolerance, size, address)
    return evaluate(
        reference_words(actual, expected, plan, tolerance), plan, tolerance, region, address, size
    )


# ------------------------------------------------------------------ device side


@dataclass
class RegionCheck:
    """One region to verify: where the replayed bytes are and where the recorded ones.

    Attributes:
        region: the region's name.
        actual: the device address of the replayed bytes.
        expected: the device address of the recorded epilogue.
        size: bytes to compare.
        tolerance: how to compare them.
        address: the address reported in mismatches (the recorded one).
        period: 0 where ``expected`` is as long as the region; else the bytes of an
            expected buffer that repeats over it (a power of two, a whole number of the
            compared elements): a zero range against a small zero buffer.

    Raises:
        ReplayConfigError: the tolerance cannot apply to the region.
        ValueError: a period that is not a power of two of whole elements.
    """

    region: str
    actual: int
    expected: int
    size: int
    tolerance: Tolerance
    address: int = 0
    period: int = 0

    def __post_init__(self) -> None:
        self.plan = plan_check(self.tolerance, self.size, self.actual, self.expected)
        elements = self.period // self.plan.itemsize
        if self.period and (self.period % self.plan.itemsize or elements & (elements - 1)):
            raise ValueError(f"a period of {self.period} bytes is not a power of two of "
                             f"{self.plan.itemsize}-byte elements")
        #: the kernels read expected element ``i & expected_mask``
        self.expected_mask = elements - 1 if self.period else (1 << 64) - 1


class DeviceVerifier:
    """Compares replayed regions with recorded epilogues on the GPU.

    ``results`` (in ``run``) is a device buffer of ``RESULT_BYTES`` per check (the engine
    allocates it in its scratch memory); everything is queued on ``stream`` and read back
    with one copy.

    Parameters:
        device: the mneme.runtime Device.
        arch: the target its verification kernels are compiled for (``sm_90``).
    """

    def __init__(self, device, arch: str):
        self.device = device
        self._module = device.load_module(verification_cubin(arch))
        self._functions: dict[str, Any] = {}
        sms = max(int(device.properties.multiprocessor_count), 1)
        self._max_blocks = sms * 8

    def _function(self, name: str):
        if name not in self._functions:
            self._functions[name] = self._module.function(name)
        return self._functions[name]

    def run(self, checks: list[RegionCheck], results: int, stream=None) -> list[Mismatch]:
        """Compare regions on the device, one kernel launch each, and read the verdicts
        back with one copy.

        Parameters:
            checks: the regions.
            results: a device buffer of ``RESULT_BYTES`` per check.
            stream: the stream to queue on; None for the default stream.

        Returns:
            The regions that did not verify.
        """
        if not checks:
            return []
        results = int(results)
        self.device.copy_to_device(results, initial_words(len(checks)), stream)
        for slot, check in enumerate(checks):
            if check.size == 0:
                continue
            plan = check.plan
            function = self._function(plan.kernel)
            out = results + slot * RESULT_BYTES
            if plan.typed:
                args = function.pack_arguments(
                    check.actual,
                    check.expected,
                    plan.count,
                    check.expected_mask,
                    plan.mode,
                    float(check.tolerance.atol),
                    float(check.tolerance.rtol),
                    out,
                )
            else:
                args = function.pack_arguments(check.actual, check.expected, plan.count,
                                               check.expected_mask, out)
            blocks = max(1, min(-(-plan.count // BLOCK_THREADS), self._max_blocks))
            function.launch((blocks, 1, 1), (BLOCK_THREADS, 1, 1), args, 0, stream)
        words = np.empty((len(checks), RESULT_WORDS), dtype=np.uint64)
        self.device.copy_from_device(words, results, stream)
        if stream is not None:
            stream.synchronize()
        else:
            self.device.synchronize()
        mismatches = []
        for slot, check in enumerate(checks):
            found = evaluate(
                words[slot], check.plan, check.tolerance, check.region, check.address, check.size
            )
            if found is not None:
                mismatches.append(found)
        return mismatches

    def multiset_digest(self, address: int, size: int, width: int, slot: int, stream=None) -> tuple[int, int]:
        """The order-insensitive digest of device memory as elements of one width
        (``multiset_digest_host`` on the device); only the two words come back.

        Parameters:
            address: the first byte.
            size: bytes to digest.
            width: the element width (1, 2, 4 or 8 bytes).
            slot: a result slot of scratch memory (device address).
            stream: the stream to queue on; None for the default stream.

        Returns:
            The two 64-bit words of the digest.

        Raises:
            ValueError: ``size`` or ``address`` is not a whole number of elements.
        """
        if size % width or address % width:
            raise ValueError(f"{size} bytes at {address:#x} are not aligned {width}-byte elements")
        words = np.zeros(2, dtype=np.uint64)
        self.device.copy_to_device(int(slot), words, stream)
        count = size // width
        if count:
            function = self._function(multiset_kernel_name(width))
            blocks = max(1, min(-(-count // BLOCK_THREADS), self._max_blocks))
            args = function.pack_arguments(int(address), count, int(slot))
            function.launch((blocks, 1, 1), (BLOCK_THREADS, 1, 1), args, 0, stream)
        self.device.copy_from_device(words, int(slot), stream)
        if stream is not None:
            stream.synchronize()
        else:
            self.device.synchronize()
        return int(words[0]), int(words[1])

    def xor_into(self, dst: int, src: int, nbytes: int, stream=None) -> None:
        """``dst ^= src`` over device bytes (8-byte words where both are aligned, bytes for
        the rest).

        Parameters:
            dst: the destination's device address.
            src: the source's.
            nbytes: bytes to XOR.
            stream: the stream to queue on; None for the default stream.
        """
        wide = nbytes // 8 * 8 if dst % 8 == 0 and src % 8 == 0 else 0
        for width, offset, part in ((8, 0, wide), (1, wide, nbytes - wide)):
            n = part // width  # elements of this width
            if n == 0:
                continue
            function = self._function(xor_kernel_name(width))
            blocks = max(1, min(-(-n // BLOCK_THREADS), self._max_blocks))
            args = function.pack_arguments(int(dst) + offset, int(src) + offset, n)
            function.launch((blocks, 1, 1), (BLOCK_THREADS, 1, 1), args, 0, stream)

    def raw_words(self, check: RegionCheck, results: int) -> np.ndarray:
        """The result slot of one check (for cross-checking against reference_words).

        Parameters:
            check: the region.
            results: a device buffer of one result slot.

        Returns:
            The slot's words.
        """
        self.run([check], results)
        words = np.empty(RESULT_WORDS, dtype=np.uint64)
        self.device.copy_from_device(words, int(results))
        return words

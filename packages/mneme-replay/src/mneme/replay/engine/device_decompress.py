"""nvCOMP's batched zstd decompression on the GPU, through ctypes (restore's device path).

The library comes from the ``nvidia-libnvcomp-cu13`` wheel (``nvidia/libnvcomp/lib64``
or ``lib``), or ``MNEME_NVCOMP=/path/to/libnvcomp.so.N``. nvCOMP links the CUDA runtime
statically; the runtime works in the context current on the calling thread, so every call
here runs with the device's primary context (the one ``mneme.runtime`` uses) pushed.

Bound (nvCOMP 5/6 C API, ``nvcomp/zstd.h``): ``nvcompGetProperties``,
``nvcompBatchedZstdDecompressGetRequiredAlignments``,
``nvcompBatchedZstdDecompressGetTempSize`` and ``nvcompBatchedZstdDecompressAsync``, the
latter two taking ``nvcompBatchedZstdDecompressOpts_t`` (64 bytes) by value.

``MNEME_RESTORE=host`` keeps restore on the host (benchmarks comparing both paths).
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
from pathlib import Path

from .errors import NvcompError

#: nvcompStatus_t values worth a name in a message
STATUS_NAMES = {
    0: "success", 10: "invalid value", 11: "not supported", 12: "cannot decompress",
    13: "bad checksum", 15: "output buffer too small", 17: "alignment", 18: "chunk size too large",
    20: "wrong input length", 21: "batch size too large", 1000: "CUDA error", 10000: "internal error",
}
_NAMES = ("libnvcomp.so.6", "libnvcomp.so.5", "libnvcomp.so")
#: the oldest nvCOMP whose batched API takes the options struct (5.0.0 = 5000)
_OLDEST = 5000


def status_name(code: int) -> str:
    return STATUS_NAMES.get(code, f"status {code}")


class _DecompressOpts(ctypes.Structure):
    """nvcompBatchedZstdDecompressOpts_t: the backend, then 60 reserved (zeroed) bytes."""

    _fields_ = [("backend", ctypes.c_int), ("reserved", ctypes.c_char * 60)]


class _Alignments(ctypes.Structure):
    """nvcompAlignmentRequirements_t."""

    _fields_ = [("input", ctypes.c_size_t), ("output", ctypes.c_size_t), ("temp", ctypes.c_size_t)]


class _Properties(ctypes.Structure):
    """nvcompProperties_t."""

    _fields_ = [("version", ctypes.c_uint32), ("cudart_version", ctypes.c_uint32)]


def library_candidates() -> list[Path]:
    """Where libnvcomp is looked for: MNEME_NVCOMP alone when set, else the
    nvidia-libnvcomp-cu13 wheel's folders."""
    override = os.environ.get("MNEME_NVCOMP")
    if override:
        return [Path(override)]
    found: list[Path] = []
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        spec = None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for lib in ("lib64", "lib"):
            found += [Path(folder) / "libnvcomp" / lib / name for name in _NAMES]
    return found


class Nvcomp:
    """The loaded library's zstd decompression entry points."""

    def __init__(self, path: Path) -> None:
        try:
            self._lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        except OSError as error:
            raise NvcompError(f"cannot load {path}: {error}") from None
        self.path = path
        size_p = ctypes.POINTER(ctypes.c_size_t)
        vp = ctypes.c_void_p
        try:
            self._properties = self._bind("nvcompGetProperties", ctypes.POINTER(_Properties))
            self._alignments = self._bind("nvcompBatchedZstdDecompressGetRequiredAlignments",
                                          _DecompressOpts, ctypes.POINTER(_Alignments))
            self._temp_size = self._bind("nvcompBatchedZstdDecompressGetTempSize", ctypes.c_size_t,
                                         ctypes.c_size_t, _DecompressOpts, size_p, ctypes.c_size_t, vp)
            # (compressed ptrs, compressed bytes, output buffer bytes, actual output bytes,
            #  count, temp, temp bytes, output ptrs, options, statuses, stream)
            self._decompress = self._bind("nvcompBatchedZstdDecompressAsync", vp, vp, vp, vp, ctypes.c_size_t,
                                          vp, ctypes.c_size_t, vp, _DecompressOpts, vp, vp)
        except AttributeError as error:
            raise NvcompError(f"{path} lacks nvCOMP's batched zstd API ({error})") from None
        properties = _Properties()
        self._check(self._properties(ctypes.byref(properties)), "nvcompGetProperties")
        self.version = properties.version
        if self.version < _OLDEST:
            raise NvcompError(f"{path} is nvCOMP {self.version_text}; restore needs 5.0 or newer")
        alignments = _Alignments()
        self._check(self._alignments(_DecompressOpts(), ctypes.byref(alignments)),
                    "nvcompBatchedZstdDecompressGetRequiredAlignments")
        self.input_alignment = max(int(alignments.input), 1)
        self.output_alignment = max(int(alignments.output), 1)
        self.temp_alignment = max(int(alignments.temp), 1)

    @property
    def version_text(self) -> str:
        v = self.version
        return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"

    def _bind(self, name: str, *argtypes):
        function = getattr(self._lib, name)
        function.argtypes = list(argtypes)
        function.restype = ctypes.c_int
        return function

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise NvcompError(f"{what} returned {status_name(status)} ({status})")

    def temp_size(self, chunks: int, max_chunk: int, total: int) -> int:
        """Device bytes of scratch a batch of up to ``chunks`` chunks, none larger than
        ``max_chunk`` and ``total`` bytes in all (uncompressed), needs."""
        out = ctypes.c_size_t()
        self._check(self._temp_size(chunks, max_chunk, _DecompressOpts(), ctypes.byref(out), total, None),
                    "nvcompBatchedZstdDecompressGetTempSize")
        return int(out.value)

    def decompress_async(self, compressed_ptrs: int, compressed_bytes: int, buffer_bytes: int,
                         actual_bytes: int, count: int, temp: int, temp_bytes: int, output_ptrs: int,
                         statuses: int, stream: int) -> None:
        """Queue the decompression of ``count`` frames on ``stream``; every pointer is a
        device address (the four arrays of ``count`` entries each on the device too)."""
        self._check(self._decompress(compressed_ptrs, compressed_bytes, buffer_bytes, actual_bytes, count,
                                     temp, temp_bytes, output_ptrs, _DecompressOpts(), statuses, stream),
                    "nvcompBatchedZstdDecompressAsync")

    def __repr__(self) -> str:
        return f"Nvcomp({self.path}, version {self.version_text})"


@functools.cache
def load() -> Nvcomp:
    """The library of the first candidate that exists; NvcompError (one line) otherwise."""
    candidates = library_candidates()
    for path in candidates:
        if path.is_file():
            return Nvcomp(path)
    if os.environ.get("MNEME_NVCOMP"):
        raise NvcompError(f"MNEME_NVCOMP={os.environ['MNEME_NVCOMP']} does not exist")
    raise NvcompError("nvCOMP is not installed (pip install nvidia-libnvcomp-cu13)")


class PrimaryContext:
    """The primary context of a CUDA device, pushed on the calling thread while inside
    ``with`` (nvCOMP's CUDA runtime then works in it, as mneme.runtime does)."""

    def __init__(self, ordinal: int) -> None:
        try:
            self._cuda = ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise NvcompError(f"cannot load libcuda.so.1: {error}") from None
        self._device = ctypes.c_int()
        self._context = ctypes.c_void_p()
        self._call("cuDeviceGet", ctypes.byref(self._device), ctypes.c_int(ordinal))
        self._call("cuDevicePrimaryCtxRetain", ctypes.byref(self._context), self._device)
        self._retained = True

    def _call(self, name: str, *args) -> None:
        status = getattr(self._cuda, name)(*args)
        if status != 0:
            raise NvcompError(f"{name} failed (CUDA error {status})")

    def __enter__(self) -> PrimaryContext:
        self._call("cuCtxPushCurrent_v2", self._context)
        return self

    def __exit__(self, *exc) -> None:
        self._cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))

    def close(self) -> None:
        if getattr(self, "_retained", False):
            self._retained = False
            self._cuda.cuDevicePrimaryCtxRelease_v2(self._device)

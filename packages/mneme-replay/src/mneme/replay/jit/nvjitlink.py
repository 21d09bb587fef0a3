"""In-process PTX → cubin with nvJitLink (ctypes over libnvJitLink.so, no GPU needed).

nvJitLink embeds ptxas: it takes PTX (or cubins, fatbinaries, LTO-IR) and produces a
linked cubin, with ptxas's ``-v`` report in its info log. Compiling in-process saves
the ptxas subprocess (process start, temporary files) on every compile.

The library comes from the ``nvidia-nvjitlink`` wheel (``nvidia/cu13/lib``), a CUDA
toolkit's ``lib64``, or ``MNEME_NVJITLINK=/path/to/libnvJitLink.so.13``. The C API's
symbols are versioned per minor release (``__nvJitLinkCreate_13_0``, ...); we bind the
``13_0`` ones, which every CUDA 13 library exports.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import JitToolchainError, PtxasError

#: nvJitLinkInputType values
INPUT_CUBIN = 1
INPUT_PTX = 2
INPUT_FATBIN = 4

_API = "13_0"
_RESULTS = (
    "SUCCESS",
    "UNRECOGNIZED_OPTION",
    "MISSING_ARCH",
    "INVALID_INPUT",
    "PTX_COMPILE",
    "NVVM_COMPILE",
    "INTERNAL",
    "THREADPOOL",
    "UNRECOGNIZED_INPUT",
    "FINALIZE",
    "NULL_INPUT",
    "INCOMPATIBLE_OPTIONS",
    "INCORRECT_INPUT_TYPE",
    "ARCH_MISMATCH",
    "OUTDATED_LIBRARY",
    "MISSING_FATBIN",
    "UNRECOGNIZED_ARCH",
    "UNSUPPORTED_ARCH",
    "LTO_NOT_ENABLED",
)
_NAMES = ("libnvJitLink.so.13", "libnvJitLink.so")
#: Largest log or cubin we accept from the library (a sanity bound, never reached).
_MAX_OUTPUT = 1 << 31


def _result_name(code: int) -> str:
    return _RESULTS[code] if 0 <= code < len(_RESULTS) else f"error {code}"


def library_candidates() -> list[Path]:
    """Where libnvJitLink is looked for, in order: MNEME_NVJITLINK, the nvidia-nvjitlink
    wheel, CUDA_PATH/CUDA_HOME/the toolkit's lib64, the dynamic loader's search path."""
    from .toolchain import cuda_root_candidates

    found: list[Path] = []
    override = os.environ.get("MNEME_NVJITLINK")
    if override:
        return [Path(override)]
    spec = importlib.util.find_spec("nvidia")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        found += [Path(folder) / "cu13" / "lib" / name for name in _NAMES]
    for root in cuda_root_candidates():
        for lib in ("lib64", "lib", "targets/x86_64-linux/lib"):
            found += [root / lib / name for name in _NAMES]
    system = ctypes.util.find_library("nvJitLink")
    if system:
        found.append(Path(system))
    return found


class NvJitLink:
    """The loaded library. Thread-safe: each compile uses its own handle, and ctypes
    releases the GIL during the calls, so compiles on several threads run in parallel."""

    def __init__(self, path: Path) -> None:
        try:
            self._lib = ctypes.CDLL(str(path))
        except OSError as error:
            raise JitToolchainError(f"cannot load nvJitLink from {path}: {error}") from None
        self.path = path
        try:
            bind = self._bind
            self._create = bind("Create", ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p)
            self._destroy = bind("Destroy", ctypes.c_void_p)
            self._add = bind(
                "AddData",
                ctypes.c_void_p,
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_size_t,
                ctypes.c_char_p,
            )
            self._complete = bind("Complete", ctypes.c_void_p)
            self._cubin_size = bind("GetLinkedCubinSize", ctypes.c_void_p, ctypes.c_void_p)
            self._cubin = bind("GetLinkedCubin", ctypes.c_void_p, ctypes.c_void_p)
            self._logs = {
                kind: (
                    bind(f"Get{kind}LogSize", ctypes.c_void_p, ctypes.c_void_p),
                    bind(f"Get{kind}Log", ctypes.c_void_p, ctypes.c_char_p),
                )
                for kind in ("Info", "Error")
            }
            major, minor = ctypes.c_uint(), ctypes.c_uint()
            self._lib.nvJitLinkVersion(ctypes.byref(major), ctypes.byref(minor))
        except AttributeError as error:
            raise JitToolchainError(
                f"{path} is not a CUDA 13 nvJitLink library ({error}); "
                "pip install 'nvidia-nvjitlink>=13,<14' or set MNEME_NVJITLINK"
            ) from None
        self.version = (major.value, minor.value)

    def _bind(self, name: str, *argtypes):
        function = getattr(self._lib, f"__nvJitLink{name}_{_API}")
        function.argtypes = list(argtypes)
        function.restype = ctypes.c_int
        return function

    def __repr__(self) -> str:
        return f"NvJitLink({self.path}, version {self.version[0]}.{self.version[1]})"

    def _log(self, handle: ctypes.c_void_p, kind: str) -> str:
        get_size, get = self._logs[kind]
        size = ctypes.c_size_t()
        if get_size(handle, ctypes.byref(size)) != 0 or not 0 < size.value < _MAX_OUTPUT:
            return ""
        buffer = ctypes.create_string_buffer(size.value)
        if get(handle, buffer) != 0:
            return ""
        return buffer.value.decode(errors="replace")

    def link(
        self, inputs: list[tuple[int, bytes, str]], options: list[str]
    ) -> tuple[bytes, str]:
        """(cubin, info log) of linking ``inputs`` — (input type, bytes, name) — under
        ``options`` (``-arch=sm_90``, ``-Xptxas=-v``, ``-r``, ...); PtxasError carries the
        error log's first lines when the library refuses."""
        handle = ctypes.c_void_p()
        encoded = [option.encode() for option in options]
        array = (ctypes.c_char_p * len(encoded))(*encoded)
        code = self._create(ctypes.byref(handle), len(encoded), array)
        if code != 0:
            raise PtxasError(
                f"nvJitLink refused the options {' '.join(options)} ({_result_name(code)})"
            )
        try:
            for kind, data, name in inputs:
                code = self._add(handle, kind, data, len(data), name.encode())
                if code != 0:
                    break
            else:
                code = self._complete(handle)
            if code != 0:
                raise PtxasError(self._failure(handle, code, options))
            size = ctypes.c_size_t()
            code = self._cubin_size(handle, ctypes.byref(size))
            if code != 0 or not 0 < size.value < _MAX_OUTPUT:
                raise PtxasError(f"nvJitLink produced no cubin ({_result_name(code)})")
            buffer = ctypes.create_string_buffer(size.value)
            code = self._cubin(handle, buffer)
            if code != 0:
                raise PtxasError(f"nvJitLink could not return the cubin ({_result_name(code)})")
            return buffer.raw, self._log(handle, "Info")
        finally:
            self._destroy(ctypes.byref(handle))

    def _failure(self, handle: ctypes.c_void_p, code: int, options: list[str]) -> str:
        arch = next((o.split("=", 1)[1] for o in options if o.startswith("-arch=")), "?")
        log = self._log(handle, "Error")
        lines = [line.strip() for line in log.splitlines() if line.strip()]
        useful = [" ".join(line.split()) for line in lines if not line.startswith("ERROR ")]
        detail = " | ".join((useful or lines)[:3]) or _result_name(code)
        return f"ptxas (nvJitLink {self.version[0]}.{self.version[1]}) failed for {arch}: {detail}"


@dataclass(frozen=True)
class _Missing:
    reason: str


_lock = threading.Lock()


@functools.cache
def _load() -> NvJitLink | _Missing:
    tried = []
    for candidate in library_candidates():
        if not candidate.is_file() and candidate.is_absolute():
            tried.append(str(candidate))
            continue
        try:
            return NvJitLink(candidate)
        except JitToolchainError as error:
            return _Missing(str(error))
    return _Missing(
        "nvJitLink not found: pip install 'nvidia-nvjitlink>=13,<14' (a dependency of "
        "mneme-replay), or set MNEME_NVJITLINK to libnvJitLink.so.13"
    )


def load_nvjitlink() -> NvJitLink:
    """The library; JitToolchainError (one line saying what to install) where it is missing."""
    with _lock:
        found = _load()
    if isinstance(found, _Missing):
        raise JitToolchainError(found.reason)
    return found


def nvjitlink_available() -> bool:
    """Whether nvJitLink (``libnvJitLink.so.13``, the ``nvidia-nvjitlink`` wheel) loads,
    for PTX to cubin in process.

    Returns:
        True when it does (else the ``ptxas`` executable of a CUDA toolkit is used).
    """
    try:
        load_nvjitlink()
    except JitToolchainError:
        return False
    return True

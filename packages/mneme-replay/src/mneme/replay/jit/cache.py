"""Content-addressed compile cache: in-memory LRU in front of an on-disk folder."""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING

from mneme.runtime.user_dirs import user_cache_dir

from ..files import write_atomic

if TYPE_CHECKING:
    from .result import CompileResult

CACHE_ENV = "MNEME_COMPILE_CACHE"
FORMAT_VERSION = 1


def default_cache_dir() -> Path:
    """Where compiled code is cached on disk by default.

    Returns:
        ``$MNEME_COMPILE_CACHE``, else ``$XDG_CACHE_HOME/mneme/compile``, else
        ``~/.cache/mneme/compile``.
    """
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return user_cache_dir() / "compile"


def compile_key(ir: bytes, kernel: str, config_json: str, toolchain: str) -> str:
    """The cache key of a compile: what decides the code it makes.

    Parameters:
        ir: the input (bitcode, IR text or PTX).
        kernel: the kernel's name.
        config_json: the compile configuration's canonical JSON.
        toolchain: the versions of the tools that compile (LLVM, the assembler).

    Returns:
        A sha256 over them, in hex.
    """
    digest = hashlib.sha256()
    for part in (
        f"mneme-compile-{FORMAT_VERSION}".encode(),
        ir,
        kernel.encode(),
        config_json.encode(),
        toolchain.encode(),
    ):
        digest.update(len(part).to_bytes(8, "little"))
        digest.update(part)
    return digest.hexdigest()


class CompileCache:
    """Compiled code by compile key, in memory (least recently used first out) and
    optionally on disk; thread-safe.

    On disk an entry is ``<key[:2]>/<key>.bin`` (the cubin or code object) and
    ``<key[:2]>/<key>.json`` (everything else); both are written to a temporary
    file and renamed, the JSON last, so a reader never sees half an entry.

    Parameters:
        directory: the folder on disk; None keeps entries in memory only.
        memory_entries: how many entries memory keeps.
    """

    def __init__(self, directory: str | os.PathLike | None = None, memory_entries: int = 256):
        self.directory = Path(directory).expanduser() if directory is not None else None
        self.memory_entries = memory_entries
        self._memory: OrderedDict[str, CompileResult] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @classmethod
    def default(cls) -> CompileCache:
        """A cache on disk at :func:`default_cache_dir`.

        Returns:
            The cache.
        """
        return cls(default_cache_dir())

    def get(self, key: str) -> CompileResult | None:
        """Look a compile up (memory first, then disk; a torn or corrupted entry on disk
        is a miss).

        Parameters:
            key: its compile key.

        Returns:
            The compiled code, or None.
        """
        with self._lock:
            if key in self._memory:
                self._memory.move_to_end(key)
                self.hits += 1
                return self._memory[key]
        result = self._read(key) if self.directory is not None else None
        with self._lock:
            if result is None:
                self.misses += 1
                return None
            self.hits += 1
            self._remember(key, result)
        return result

    def put(self, key: str, result: CompileResult) -> None:
        """Keep a compile (in memory, and on disk when the cache has a folder).

        Parameters:
            key: its compile key.
            result: the compiled code.
        """
        with self._lock:
            self._remember(key, result)
        if self.directory is not None:
            self._write(key, result)

    def __len__(self) -> int:
        return len(self._memory)

    def _remember(self, key: str, result: CompileResult) -> None:
        self._memory[key] = result
        self._memory.move_to_end(key)
        while len(self._memory) > self.memory_entries:
            self._memory.popitem(last=False)

    def _paths(self, key: str) -> tuple[Path, Path]:
        folder = self.directory / key[:2]  # type: ignore[operator]
        return folder / f"{key}.json", folder / f"{key}.bin"

    def _read(self, key: str) -> CompileResult | None:
        from .result import CompileResult

        meta_path, binary_path = self._paths(key)
        try:
            meta = json.loads(meta_path.read_text())
            binary = binary_path.read_bytes()
        except (OSError, ValueError):
            return None
        if meta.get("binary_sha256") != hashlib.sha256(binary).hexdigest():
            return None  # a torn or corrupted entry is a miss; the next put rewrites it
        try:
            return CompileResult.from_cache_entry(meta, binary)
        except (KeyError, TypeError, ValueError):
            return None

    def _write(self, key: str, result: CompileResult) -> None:
        meta_path, binary_path = self._paths(key)
        meta_path.parent.mkdir(parents=True, exist_ok=True)
        meta = result.to_cache_entry()
        meta["binary_sha256"] = hashlib.sha256(result.binary).hexdigest()
        write_atomic(binary_path, result.binary, mode=None)
        write_atomic(meta_path, json.dumps(meta, sort_keys=True).encode(), mode=None)

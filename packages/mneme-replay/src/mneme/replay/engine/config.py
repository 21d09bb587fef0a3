"""ReplayConfig: how a compiled kernel is launched, timed and verified (plain data).

The compile side is ``mneme.replay.jit.CompileConfig``; ``ReplaySettings`` pairs the two
and is what ``--config FILE`` reads and what a result carries as its configuration.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ..jit import CompileConfig, JitConfigError
from ..jit.config import check_fields
from .errors import ReplayConfigError
from .timing import CACHE_MODES
from .verify import Tolerance

Dim3 = tuple[int, int, int]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dim3(value: Any, name: str) -> Dim3 | None:
    if value is None:
        return None
    if (
        not isinstance(value, tuple | list)
        or len(value) != 3
        or not all(_is_int(v) and 0 < v < 2**31 for v in value)
    ):
        raise ReplayConfigError(f"{name} must be three positive integers (x, y, z), not {value!r}")
    return tuple(int(v) for v in value)  # type: ignore[return-value]


@dataclass(frozen=True)
class ReplayConfig:
    """Launch overrides, iterations and verification of one replay (checked when made).

    Attributes:
        grid: the grid to launch; None keeps the recorded one.
        block: the block; None keeps the recorded one.
        shared_mem: dynamic shared memory in bytes; None keeps the recorded amount.
        iterations: timed iterations (their median is the result's ``time``).
        warmup: untimed iterations before them.
        verify: compare the memory after the first run with the recorded epilogue.
        flush_l2: the older spelling of ``cache="cold"``.
        cache: the cache state each timed iteration starts in: ``warm``, ``cold``,
            ``app`` or ``auto`` (engine/timing.py).
        specialize: fold the recorded scalar (non-pointer) arguments into the code.
        specialize_dims: fold the launch dimensions into the code.
        set_launch_bounds: set the kernel's max-threads bound to the block size.
        tolerances: region name -> Tolerance, over the recording's annotations.
        arch: the target (``sm_90``); None for the GPU present, else the recorded one.
        compile_only: compile and report static metrics; launch nothing.
        device: the GPU's ordinal.
        determinism_runs: runs of the unchanged kernel that decide, once per instance,
            which regions it reproduces and how each is verified
            (engine/determinism.py); 0 verifies every region bit for bit.
        energy_window_ms: > 0: before the timed iterations the kernel also runs back to
            back for about that long while NVML's energy counter is read, for an energy
            per launch (``ReplayResult.energy_mj``).

    Raises:
        ReplayConfigError: a field out of range or of the wrong type, an unknown cache
            mode, or an arch LLVM does not know.
    """

    grid: Dim3 | None = None
    block: Dim3 | None = None
    shared_mem: int | None = None
    iterations: int = 5
    warmup: int = 1
    verify: bool = True
    flush_l2: bool = False
    cache: str = "warm"
    specialize: bool = False
    specialize_dims: bool = False
    set_launch_bounds: bool = False
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    arch: str | None = None
    compile_only: bool = False
    device: int = 0
    determinism_runs: int = 3
    energy_window_ms: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "grid", _dim3(self.grid, "grid"))
        object.__setattr__(self, "block", _dim3(self.block, "block"))
        if self.shared_mem is not None and (not _is_int(self.shared_mem) or self.shared_mem < 0):
            raise ReplayConfigError(f"shared_mem must be >= 0 bytes, not {self.shared_mem!r}")
        if not _is_int(self.iterations) or self.iterations < 1:
            raise ReplayConfigError(f"iterations must be at least 1, not {self.iterations!r}")
        if not _is_int(self.warmup) or self.warmup < 0:
            raise ReplayConfigError(f"warmup must be 0 or more, not {self.warmup!r}")
        if not _is_int(self.determinism_runs) or not 0 <= self.determinism_runs <= 100:
            raise ReplayConfigError(
                f"determinism_runs must be 0 to 100, not {self.determinism_runs!r}"
            )
        if (isinstance(self.energy_window_ms, bool) or not isinstance(self.energy_window_ms, int | float)
                or not 0 <= self.energy_window_ms <= 60_000):
            raise ReplayConfigError(f"energy_window_ms must be 0 to 60000, not {self.energy_window_ms!r}")
        if not _is_int(self.device) or self.device < 0:
            raise ReplayConfigError(f"device must be a device ordinal, not {self.device!r}")
        for name in (
            "verify",
            "flush_l2",
            "specialize",
            "specialize_dims",
            "set_launch_bounds",
            "compile_only",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ReplayConfigError(f"{name} must be true or false")
        if self.cache not in CACHE_MODES:
            raise ReplayConfigError(
                f"cache must be one of {', '.join(CACHE_MODES)}, not {self.cache!r}"
            )
        if self.flush_l2 and self.cache not in ("warm", "cold"):
            raise ReplayConfigError(f"flush_l2 (cache cold) contradicts cache {self.cache!r}")
        if not isinstance(self.tolerances, dict):
            raise ReplayConfigError("tolerances must map region names to tolerances")
        tolerances = {}
        for region, value in self.tolerances.items():
            tolerances[str(region)] = (
                value if isinstance(value, Tolerance) else Tolerance.from_dict(value)
            )
        object.__setattr__(self, "tolerances", dict(sorted(tolerances.items())))
        if self.arch is not None:
            try:
                CompileConfig(arch=self.arch)
            except JitConfigError as error:
                raise ReplayConfigError(str(error)) from None

    @property
    def cache_mode(self) -> str:
        """The cache mode in effect (``flush_l2`` means cold)."""
        return "cold" if self.flush_l2 else self.cache

    def __hash__(self) -> int:
        return hash(self.to_json())

    def to_dict(self) -> dict[str, Any]:
        """The configuration as plain JSON data.

        Returns:
            Its fields (``energy_window_ms`` only when set).
        """
        out = asdict(self)
        out["tolerances"] = {k: v.to_dict() for k, v in self.tolerances.items()}
        for name in ("grid", "block"):
            if out[name] is not None:
                out[name] = list(out[name])
        if not out["energy_window_ms"]:  # (configurations without it read as before)
            del out["energy_window_ms"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplayConfig:
        """A configuration from plain data, as :meth:`to_dict` writes it.

        Parameters:
            data: the fields; absent ones keep their defaults.

        Returns:
            The configuration.

        Raises:
            ReplayConfigError: an unknown field or a bad value.
        """
        check_fields(cls, data, "replay configuration", ReplayConfigError)
        return cls(**data)

    def to_json(self) -> str:
        """The configuration as compact JSON (sorted keys: equal configurations, equal
        text).

        Returns:
            The JSON text.
        """
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ReplayConfig:
        """A configuration from the JSON :meth:`to_json` writes.

        Parameters:
            text: the JSON text.

        Returns:
            The configuration.

        Raises:
            ReplayConfigError: the text is not JSON, or not a valid configuration.
        """
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as error:
            raise ReplayConfigError(f"replay configuration is not valid JSON: {error}") from None

    def with_(self, **changes: Any) -> ReplayConfig:
        """A copy with some fields changed (checked as a new configuration).

        Parameters:
            **changes: field name -> new value.

        Returns:
            The new configuration.
        """
        return replace(self, **changes)


@dataclass(frozen=True)
class ReplaySettings:
    """A complete configuration: how to compile and how to replay (what ``--config``
    reads and ``best.json`` holds).

    Attributes:
        compile: the compile configuration.
        replay: the replay configuration.
    """

    compile: CompileConfig = field(default_factory=CompileConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain JSON data.

        Returns:
            ``{"compile": ..., "replay": ...}``.
        """
        return {"compile": self.compile.to_dict(), "replay": self.replay.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplaySettings:
        """Settings from plain data.

        Parameters:
            data: ``{"compile": ..., "replay": ...}`` (with an ``identity``, as tuning
                writes it, which is read by mneme.replay.identity), a whole result (its
                ``configuration``), or a bare CompileConfig object.

        Returns:
            The settings.

        Raises:
            ReplayConfigError: ``data`` is not an object, or not a valid configuration.
        """
        if not isinstance(data, dict):
            raise ReplayConfigError("a configuration must be a JSON object")
        if "configuration" in data and isinstance(data["configuration"], dict):
            data = data["configuration"]
        # A tuning report's best.json also names what it was tuned on (its "identity").
        data = {k: v for k, v in data.items() if k != "identity"}
        try:
            if set(data) <= {"compile", "replay"}:
                return cls(
                    CompileConfig.from_dict(data.get("compile", {})),
                    ReplayConfig.from_dict(data.get("replay", {})),
                )
            return cls(CompileConfig.from_dict(data), ReplayConfig())
        except JitConfigError as error:
            raise ReplayConfigError(str(error)) from None

    def to_json(self, indent: int | None = None) -> str:
        """The settings as JSON.

        Parameters:
            indent: indentation for people; None for one line.

        Returns:
            The JSON text.
        """
        return json.dumps(self.to_dict(), sort_keys=True, indent=indent)

    @classmethod
    def from_json(cls, text: str) -> ReplaySettings:
        """Settings from JSON (any form :meth:`from_dict` takes).

        Parameters:
            text: the JSON text.

        Returns:
            The settings.

        Raises:
            ReplayConfigError: the text is not JSON, or not a valid configuration.
        """
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ReplayConfigError(f"configuration is not valid JSON: {error}") from None
        return cls.from_dict(data)


def read_settings(path: Path) -> tuple[ReplaySettings, str | None]:
    """``--config FILE`` (bounded JSON, metadata.parse_json) and the ``arch`` its compile
    section names, if any: the replay checks that it is the target it compiles for."""
    from ..db.metadata import read_json_file  # (imported when a file is read)

    data = read_json_file(path, error=ReplayConfigError)
    settings = ReplaySettings.from_dict(data)
    if isinstance(data, dict) and isinstance(data.get("configuration"), dict):
        data = data["configuration"]
    compile_part = data.get("compile", data) if isinstance(data, dict) else {}
    arch = compile_part.get("arch") if isinstance(compile_part, dict) else None
    return settings, arch


def check_config_arch(path: Path, wanted: str | None, target: str) -> None:
    """An ``arch`` in ``--config`` is honoured or refused, never silently replaced."""
    if wanted is not None and wanted != target:
        raise ReplayConfigError(
            f"{path} compiles for {wanted}, but this replay targets {target}: set "
            f'"arch": "{wanted}" in its replay section to compile for {wanted} anyway'
        )

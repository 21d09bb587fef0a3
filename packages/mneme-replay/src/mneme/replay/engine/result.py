"""ReplayResult: what one replay (or compile-only analysis) measured, as plain data."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from .config import ReplaySettings
from .verify import Mismatch


@dataclass
class ReplayResult:
    """One observation: what a replay compiled, measured and verified. The metrics have
    one name, unit and meaning here, in tuning objectives and in reports (docs/replay.md,
    "Metrics"); ``time`` is the median of ``times``.

    Attributes:
        kernel: the kernel's demangled name.
        instance: the instance's id (KERNEL/INSTANCE).
        configuration: the settings actually used (the compile configuration the engine
            derived).
        times: every timed iteration, in milliseconds (empty when compile-only).
        verified: True or False; None when verification did not run.
        mismatches: the regions that did not verify.
        registers: registers per thread.
        spills: spill-store plus spill-load bytes.
        binary_size: bytes of the compiled binary (cubin or code object).
        compile_time: seconds spent compiling for this observation (0 when the compile came
            from the cache).
        compile_cached: whether the compile came from the cache.
        compile_only: whether nothing was launched.
        metrics: static metrics from ptxas (registers, spills, stack, shared/local/const
            bytes, size)
        launch: the launch actually used: grid, block, shared_mem
        arch: the target compiled for (sm_90).
        device: the GPU replayed on (its name); empty when compile-only.
        timings: seconds for restore (first replay of the session only), determinism (the
            first verified replay of the session: the profile measured, or read from the
            database's cache), run, verify
        restore_path: where the replay that restored decompressed the recorded memory:
            "nvcomp" (on the GPU) or "host"; "" when this replay did not restore (restored
            earlier in the session)
        notes: what the engine says about this replay (one line each).
        determinism: region → class, for the regions the unchanged kernel does not reproduce
            bit for bit (engine/determinism.py); verification checked each by its class
        timing_method: how ``times`` were measured: "cupti" (the kernel's GPU timestamps) or
            "events"
        timing_note: why events were used where CUPTI was wanted ("" otherwise)
        cache: the cache state the timed iterations started in (warm, cold, app)
        mode_times: auto: the median of each cache mode it measured (ms)
        sm_clock_mhz: mean SM clock during the timed iterations (MHz, NVML); None without
            NVML
        energy_mj: energy per iteration (mJ, NVML's counter; coarse for short runs); None
            without it
        app_time_ms: the instance's in-application median (ms, recorded), None when it has
            none
        clock_control: the command's clock control (mneme.runtime.clock_control): its
            policy, the SM clock it locked each GPU at, and why a GPU ran unlocked; None from
            the library alone
    """

    kernel: str
    instance: str
    configuration: ReplaySettings
    times: list[float] = field(default_factory=list)
    verified: bool | None = None
    mismatches: list[Mismatch] = field(default_factory=list)
    registers: int = 0
    spills: int = 0
    binary_size: int = 0
    compile_time: float = 0.0
    compile_cached: bool = False
    compile_only: bool = False
    metrics: dict[str, int] = field(default_factory=dict)
    launch: dict[str, Any] = field(default_factory=dict)
    arch: str = ""
    device: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    restore_path: str = ""
    notes: list[str] = field(default_factory=list)
    determinism: dict[str, str] = field(default_factory=dict)
    timing_method: str = ""
    timing_note: str = ""
    cache: str = ""
    mode_times: dict[str, float] = field(default_factory=dict)
    sm_clock_mhz: float | None = None
    energy_mj: float | None = None
    app_time_ms: float | None = None
    clock_control: dict[str, Any] | None = None

    @property
    def time(self) -> float | None:
        """Median of the timed iterations (ms): what the ``time`` objective minimizes."""
        return statistics.median(self.times) if self.times else None

    @property
    def mean_time(self) -> float | None:
        """Mean of the timed iterations (ms); None without them."""
        return statistics.fmean(self.times) if self.times else None

    @property
    def min_time(self) -> float | None:
        """Fastest timed iteration (ms); None without them."""
        return min(self.times) if self.times else None

    @property
    def fidelity(self) -> float | None:
        """Replayed / in-application time (median over median); None without both."""
        if self.time is None or not self.app_time_ms:
            return None
        return self.time / self.app_time_ms

    def timing_line(self) -> str:
        """How the replay was timed, in one line.

        Returns:
            ``cupti, cache warm, fidelity 1.02 (in-app 0.0507 ms), SM 1980 MHz``.
        """
        method = self.timing_note or self.timing_method or "events"
        parts = [method]
        if self.cache:
            parts.append(f"cache {self.cache}")
        fidelity = self.fidelity
        parts.append(f"fidelity {fidelity:.2f} (in-app {self.app_time_ms:.4f} ms)"
                     if fidelity is not None else "fidelity -")
        if self.sm_clock_mhz:
            locked = (self.clock_control or {}).get("locked_sm_mhz") or {}
            parts.append(f"SM {self.sm_clock_mhz:.0f} MHz" + (" (locked)" if locked else ""))
        return ", ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """The result as plain JSON data (what ``mneme replay --json`` prints).

        Returns:
            Its fields, with ``fidelity``.
        """
        out = asdict(self)
        out["fidelity"] = self.fidelity
        out["configuration"] = self.configuration.to_dict()
        out["mismatches"] = [m.to_dict() for m in self.mismatches]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReplayResult:
        """A result from the data :meth:`to_dict` writes.

        Parameters:
            data: the fields.

        Returns:
            The result.
        """
        values = dict(data)
        values.pop("fidelity", None)  # derived
        values["configuration"] = ReplaySettings.from_dict(values["configuration"])
        values["mismatches"] = [Mismatch.from_dict(m) for m in values.get("mismatches", [])]
        return cls(**values)

    def to_json(self, indent: int | None = None) -> str:
        """The result as JSON.

        Parameters:
            indent: indentation for people; None for one line.

        Returns:
            The JSON text.
        """
        return json.dumps(self.to_dict(), sort_keys=True, indent=indent)

    @classmethod
    def from_json(cls, text: str) -> ReplayResult:
        """A result from the JSON :meth:`to_json` writes.

        Parameters:
            text: the JSON text.

        Returns:
            The result.
        """
        return cls.from_dict(json.loads(text))

    def summary(self) -> str:
        """The result for people.

        Returns:
            Several lines: what ``mneme replay`` prints.
        """
        c = self.configuration.compile
        lines = [f"kernel     {self.kernel}", f"instance   {self.instance}"]
        lines.append(
            f"pipeline   {c.pipeline}  (arch {self.arch}, codegen -O{c.codegen_opt_level})"
        )
        if self.launch:
            cluster = self.launch.get("cluster")
            lines.append(
                "launch     grid {} block {} shared {} B{}{}".format(
                    "x".join(map(str, self.launch["grid"])),
                    "x".join(map(str, self.launch["block"])),
                    self.launch["shared_mem"],
                    f" clusters {'x'.join(map(str, cluster))}" if cluster else "",
                    " cooperative" if self.launch.get("cooperative") else "",
                )
            )
        cached = " (cached)" if self.compile_cached else ""
        lines.append(
            f"compile    {self.compile_time * 1e3:.1f} ms{cached}; {self.registers} registers, "
            f"{self.spills} spill bytes, {self.binary_size} B binary"
        )
        if self.compile_only:
            lines.append("mode       compile-only (no launch)")
        if self.times:
            lines.append(
                f"time       median {self.time:.4f} ms, mean {self.mean_time:.4f} ms, "
                f"min {self.min_time:.4f} ms over {len(self.times)} iterations"
            )
            ordered = sorted(self.times)
            quartiles = (statistics.quantiles(ordered, n=4, method="inclusive")
                         if len(ordered) > 1 else [ordered[0]] * 3)
            lines.append(f"spread     IQR {quartiles[0]:.4f}-{quartiles[2]:.4f} ms, "
                         f"max {ordered[-1]:.4f} ms")
            lines.append(f"timing     {self.timing_line()}")
            if self.mode_times:
                lines.append("cache auto " + ", ".join(
                    f"{m} {t:.4f} ms" for m, t in self.mode_times.items()))
        if self.determinism:
            counts: dict[str, int] = {}
            for kind in self.determinism.values():
                counts[kind] = counts.get(kind, 0) + 1
            lines.append(
                "reproduces "
                + ", ".join(f"{n} region(s) {k}" for k, n in sorted(counts.items()))
                + "; the others exact"
            )
        if self.verified is None:
            lines.append("verified   not checked")
        elif self.verified:
            lines.append("verified   yes")
        else:
            lines.append(f"verified   NO: {len(self.mismatches)} region(s) differ")
            lines.extend(f"  {m.describe()}" for m in self.mismatches)
        lines.extend(f"note       {n}" for n in self.notes)
        return "\n".join(lines)

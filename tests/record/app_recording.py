"""Record a whole application as a user would and check the database it leaves: the GPU
tests of Python frameworks, vendor libraries and nvcc static-runtime builds share this.

record_application() runs the command plainly, then under `mneme record`, then `mneme ls`,
`mneme check`, a replay of every instance through the Python API and of one instance per
kernel origin through `mneme replay`; it returns an AppRecording whose report() says what
each test prints (kernels, instances, verified, origins, failures and why) and whose fields
the tests assert on.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mneme.replay.db import Database
from mneme.replay.engine import ReplayConfig, ReplaySession
from mneme.replay.jit import CompileConfig

CHECKSUM = re.compile(r"^CHECKSUM (\S+) (\S+)$", re.M)
TIME = re.compile(r"^TIME (\S+) (\S+) s$", re.M)
#: recorder lines worth showing in a report (what was not recorded, and why)
RECORDER_NOTE = re.compile(r"^mneme[ :].*$", re.M)
#: names of GEMM kernels of cuBLAS/cuBLASLt/CUTLASS and XLA's GEMM fusions, case-insensitive
GEMM_NAME = re.compile(r"gemm|nvjet|xmma|cutlass|cublas", re.I)


def mneme_cli(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mneme.cli", *args], capture_output=True,
                          text=True, timeout=timeout)


def checksums(stdout: str) -> list[tuple[str, str]]:
    """(name, value) of the CHECKSUM lines the corpus scripts and library programs print."""
    return CHECKSUM.findall(stdout)


def corpus_results(stdout: str) -> list[tuple[str, str]]:
    """(name, value) of what a C++ corpus program computed, in a form that does not depend
    on scheduling or addresses: its corpus-output lines and its MNEME-RESULT line."""
    results = []
    for line in stdout.splitlines():
        if line.startswith("corpus-output "):
            _, name, value = (line.split(" ", 2) + [""])[:3]
            results.append((name, value))
        elif line.startswith("MNEME-RESULT"):
            results.append(("MNEME-RESULT", line.partition(" ")[2]))
    return results


Results = Callable[[str], list[tuple[str, str]]]


def result_differences(plain: str, recorded: str, rel_tol: float, results: Results = checksums) -> list[str]:
    """How the recorded run's results differ from the plain run's: the same names in the
    same order, integers and words equal, floats within ``rel_tol``."""
    want, got = results(plain), results(recorded)
    if [n for n, _ in want] != [n for n, _ in got]:
        return [f"names differ: plain {[n for n, _ in want]}, recorded {[n for n, _ in got]}"]
    differences = []
    for (name, a), (_, b) in zip(want, got, strict=True):
        if a == b:
            continue
        integers = a.lstrip("-").isdigit() and b.lstrip("-").isdigit()  # compared exactly
        try:
            close = not integers and math.isclose(float(a), float(b), rel_tol=rel_tol, abs_tol=1e-9)
        except ValueError:
            close = False
        if not close:
            differences.append(f"{name}: plain {a}, recorded {b}")
    return differences


def kernel_origin(kernel) -> str:
    """Where the recorder found the kernel's code (the shared object or the loader), when
    the database says; '?' for databases written before kernels had an origin."""
    origin = getattr(kernel, "origin", None)
    if origin is None:  # the metadata key, before the reader grows a property for it
        attrs = getattr(kernel, "_attrs", None)
        origin = attrs.get("origin") if isinstance(attrs, dict) else None
    return str(origin) if origin else "?"


def kernel_code(kernel) -> str:
    """What a replay under code="auto" compiles: the IR, the PTX, or the cubin as it is."""
    if kernel.has_ir:
        return "ir"
    return "ptx" if "ptx" in kernel.code_kinds else "cubin"


@dataclass
class InstanceOutcome:
    instance_id: str
    kernel: str
    origin: str
    code: str
    verified: bool
    reason: str = ""


@dataclass
class AppRecording:
    name: str
    db: Path
    plain: subprocess.CompletedProcess
    recorded: subprocess.CompletedProcess
    plain_seconds: float
    record_seconds: float
    results: Results = checksums
    result_differences: list[str] = field(default_factory=list)
    ls: subprocess.CompletedProcess | None = None
    check: subprocess.CompletedProcess | None = None
    kernels: list[str] = field(default_factory=list)  # demangled names of kernels with instances
    outcomes: list[InstanceOutcome] = field(default_factory=list)
    cli_replays: dict[str, subprocess.CompletedProcess] = field(default_factory=dict)
    replay_seconds: float = 0.0

    @property
    def failures(self) -> list[InstanceOutcome]:
        return [o for o in self.outcomes if not o.verified]

    @property
    def recorder_notes(self) -> list[str]:
        return RECORDER_NOTE.findall(self.recorded.stderr)

    def kernels_matching(self, pattern: str | re.Pattern) -> list[str]:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        return sorted(k for k in self.kernels if regex.search(k))

    def cli_failures(self) -> list[str]:
        bad = []
        for instance, proc in self.cli_replays.items():
            try:
                verified = json.loads(proc.stdout).get("verified")
            except json.JSONDecodeError:
                verified = None
            if proc.returncode != 0 or verified is not True:
                bad.append(f"mneme replay -rid {instance}: exit {proc.returncode}, verified "
                           f"{verified}: {proc.stderr.strip()[-300:]}")
        return bad

    def report(self) -> str:
        verified = len(self.outcomes) - len(self.failures)
        ratio = self.record_seconds / self.plain_seconds if self.plain_seconds else float("nan")
        lines = [
            f"== {self.name}: plain {self.plain_seconds:.1f} s (exit {self.plain.returncode}), "
            f"record {self.record_seconds:.1f} s (exit {self.recorded.returncode}, x{ratio:.1f}), "
            f"replay {self.replay_seconds:.1f} s",
            f"   {len(self.kernels)} kernels recorded, {len(self.outcomes)} instances, "
            f"{verified} verified; ls exit {self.ls.returncode if self.ls else '-'}, "
            f"check exit {self.check.returncode if self.check else '-'}",
        ]
        origins = Counter((o.origin, o.code) for o in self.outcomes)
        for (origin, code), count in sorted(origins.items()):
            lines.append(f"   origin {origin} [{code}]: {count} instances")
        timings = dict(TIME.findall(self.plain.stdout))
        for step, seconds in TIME.findall(self.recorded.stdout):
            lines.append(f"   TIME {step}: plain {timings.get(step, '?')} s, recorded {seconds} s")
        lines += [f"   result differs: {d}" for d in self.result_differences]
        lines += [f"   recorder: {note}" for note in self.recorder_notes[:20]]
        for o in self.failures[:40]:
            lines.append(f"   FAILED {o.kernel[:100]} {o.instance_id} [{o.origin}, {o.code}]: {o.reason}")
        lines += [f"   {bad}" for bad in self.cli_failures()]
        if self.ls is not None and self.ls.returncode != 0:
            lines.append(f"   mneme ls: {self.ls.stderr.strip()[-500:]}")
        if self.check is not None and self.check.returncode != 0:
            lines.append(f"   mneme check: {(self.check.stdout + self.check.stderr).strip()[-500:]}")
        if self.recorded.returncode != 0:
            lines.append(f"   record stderr: {self.recorded.stderr.strip()[-1500:]}")
        origin = {o.kernel: f"{o.origin}, {o.code}" for o in self.outcomes}
        lines += [f"   kernel {k[:140]} [{origin.get(k, '-')}]" for k in self.kernels[:200]]
        return "\n".join(lines)


def run_process_tree(argv: list[str], env: dict[str, str], timeout: int) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``argv`` in a session of its own, so that at the time limit the whole tree (the
    recorder's application, a framework's workers) ends and the test reports instead."""
    start = time.perf_counter()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                          start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            stderr += f"\n[test] killed after {timeout} s"
    return (subprocess.CompletedProcess(argv, proc.returncode, stdout, stderr),
            time.perf_counter() - start)


def _replay_in_this_process(db_path: Path, ids: list[str]) -> None:
    """The worker: replays ``ids`` in order, one JSON line each; stops after a failure that
    leaves the CUDA context unusable (the parent goes on in a fresh process)."""
    from mneme.runtime import DriverError

    database = Database.open(db_path)
    for instance_id in ids:
        verified, reason, poisoned = False, "", False
        try:
            with ReplaySession(database.instance(instance_id)) as session:
                result = session.run(CompileConfig(), ReplayConfig(iterations=1))
            verified = result.verified is True
            if not verified:
                reason = "; ".join(m.describe() for m in result.mismatches[:2]) or \
                    f"verified={result.verified}"
        except Exception as exc:  # reported per instance: one broken replay hides nothing
            reason = f"{type(exc).__name__}: {str(exc)[:300]}"
            poisoned = isinstance(exc, DriverError) or "device" in type(exc).__name__.lower() \
                or "failed on the device" in str(exc)
        print(json.dumps({"id": instance_id, "verified": verified, "reason": reason}), flush=True)
        if poisoned:
            return


def replay_every_instance(db_path: Path, timeout: int = 600) -> list[InstanceOutcome]:
    """Replay each instance once (its code as `mneme replay` picks it) and verify it by its
    determinism class, in a worker process that is replaced after an instance that faults
    on the GPU: a sticky CUDA error ends the process's context, and must cost that instance
    only, not every instance replayed after it."""
    instances = {inst.id: inst for inst in Database.open(db_path).instances()}
    results: dict[str, tuple[bool, str]] = {}
    pending = list(instances)
    while pending:
        proc = subprocess.run([sys.executable, __file__, "--replay", str(db_path), *pending],
                              capture_output=True, text=True, timeout=timeout)
        for line in proc.stdout.splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and row.get("id") in instances:
                results[row["id"]] = (bool(row["verified"]), str(row["reason"]))
        if pending[0] not in results:  # the worker died on it without a word
            results[pending[0]] = (False, f"replay worker died (exit {proc.returncode}): "
                                          f"{proc.stderr.strip()[-300:]}")
        pending = [i for i in pending if i not in results]
    outcomes = []
    for instance_id, inst in instances.items():
        kernel = inst.kernel
        verified, reason = results[instance_id]
        outcomes.append(InstanceOutcome(instance_id, kernel.demangled_name, kernel_origin(kernel),
                                        kernel_code(kernel), verified, reason))
    return outcomes


def record_application(name: str, argv: list[str], db: Path, *, options: tuple[str, ...] = (),
                       env: dict[str, str] | None = None, rel_tol: float = 1e-4,
                       results: Results = checksums, timeout: int = 420) -> AppRecording:
    """Run ``argv`` plainly and under `mneme record -rdb db --stats options -- argv`, then list,
    check and replay what was recorded. Nothing here asserts: the test does, after printing
    report()."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    plain, plain_seconds = run_process_tree(argv, full_env, timeout)
    recorded, record_seconds = run_process_tree(
        [sys.executable, "-m", "mneme.cli", "record", "-rdb", str(db), "--stats", *options, "--", *argv],
        full_env, timeout)
    app = AppRecording(name, db, plain, recorded, plain_seconds, record_seconds, results)
    app.result_differences = result_differences(plain.stdout, recorded.stdout, rel_tol, results)
    if not db.is_dir():
        return app
    app.ls = mneme_cli("ls", str(db))
    app.check = mneme_cli("check", str(db))
    try:
        database = Database.open(db)
        app.kernels = sorted({i.kernel.demangled_name for i in database.instances()})
    except Exception as exc:  # the test's ls/check assertions say more
        app.kernels = [f"<database unreadable: {exc}>"]
        return app
    start = time.perf_counter()
    app.outcomes = replay_every_instance(db)
    first_per_origin = {}
    for outcome in app.outcomes:
        first_per_origin.setdefault(outcome.origin, outcome.instance_id)
    for instance in first_per_origin.values():
        app.cli_replays[instance] = mneme_cli("replay", "-rdb", str(db), "-rid", instance,
                                              "--iterations", "1", "--json")
    app.replay_seconds = time.perf_counter() - start
    return app


def assert_recorded_and_verified(app: AppRecording, *, allow_unrecorded: bool = False) -> None:
    """The issue's goals for one application: it computes the same under record, the
    database is one every reader accepts (ids printed whole), and every instance replays
    verified."""
    assert app.plain.returncode == 0, app.plain.stderr[-2000:]
    assert app.recorded.returncode == 0, app.recorded.stderr[-2000:]
    assert app.results(app.plain.stdout), "the application printed no result line"
    assert app.result_differences == []
    assert app.ls is not None and app.ls.returncode == 0, app.ls and app.ls.stderr
    assert app.check is not None and app.check.returncode == 0, app.check and app.check.stdout
    assert "broken:" not in app.check.stdout
    assert app.outcomes, f"nothing recorded: {app.recorder_notes}"
    # ids are never cut, even piped: each can be pasted into replay/tune
    missing = [o.instance_id for o in app.outcomes if o.instance_id not in app.ls.stdout]
    assert missing == [], f"mneme ls cut {len(missing)} instance ids"
    assert [f"{o.kernel[:80]}: {o.reason}" for o in app.failures] == []
    assert app.cli_failures() == []
    if not allow_unrecorded:
        assert [n for n in app.recorder_notes if "unrecorded" in n] == []


if __name__ == "__main__" and sys.argv[1:2] == ["--replay"]:
    _replay_in_this_process(Path(sys.argv[2]), sys.argv[3:])

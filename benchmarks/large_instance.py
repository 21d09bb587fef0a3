"""Large instances at hardware speed: replaying one multi-GB nondeterministic instance (GPU).

    python benchmarks/large_instance.py [--mib 8192] [--prebuilt DIR] [--db DB]
                                        [--later 3] [--timeout 900] [--json out.json]
                                        [--host-restore]

tests/corpus/cuda/atomic_pool (a hash table in one cudaMalloc arena of --mib MiB, filled
by a kernel that claims node slots and links chains with atomics, so its output differs in
order on every run) is recorded once, its insert kernel only (``mneme record --kernel
insert_keys``). That instance (the whole pool, prologue and epilogue) is then replayed as a
user replays it, one ``mneme replay -rid ID --json`` process per replay:

1. the first replay, with the instance's determinism profile absent (the database's
   ``.mneme/determinism`` cache deleted): its wall time and the engine's own split
   (``ReplayResult.timings``: restore, determinism profile, run, verification);
2. ``--later`` replays, each a fresh process with the profile cached;
3. ``--later`` replays in one session of this process (what tuning does: memory restored
   once, reset before each launch), after that session's first;

Each replay says where its restore decompressed the stored chunks ("nvcomp": on the GPU,
nvCOMP's batched zstd; "host": the chunk pool's threads); the report prints the restore
rate per path. ``--host-restore`` adds ``--later`` fresh-process replays with
``MNEME_RESTORE=host`` (the host path) to compare both on the same recording.

The restore and verification rates (instance bytes / phase seconds) are set against
the device's own copy bandwidths measured in the same run with the helpers of
replay_throughput.py (device-to-device, and the session's reset) and record_overhead.py
(pinned device-to-host, the host link a restore crosses).

Goals (issue 22, on the H100, 8 GiB): the first replay, determinism profile included,
<= 15 s; each later replay <= 1 s; verification >= 100 GB/s (the slowest of all replays).

Executables come from DIR/atomic_pool/atomic_pool (--prebuilt, or MNEME_RECORD_PREBUILT)
or are built with mneme-clang++. ``--db DB`` keeps the recording there and reuses it on the
next run (recording 8 GiB takes a while). Replays time one launch each (``--iterations``,
no warm-up): the replay, not the kernel, is measured. Every failure is one line: no GPU
(exit 2), a build, recording or replay that failed (exit 1, with the end of its stderr).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
PROGRAM = "atomic_pool"
KERNEL = "insert_keys"
GOAL_FIRST_S, GOAL_LATER_S, GOAL_VERIFY_GBPS = 15.0, 1.0, 100.0
PHASES = ("restore", "determinism", "run", "verify")


class BenchmarkError(Exception):
    """A step that failed; its message is the one line the benchmark prints."""


def tail(text: str, lines: int = 3) -> str:
    """The last ``lines`` non-empty lines of ``text``, joined on one line."""
    kept = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return " | ".join(kept[-lines:]) or "(no output)"


def progress(message: str) -> None:
    print(f"[large_instance] {message}", file=sys.stderr, flush=True)


def executable(prebuilt: Path | None, out: Path) -> Path:
    if prebuilt is not None:
        exe = prebuilt / PROGRAM / PROGRAM
        if not exe.is_file():
            raise BenchmarkError(f"no prebuilt executable {exe} (--prebuilt / MNEME_RECORD_PREBUILT)")
        return exe
    spec = importlib.util.spec_from_file_location("corpus_build", CORPUS / "build.py")
    build = importlib.util.module_from_spec(spec)
    sys.modules["corpus_build"] = build
    spec.loader.exec_module(build)
    try:
        return build.build_program(CORPUS / "cuda" / PROGRAM, out / PROGRAM, compiler="mneme-clang++").executable
    except (build.CorpusError, OSError) as error:
        raise BenchmarkError(f"building {PROGRAM} with mneme-clang++ failed: {tail(str(error))} "
                             "(or pass --prebuilt DIR)") from None


def find_instance(db: Path):
    """The insert kernel's instance in ``db``, or None when the database has none."""
    from mneme.replay.db import Database, DatabaseError

    try:
        database = Database.open(db)
    except DatabaseError:
        return None
    for kernel in database.kernels():
        if (kernel.demangled_name or kernel.name).startswith(KERNEL):
            instances = list(kernel.instances())
            return instances[0] if instances else None
    return None


def record(exe: Path, mib: int, db: Path, timeout: float) -> float:
    """Records the insert kernel of ``exe mib --quiet`` into ``db`` (which must not
    exist); the wall seconds."""
    command = [sys.executable, "-m", "mneme.cli", "record", "-rdb", str(db), "-mr", "1",
               "--kernel", KERNEL, "--", str(exe), str(mib), "--quiet"]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise BenchmarkError(f"recording {PROGRAM} {mib} did not finish in {timeout:.0f} s") from None
    if done.returncode != 0:
        raise BenchmarkError(f"recording {PROGRAM} {mib} failed (exit {done.returncode}): {tail(done.stderr)}")
    return time.perf_counter() - start


def replay_process(db: Path, rid: str, iterations: int, timeout: float, what: str = "mneme replay",
                   host_restore: bool = False) -> dict:
    """One ``mneme replay --json`` process: its wall seconds and its result
    (``host_restore``: with MNEME_RESTORE=host, the host's decompression)."""
    command = [sys.executable, "-m", "mneme.cli", "replay", "-rdb", str(db), "-rid", rid, "--json",
               "--iterations", str(iterations), "--warmup", "0"]
    env = {**os.environ, "MNEME_RESTORE": "host"} if host_restore else None
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise BenchmarkError(f"{what} did not finish in {timeout:.0f} s (--timeout)") from None
    wall = time.perf_counter() - start
    try:
        result = json.loads(done.stdout)
    except ValueError:
        raise BenchmarkError(f"{what} failed (exit {done.returncode}): {tail(done.stderr)}") from None
    return observation(wall, result)


def observation(wall: float, result: dict) -> dict:
    """What the tables need of one replay: wall seconds, the engine's phases (missing
    ones None: an engine that does not time them apart), verified, the regions' classes."""
    timings = result.get("timings") or {}
    return {"wall_s": wall, "phases": {p: timings.get(p) for p in PHASES},
            "verified": result.get("verified"), "determinism": result.get("determinism") or {},
            "device": result.get("device") or "", "restore_path": result.get("restore_path") or "",
            "notes": [n for n in result.get("notes") or [] if n.startswith("restore on the host")]}


def restore_rates(nbytes: int, replays: list[dict]) -> dict[str, float]:
    """Restore GB/s per path ("nvcomp", "host"): the median over the replays that
    restored on it."""
    by_path: dict[str, list[float]] = {}
    for o in replays:
        if o["phases"]["restore"] and o.get("restore_path"):
            by_path.setdefault(o["restore_path"], []).append(o["phases"]["restore"])
    return {path: rate(nbytes, statistics.median(times)) for path, times in by_path.items()}


def session_replays(instance, count: int, iterations: int) -> tuple[list[dict], dict]:
    """The session's first replay and ``count`` later ones, then the device bandwidths
    (replay_throughput.bandwidths: the session's reset against a plain D2D copy)."""
    from mneme.replay.engine import ReplayConfig, ReplaySession
    from replay_throughput import bandwidths

    replay = ReplayConfig(iterations=iterations, warmup=0)
    out = []
    with ReplaySession(instance) as session:
        for _ in range(count + 1):
            start = time.perf_counter()
            result = session.run(None, replay)
            out.append(observation(time.perf_counter() - start, result.to_dict()))
        bandwidth = bandwidths(session, repeats=5)
    return out, bandwidth


def rate(nbytes: int, seconds: float | None) -> float | None:
    return nbytes / seconds / 1e9 if seconds else None


def summarize(nbytes: int, first: dict, later: list[dict], session: list[dict], copy: dict,
              host_later: list[dict] = ()) -> dict:
    """Rates, ratios and a verdict per goal (True, False, or None: not measured)."""
    verifies = [o["phases"]["verify"] for o in [first, *later, *session] if o["phases"]["verify"]]
    slowest_verify = rate(nbytes, max(verifies)) if verifies else None
    restores = [o["phases"]["restore"] for o in [first, *later, *session] if o["phases"]["restore"]]
    d2d, d2h = copy.get("d2d_GBps"), copy.get("d2h_GBps")
    out = {
        "bytes": nbytes,
        "first_s": first["wall_s"],
        "later_process_s": [o["wall_s"] for o in later],
        "later_session_s": [o["wall_s"] for o in session[1:]],
        "restore_GBps": rate(nbytes, statistics.median(restores)) if restores else None,
        "verify_GBps_first": rate(nbytes, first["phases"]["verify"]),
        "verify_GBps_slowest": slowest_verify,
        "d2d_GBps": d2d,
        "d2h_GBps": d2h,
    }
    out["restore_vs_d2h"] = out["restore_GBps"] / d2h if out["restore_GBps"] and d2h else None
    out["restore_GBps_by_path"] = restore_rates(nbytes, [first, *later, *session, *host_later])
    out["host_restore_s"] = [o["wall_s"] for o in host_later]
    out["verify_vs_d2d"] = slowest_verify / d2d if slowest_verify and d2d else None
    out["goals"] = {
        "first replay <= 15 s": first["wall_s"] <= GOAL_FIRST_S,
        "each later replay (fresh process) <= 1 s":
            all(t <= GOAL_LATER_S for t in out["later_process_s"]) if later else None,
        "each later replay (same session) <= 1 s":
            all(t <= GOAL_LATER_S for t in out["later_session_s"]) if session[1:] else None,
        "verification >= 100 GB/s": None if slowest_verify is None else slowest_verify >= GOAL_VERIFY_GBPS,
    }
    return out


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} GB/s"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "NOT met")


def print_report(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    s, first = doc["summary"], doc["first"]
    title = (f"{PROGRAM} {doc['mib']} MiB: instance {doc['instance']} of {doc['kernel']}, "
             f"{s['bytes'] / 1e9:.2f} GB recorded, on {doc['device']}")
    replays = Table(title=title)
    for column in ("replay", "wall", *PHASES, "verified"):
        replays.add_column(column, justify="left" if column == "replay" else "right")

    def row(name: str, o: dict) -> None:
        replays.add_row(name, _s(o["wall_s"]), *(_s(o["phases"][p]) for p in PHASES), str(o["verified"]))

    row("first (mneme replay, profile absent)", first)
    for i, o in enumerate(doc["later_process"], 1):
        row(f"later {i} (mneme replay, profile cached)", o)
    for i, o in enumerate(doc["session"]):
        row("session first (profile cached)" if i == 0 else f"session later {i}", o)
    console.print(replays)
    if doc["record_s"] is not None:
        console.print(f"recorded in {doc['record_s']:.1f} s (mneme record, insert kernel only)")
    if first["determinism"]:
        console.print("determinism profile: " + ", ".join(f"{k} {v}" for k, v in first["determinism"].items()))

    rates = Table(title="rates against the device's measured copy bandwidth")
    for column in ("", "GB/s", "device", "ratio"):
        rates.add_column(column, justify="left" if not column else "right")
    rates.add_row("restore (median over the replays that restored)", _gbps(s["restore_GBps"]),
                  f"pinned D2H {_gbps(s['d2h_GBps'])}", _ratio(s["restore_vs_d2h"]))
    rates.add_row("verification, first replay", _gbps(s["verify_GBps_first"]), "", "")
    rates.add_row("verification, slowest replay", _gbps(s["verify_GBps_slowest"]),
                  f"D2D {_gbps(s['d2d_GBps'])}", _ratio(s["verify_vs_d2d"]))
    if doc["copy"].get("reset_GBps"):
        rates.add_row("session reset (pristine copy -> recorded addresses)", _gbps(doc["copy"]["reset_GBps"]),
                      f"D2D {_gbps(s['d2d_GBps'])}", _ratio(doc["copy"].get("ratio")))
    for path, value in s.get("restore_GBps_by_path", {}).items():
        label = "nvCOMP device" if path == "nvcomp" else path
        rates.add_row(f"restore on the {label} path (median)", _gbps(value), f"pinned D2H {_gbps(s['d2h_GBps'])}",
                      _ratio(value / s["d2h_GBps"] if value and s["d2h_GBps"] else None))
    console.print(rates)
    paths = sorted({o.get("restore_path") for o in [first, *doc["later_process"], *doc["session"]]
                    if o.get("restore_path")})
    print("restore path: " + (", ".join("nvCOMP device" if p == "nvcomp" else p for p in paths) or "-")
          + "".join(f"; {n}" for n in dict.fromkeys(n for o in [first, *doc["later_process"]]
                                                     for n in o.get("notes", []))))
    for path, value in s.get("restore_GBps_by_path", {}).items():
        print(f"restore {path}: {_gbps(value)}")
    if doc.get("host_later"):
        print("later replays with MNEME_RESTORE=host: " + ", ".join(_s(o["wall_s"]) for o in doc["host_later"]))
    goals = Table(title="goals (issue 22, H100, 8 GiB)")
    goals.add_column("goal")
    goals.add_column("measured", justify="right")
    goals.add_column("verdict")
    later_p, later_s = s["later_process_s"], s["later_session_s"]
    measured = [_s(s["first_s"]), _s(max(later_p)) + " (max)" if later_p else "-",
                _s(max(later_s)) + " (max)" if later_s else "-", _gbps(s["verify_GBps_slowest"]) + " (slowest)"]
    for (goal, ok), value in zip(s["goals"].items(), measured, strict=True):
        goals.add_row(goal, value, _verdict(ok))
    console.print(goals)
    for goal, ok in s["goals"].items():
        print(f"goal {goal}: {_verdict(ok)}")


def run(args) -> dict:
    from mneme.replay.engine import determinism as nd

    sys.path.insert(0, str(Path(__file__).parent))
    from record_overhead import raw_pinned_d2h

    with tempfile.TemporaryDirectory(prefix="mneme-large-") as tmp:
        work = Path(tmp)
        db = args.db or work / "pool.rdb"
        instance = find_instance(db) if db.exists() else None
        recorded_s = None
        if instance is None and db.exists():
            raise BenchmarkError(f"--db {db} exists and holds no {KERNEL} instance; remove it or name "
                                 "another path")
        if instance is None:
            exe = executable(args.prebuilt, work / "build")
            progress(f"recording {exe.name} {args.mib} (insert kernel only) into {db}")
            recorded_s = record(exe, args.mib, db, args.timeout)
            instance = find_instance(db)
            if instance is None:
                raise BenchmarkError(f"the recording {db} holds no instance of {KERNEL}")
        else:
            progress(f"reusing the recording {db}")
        nbytes = sum(int(r.size) for r in instance.regions)
        rid = instance.id
        profiles = Path(nd.profile_path(instance)).parents[1]  # <db>/.mneme/determinism
        shutil.rmtree(profiles, ignore_errors=True)
        progress(f"first replay of {rid} ({nbytes / 1e9:.2f} GB), determinism profile absent")
        first = replay_process(db, rid, args.iterations, args.timeout,
                               "the first mneme replay (goal first replay <= 15 s NOT met)")
        if not first["verified"]:
            raise BenchmarkError(f"the first replay did not verify (verified={first['verified']})")
        later = []
        for i in range(args.later):
            progress(f"later replay {i + 1}/{args.later} (fresh process, profile cached)")
            later.append(replay_process(db, rid, args.iterations, args.timeout))
        host_later = []
        for i in range(args.later if args.host_restore else 0):
            progress(f"host-restore replay {i + 1}/{args.later} (fresh process, MNEME_RESTORE=host)")
            host_later.append(replay_process(db, rid, args.iterations, args.timeout, host_restore=True))
        progress(f"{args.later} later replays in one session of this process; device bandwidths")
        session, copy = session_replays(instance, args.later, args.iterations)
    try:
        copy["d2h_GBps"] = raw_pinned_d2h(1 << 30)["d2h_gbs"]
    except Exception as error:  # noqa: BLE001 - the report goes on without this reference
        progress(f"pinned D2H not measured: {type(error).__name__}: {tail(str(error), 1)}")
    return {"mib": args.mib, "device": first["device"], "instance": rid, "kernel": instance.kernel.demangled_name,
            "record_s": recorded_s, "first": first, "later_process": later, "session": session, "copy": copy,
            "host_later": host_later, "summary": summarize(nbytes, first, later, session, copy, host_later)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=8192, help="pool size in MiB (1..16384; default 8192)")
    parser.add_argument("--prebuilt", type=Path, default=os.environ.get("MNEME_RECORD_PREBUILT"),
                        help="folder holding atomic_pool/atomic_pool (default: build with mneme-clang++)")
    parser.add_argument("--db", type=Path, default=None,
                        help="keep the recording here, and reuse it when it holds the insert kernel")
    parser.add_argument("--later", type=int, default=3, help="later replays, of each kind (default 3)")
    parser.add_argument("--iterations", type=int, default=1, help="timed launches per replay (default 1)")
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds the recording and each replay process may take (default 900)")
    parser.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    parser.add_argument("--host-restore", action="store_true",
                        help="also time --later fresh-process replays restoring on the host (MNEME_RESTORE=host)")
    args = parser.parse_args(argv)
    if not 1 <= args.mib <= 16384 or args.later < 0 or args.iterations < 1:
        parser.error("--mib must be 1..16384, --later >= 0, --iterations >= 1")

    from mneme.runtime import driver_available

    if not driver_available():
        print("large_instance.py: needs an NVIDIA GPU and driver; none is usable on this machine",
              file=sys.stderr)
        return 2
    try:
        doc = run(args)
    except BenchmarkError as error:
        print(f"large_instance.py: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - one line, not a traceback
        print(f"large_instance.py: {type(error).__name__}: {tail(str(error), 2)}", file=sys.stderr)
        return 1
    print_report(doc)
    if args.json:
        args.json.write_text(json.dumps(doc, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

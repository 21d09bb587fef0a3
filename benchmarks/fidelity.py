"""Does replay predict the application? Fidelity and ranking on the fidelity corpus.

For every kernel of the ``fidelity_*`` corpus programs (tests/corpus/cuda, README there):

1. the program is recorded (``mneme record -mr 2``) and one recorded instance taken;
2. its in-application time: the instance's recorded ``app_time`` (median over launches,
   first apart) where the recording has one, else the median that ``mneme run --apply``'s
   swapper measures in the unmodified application (CUPTI kernel records; events where
   CUPTI is unusable);
3. per replay cache mode (warm, cold, app, auto; those ``mneme replay --cache`` offers),
   the replayed time of the recorded configuration over the in-app time: the fidelity;
4. five candidate launch configurations (other block sizes, grid covering the same
   threads) that replay verified: their replayed times per mode, and their in-app times
   (each swapped into the application by the ``mneme run --apply`` machinery, measured
   as ``mneme tune --confirm-in-app`` measures: ``mneme.tune.apply._app_confirm.run_in_app``,
   the median over the launches with the recorded launch shape), ranked; Kendall's tau
   between the replay ranking and the application's.

Goals (issue 20, on the H100): fidelity within 0.9-1.1 for at least 90 % of kernels with
10 or more launches in ``auto``; tau >= 0.8.

    python benchmarks/fidelity.py [--prebuilt DIR] [--programs fidelity_jacobi ...]
                                  [--iterations 20] [--json out.json]

Needs a GPU; executables come from DIR/<program>/<program> (MNEME_RECORD_PREBUILT) or are
built with mneme-clang++.

Replays run in a worker process (mneme tune's ReplayExecutor): a candidate that faults on
the GPU (a kernel that hard-codes its block size, say) poisons only that worker's CUDA
context; it is reported as a failed candidate, a fresh worker replays the rest, and the
table goes on. A kernel whose benchmark fails for any other reason is one line, too.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from mneme.tune.apply import kendall_tau, run_in_app

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "corpus"
GOAL_LOW, GOAL_HIGH, GOAL_SHARE, GOAL_TAU, MIN_LAUNCHES = 0.9, 1.1, 0.9, 0.8, 10
#: in-app medians closer than this (relative) are never taken as ordered by the application
MIN_NOISE = 0.01


def _corpus_build():
    spec = importlib.util.spec_from_file_location("corpus_build", CORPUS / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["corpus_build"] = module
    spec.loader.exec_module(module)
    return module


def distinct_pairs(in_app: list[float], noise: float, tick_ms: float = 0.0) -> list[tuple[int, int]]:
    """Pairs of candidates whose in-app medians differ by more than ``noise`` (relative)
    and by more than one tick of the GPU's timer: the pairs the application itself orders;
    closer ones swap between runs of it (a median of timestamps a tick apart moves by a
    tick)."""
    return [(i, j) for i in range(len(in_app)) for j in range(i + 1, len(in_app))
            if abs(in_app[i] - in_app[j]) > max(noise * min(in_app[i], in_app[j]), 1.5 * tick_ms)]


#: one step of CUPTI's kernel timestamps on the H100 and H200 (every duration recorded
#: there is a multiple of 32 ns, its medians of two launches a multiple of 16 ns)
TIMER_TICK_MS = 32e-6


def tau_over(pairs: list[tuple[int, int]], replayed: list[float], in_app: list[float]) -> float | None:
    """Kendall's tau over the given pairs only: (concordant - discordant) / pairs, a pair
    replay times as equal counting as neither; None without pairs."""
    if not pairs:
        return None
    score = 0
    for i, j in pairs:
        da, db = in_app[i] - in_app[j], replayed[i] - replayed[j]
        score += 0 if db == 0 else (1 if (da > 0) == (db > 0) else -1)
    return score / len(pairs)


def cache_modes() -> list[str]:
    """The cache modes this mneme's replay offers (warm only before they existed)."""
    try:
        from mneme.replay.engine.timing import CACHE_MODES
    except ImportError:
        return ["warm"]
    return list(CACHE_MODES)


def candidate_blocks(block: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """Block shapes around the recorded one: x for 1-D blocks, y for 2-D ones."""
    x, y, z = block
    if y == 1 and z == 1:
        return [(b, 1, 1) for b in (64, 128, 256, 512, 1024)]
    return [(x, v, z) for v in (1, 2, 4, 8, 16, 32) if x * v * z <= 1024]


def cover(grid, block, new_block) -> tuple[int, int, int]:
    return tuple(max(1, math.ceil(g * b / nb)) for g, b, nb in zip(grid, block, new_block, strict=True))


def executable(name: str, prebuilt: Path | None, out: Path) -> Path:
    if prebuilt is not None:
        return prebuilt / name / name
    return _corpus_build().build_program(CORPUS / "cuda" / name, out / name, compiler="mneme-clang++").executable


def record(exe: Path, args: list[str], db: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mneme.cli", "record", "-rdb", str(db), "-mr", "2", "--",
                           str(exe), *args], capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"recording {exe.name} failed: {done.stderr.strip()[-400:]}")


def in_app_times(exe: Path, args: list[str], db: Path, instance, settings_list, work: Path):
    """The kernel's in-app median (ms) under each configuration (None: the recorded code,
    measured without swapping), its launches and the timing method: mneme tune
    --confirm-in-app's measurement (mneme.tune.apply._app_confirm.run_in_app), a run of the
    application each."""
    runs = run_in_app(db, instance, settings_list, [str(exe), *args], work, timeout=600)
    ran = [r for r in runs if r.exit_status == 0]
    methods = {r.method for r in ran if r.method != "-"}
    return ([r.median_ms for r in runs], max((r.launches for r in ran), default=0),
            " / ".join(sorted(methods)) or "-")


def replay_pool(devices=(0,), **options):
    """A worker process on GPU 0 for the replays: a faulting candidate costs that worker
    (restarted for the next replay), never this process. (``devices=None``: compile-only
    workers on the CPU, as the CPU test uses it.)"""
    from mneme.tune.workers import ReplayExecutor

    return ReplayExecutor(devices=None if devices is None else list(devices), compile_workers=0,
                          timeout=300, **options)


def replayed(pool, instance, settings):
    """(ReplayResult, "") or (None, why it failed: kind and message)."""
    from mneme.tune.errors import TrialFailedError

    try:
        return pool.submit(settings, instance).result(), ""
    except TrialFailedError as failure:
        return None, f"{failure.kind}: {failure.message}"


def replay_time(pool, instance, settings, mode: str, iterations: int) -> float | None:
    """The median replayed time (ms) in cache ``mode``; None when the replay failed (auto
    without a recorded in-app time, say: "-")."""
    replay = settings.replay.with_(iterations=iterations, verify=False)
    if mode != "warm":  # a replay without cache modes knows warm only
        replay = replay.with_(cache=mode)
    from mneme.replay.engine.config import ReplaySettings

    result, _ = replayed(pool, instance, ReplaySettings(settings.compile, replay))
    return result.time if result is not None else None


def verified_candidates(pool, instance, wanted: int = 5):
    """Up to ``wanted`` launch configurations other than the recorded one that replay
    verified (a kernel that hard-codes its block size fails most, some by faulting), and
    the others with why they failed."""
    from mneme.replay.engine.config import ReplaySettings
    from mneme.tune.errors import TrialFailedError

    grid, block = tuple(instance.grid), tuple(instance.block)
    tried = []
    for new_block in candidate_blocks(block):
        base = ReplaySettings()
        settings = ReplaySettings(base.compile, base.replay.with_(block=list(new_block),
                                                                  grid=list(cover(grid, block, new_block))))
        check = ReplaySettings(settings.compile, settings.replay.with_(iterations=1))
        tried.append((new_block, settings, pool.submit(check, instance)))
    out, failed = [], []
    for new_block, settings, future in tried:
        try:
            future.result()
        except TrialFailedError as failure:
            failed.append({"block": list(new_block), "failure": failure.kind, "reason": failure.message})
            continue
        if len(out) < wanted:
            out.append((new_block, settings))
    return out, failed


def bench_kernel(program, exe: Path, db: Path, kernel, modes: list[str], iterations: int, work: Path,
                 pool) -> dict:
    from mneme.replay.engine.config import ReplaySettings

    instance = kernel.instances()[-1]
    row = {"program": program.name, "kernel": kernel.demangled_name, "instance": instance.id}
    app_time = getattr(instance, "app_time", None)
    candidates, row["failed_candidates"] = verified_candidates(pool, instance)
    row["candidates"] = [list(b) for b, _ in candidates]
    replayed_ms = {mode: replay_time(pool, instance, ReplaySettings(), mode, iterations) for mode in modes}
    candidate_replay = {mode: [replay_time(pool, instance, s, mode, iterations) for _, s in candidates]
                        for mode in modes}
    # the recorded configuration twice (two runs of the unmodified application), then each
    # candidate: the two, and the recorded app_time, say how much the application's own
    # median moves between runs
    in_app, launches, method = in_app_times(exe, list(program.args), db, instance,
                                            [None, None, *[s for _, s in candidates]], work / kernel.static_hash)
    recorded_in_app = app_time.median_ms if app_time and app_time.median_ms else in_app[0]
    same = [t for t in (recorded_in_app, in_app[0], in_app[1]) if t]
    noise = max(MIN_NOISE, max(same) / min(same) - 1) if same else MIN_NOISE
    row.update(launches=app_time.launches if app_time else launches, in_app_ms=recorded_in_app,
               in_app_source="app_time (recorded)" if app_time and app_time.median_ms else f"run --apply ({method})",
               replay_ms=replayed_ms, in_app_candidates_ms=in_app[2:], in_app_noise=noise)
    row["fidelity"] = {m: (t / recorded_in_app if t and recorded_in_app else None) for m, t in replayed_ms.items()}
    row["tau"], row["tau_distinct"] = {}, {}
    tick = TIMER_TICK_MS
    for mode in modes:
        kept = [(r, a) for r, a in zip(candidate_replay[mode], in_app[2:], strict=True) if r and a]
        row["tau"][mode] = kendall_tau(*map(list, zip(*kept, strict=True))) if len(kept) >= 3 else None
        replayed, app = [r for r, _ in kept], [a for _, a in kept]
        pairs = distinct_pairs(app, noise, tick)
        row["distinct_pairs"], row["pairs"] = len(pairs), len(kept) * (len(kept) - 1) // 2
        row["tau_distinct"][mode] = tau_over(pairs, replayed, app)
    row["candidate_replay_ms"] = candidate_replay
    return row


def failed_row(program, kernel, modes: list[str], error: BaseException) -> dict:
    """A kernel whose benchmark could not finish: its row says why, the others go on."""
    why = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    return {"program": program.name, "kernel": kernel.demangled_name, "instance": None, "error": why,
            "launches": None, "fidelity": dict.fromkeys(modes), "tau": dict.fromkeys(modes),
            "tau_distinct": dict.fromkeys(modes),
            "candidates": [], "failed_candidates": []}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prebuilt", type=Path, default=os.environ.get("MNEME_RECORD_PREBUILT"))
    parser.add_argument("--programs", nargs="*", default=None)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--json", type=Path, default=None)
    options = parser.parse_args()
    from mneme.runtime import driver_available

    if not driver_available():
        print("fidelity.py: needs a GPU", file=sys.stderr)
        return 2
    build = _corpus_build()
    programs = [p for p in build.discover_programs("cuda") if "fidelity" in p.features
                and (not options.programs or p.name in options.programs)]
    modes = cache_modes()
    rows = []
    from mneme.replay.db import Database

    with tempfile.TemporaryDirectory(prefix="mneme-fidelity-") as tmp, replay_pool() as pool:
        work = Path(tmp)
        for program in programs:
            try:
                exe = executable(program.name, options.prebuilt, work / "build")
                db = work / f"{program.name}.rdb"
                record(exe, list(program.args), db)
                kernels = Database.open(db).kernels()
            except Exception as error:  # noqa: BLE001 - one line, the other programs go on
                print(f"{program.name:<28} not benchmarked: {type(error).__name__}: {error}", flush=True)
                continue
            for kernel in kernels:
                try:
                    rows.append(bench_kernel(program, exe, db, kernel, modes, options.iterations,
                                             work / program.name, pool))
                except Exception as error:  # noqa: BLE001 - the kernel's row says why
                    rows.append(failed_row(program, kernel, modes, error))
                print_row(rows[-1], modes)
        restarts = pool.restarts
    if restarts:
        print(f"\n{restarts} replay worker(s) restarted after candidates that faulted on the GPU")
    print_summary(rows, modes)
    if options.json:
        options.json.write_text(json.dumps(rows, indent=2, default=str))
    return 0


def _f(value, digits=2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def print_row(row: dict, modes: list[str]) -> None:
    if row.get("error"):
        print(f"{row['program']:<28} {row['kernel'][:44]:<44} not benchmarked: {row['error']}", flush=True)
        return
    ratios = "  ".join(f"{m} {_f(row['fidelity'][m])}" for m in modes)
    taus = "  ".join(f"{m} {_f(row['tau'][m])}" for m in modes)
    distinct = "  ".join(f"{m} {_f(row['tau_distinct'][m])}" for m in modes)
    print(f"{row['program']:<28} {row['kernel'][:44]:<44} launches {row['launches']:>4}  "
          f"in-app {_f(row['in_app_ms'], 4)} ms [{row['in_app_source']}], "
          f"run to run {100 * row['in_app_noise']:.1f} %", flush=True)
    print(f"    replayed/in-app: {ratios}\n    Kendall tau over {len(row['candidates'])} candidates: {taus}",
          flush=True)
    print(f"    tau over the {row['distinct_pairs']} of {row['pairs']} pairs the application orders "
          f"(apart by more than its run-to-run change and a timer tick): {distinct}", flush=True)
    for failed in row.get("failed_candidates", []):
        block = "x".join(map(str, failed["block"]))
        reason = failed["reason"].splitlines()[0][:100] if failed["reason"] else ""
        print(f"    candidate block {block} failed in replay ({failed['failure']}): {reason}", flush=True)


def print_summary(rows: list[dict], modes: list[str]) -> None:
    print("\nsummary (goals: fidelity 0.9-1.1 for >= 90 % of kernels with >= 10 launches in auto; tau >= 0.8;"
          " tau* over the pairs the application orders, kernels whose candidates it does not order left out)")
    eligible = [r for r in rows if (r["launches"] or 0) >= MIN_LAUNCHES]
    for mode in modes:
        within = [r for r in eligible if r["fidelity"][mode] and GOAL_LOW <= r["fidelity"][mode] <= GOAL_HIGH]
        taus = [r["tau"][mode] for r in rows if r["tau"][mode] is not None]
        distinct = [r["tau_distinct"][mode] for r in rows if r.get("tau_distinct", {}).get(mode) is not None]
        ratios = [r["fidelity"][mode] for r in eligible if r["fidelity"][mode]]
        print(f"  {mode:<5} fidelity within 0.9-1.1: {len(within)}/{len(eligible)}"
              f" (median ratio {_f(statistics.median(ratios)) if ratios else '-'})"
              f"; tau >= 0.8: {sum(t >= GOAL_TAU for t in taus)}/{len(taus)}"
              f" (median tau {_f(statistics.median(taus)) if taus else '-'})"
              f"; tau* >= 0.8: {sum(t >= GOAL_TAU for t in distinct)}/{len(distinct)}")
    if "auto" in modes and eligible:
        share = sum(1 for r in eligible if r["fidelity"]["auto"] and GOAL_LOW <= r["fidelity"]["auto"] <= GOAL_HIGH)
        print(f"  goal (auto): {'met' if share >= GOAL_SHARE * len(eligible) else 'NOT met'} "
              f"({share}/{len(eligible)})")
    if "auto" in modes:
        distinct = [r["tau_distinct"]["auto"] for r in rows if r.get("tau_distinct", {}).get("auto") is not None]
        if distinct:
            held = sum(t >= GOAL_TAU for t in distinct)
            print(f"  goal (auto, tau* >= {GOAL_TAU}): {'met' if held == len(distinct) else 'NOT met'} "
                  f"({held}/{len(distinct)})")


if __name__ == "__main__":
    sys.exit(main())

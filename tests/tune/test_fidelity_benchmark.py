"""benchmarks/fidelity.py survives a candidate that takes its replay process down (on the
H100 a candidate block of fidelity_producer_consumer, whose consumer hard-codes a
256-entry shared array, died with CUDA_ERROR_ILLEGAL_ADDRESS and took the benchmark with
it): the candidate is reported failed, the others are replayed by a fresh worker. Here a
worker hook aborts the worker on that candidate, on the CPU (compile-only replays)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from mneme.replay.db import Database
from tune_support import GOLDEN, SAXPY, abort_on_block_512

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "fidelity.py"


@pytest.fixture(scope="module")
def fidelity():
    spec = importlib.util.spec_from_file_location("fidelity_benchmark", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_candidate_that_kills_its_replay_process_is_reported_and_the_rest_go_on(fidelity):
    instance = Database.open(GOLDEN).instance(SAXPY)
    with fidelity.replay_pool(devices=None, cpu_workers=1, before_run=abort_on_block_512) as pool:
        candidates, failed = fidelity.verified_candidates(pool, instance)
        restarts = pool.restarts
    blocks = [list(block) for block, _ in candidates]
    assert [f["block"] for f in failed] == [[512, 1, 1]]
    assert failed[0]["failure"] == "crashed"
    expected = [list(b) for b in fidelity.candidate_blocks(tuple(instance.block)) if b != (512, 1, 1)]
    assert blocks == expected and restarts == 1


def test_a_failed_kernel_row_prints_one_line_and_the_summary_still_adds_up(fidelity, capsys):
    class Program:
        name = "fidelity_producer_consumer"

    kernel = Database.open(GOLDEN).instance(SAXPY).kernel
    modes = ["warm", "auto"]
    row = fidelity.failed_row(Program, kernel, modes,
                              RuntimeError("cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS\nmore"))
    fidelity.print_row(row, modes)
    fidelity.print_summary([row], modes)
    out = capsys.readouterr().out
    assert "not benchmarked: RuntimeError: cuStreamSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS" in out
    assert "more" not in out and "summary" in out


def test_kendall_tau_of_agreeing_and_opposite_rankings(fidelity):
    assert fidelity.kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == 1.0
    assert fidelity.kendall_tau([1, 2, 3], [3, 2, 1]) == -1.0
    assert fidelity.kendall_tau([1], [1]) is None


def test_ranking_counts_only_pairs_the_application_itself_orders(fidelity):
    in_app = [0.0434, 0.0441, 0.0443, 0.0439, 0.0600]  # four within 2 %, one far slower
    pairs = fidelity.distinct_pairs(in_app, noise=0.03)
    assert pairs == [(0, 4), (1, 4), (2, 4), (3, 4)]
    replayed_right = [0.050, 0.040, 0.045, 0.041, 0.070]  # noise among the four, last slowest
    assert fidelity.tau_over(pairs, replayed_right, in_app) == 1.0
    replayed_wrong = [0.050, 0.040, 0.045, 0.080, 0.070]  # candidate 3 out of order
    assert fidelity.tau_over(pairs, replayed_wrong, in_app) == 0.5
    assert fidelity.tau_over(fidelity.distinct_pairs(in_app[:4], 0.03), replayed_right[:4], in_app[:4]) is None
    # without the noise floor every pair counts, and the plain tau sees the noise
    assert len(fidelity.distinct_pairs(in_app, noise=0.0)) == 10


def test_the_benchmark_measures_in_the_application_with_mneme_tunes_function(fidelity):
    """One implementation: the benchmark's in-app times and rank correlation are
    mneme tune --confirm-in-app's (mneme.tune.apply._app_confirm), not a copy."""
    from mneme.tune.apply import _app_confirm as app_confirm

    assert fidelity.run_in_app is app_confirm.run_in_app
    assert fidelity.kendall_tau is app_confirm.kendall_tau
    source = BENCHMARK.read_text()
    for own in ("LD_PRELOAD", "MNEME_APPLY_PLAN", "MNEME_APPLY_MODE", "read_report", "write_plan"):
        assert own not in source, own

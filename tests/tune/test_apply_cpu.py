"""`mneme run --apply` without a GPU: the plan the preloaded swapper follows is compiled
from best.json files (dry run), the launch rules come out of the tuned configuration, and
user errors are one line."""

import json
import shutil

import pytest
from mneme.tune.apply import grid_rule
from tune_support import compile_only_report, one_line_error, run_mneme


@pytest.fixture(scope="module")
def best(tmp_path_factory):
    """A best.json of saxpy, tuned (compile-only) on the shipped recording."""
    report, _ = compile_only_report(tmp_path_factory.mktemp("apply"), trials=3, seed=1)
    return report / "best.json"


def _with(best, tmp_path, name="best.json", **replay):
    data = json.loads(best.read_text())
    data["replay"].update(replay)
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _plan(*args):
    run = run_mneme("run", "--apply", *args, "--dry-run", "--", "true")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "mneme-apply-plan 1"
    return {line.split()[0]: line.split(None, 1)[1] for line in lines[1:] if " " in line}, lines


def test_the_plan_names_the_kernel_its_code_and_the_recorded_launch(best):
    plan, lines = _plan(best)
    assert plan["kernel"] == "_Z5saxpyfPKfPfi" and plan["function"] == "_Z5saxpyfPKfPfi"
    assert plan["cubin"].endswith(".cubin")
    recorded = plan["recorded"].split()
    assert plan["tuned"] == plan["recorded"]  # a pipeline-only configuration keeps the launch
    assert len(recorded) == 7 and plan["grid"] == "keep"
    assert plan["bound"] == "0" and plan["dims"] == "any"
    assert not any(line.startswith("arg ") for line in lines) and lines[-1] == "end"


def test_a_tuned_block_gives_the_cover_rule_and_a_bound(best, tmp_path):
    plan, _ = _plan(best)
    grid = [int(v) for v in plan["recorded"].split()[:3]]
    block = [int(v) for v in plan["recorded"].split()[3:6]]
    new_block = [block[0] * 2, 1, 1]
    cover = [max(1, -(-grid[0] * block[0] // new_block[0])), grid[1], grid[2]]
    path = _with(best, tmp_path, block=new_block, grid=cover, set_launch_bounds=True)
    plan, _ = _plan(path)
    assert plan["tuned"].split()[3:6] == [str(v) for v in new_block]
    assert plan["grid"] == "cover" and plan["bound"] == str(new_block[0])


def test_specialisation_restricts_the_swap_to_the_recorded_values(best, tmp_path):
    path = _with(best, tmp_path, specialize=True, specialize_dims=True)
    _, lines = _plan(path)
    args = [line.split() for line in lines if line.startswith("arg ")]
    # saxpy(float a, const float* x, float* y, int n): the scalars a and n, not the pointers
    assert [a[1] for a in args] == ["0", "3"]
    assert all(len(a[2]) == 8 for a in args)  # 4 bytes each, in hex
    assert "dims exact" in lines


def test_grid_rules_follow_the_launch_space():
    assert grid_rule((16, 1, 1), (256, 1, 1), (128, 1, 1), (32, 1, 1)) == "cover"
    assert grid_rule((16, 1, 1), (256, 1, 1), (128, 1, 1), (16, 1, 1)) == "keep"
    assert grid_rule((16, 1, 1), (256, 1, 1), (128, 1, 1), (40, 1, 1)) == "fixed"



def test_user_errors_are_one_line(best, tmp_path):
    one_line_error(run_mneme("run", "--apply", tmp_path, "--", "true"), "holds no best.json")
    one_line_error(run_mneme("run", "--apply", tmp_path / "nope.json", "--", "true"), "does not exist")
    one_line_error(run_mneme("run", "--apply", best, "--", str(tmp_path / "no-app")), "no such executable")
    data = json.loads(best.read_text())
    del data["identity"]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(data))
    one_line_error(run_mneme("run", "--apply", bare, "--dry-run", "--", "true"), "no identity")
    one_line_error(run_mneme("run", "--apply", best, "--output-filter", "(", "--", "true"),
              "not a regular expression")
    twice = tmp_path / "twice"
    for sub in ("a", "b"):
        (twice / sub).mkdir(parents=True)
        shutil.copy(best, twice / sub / "best.json")
    one_line_error(run_mneme("run", "--apply", twice, "--dry-run", "--", "true"), "is tuned by both")


def test_without_a_gpu_it_says_so(best):
    from mneme.runtime import driver_available

    if driver_available():
        pytest.skip("a GPU driver is present")
    one_line_error(run_mneme("run", "--apply", best, "--", "true"), "needs a GPU", "--dry-run")


def test_the_swappers_report_gives_medians_with_the_first_launch_apart(tmp_path):
    from mneme.tune.apply import read_report, timing_method_of

    path = tmp_path / "report.txt"
    path.write_text("mneme-apply-report 2\n"
                    "kernel _Z1kv launches 12 swapped 12 refused 0 same_config 11 method cupti timed 12 "
                    "time_s 0.0021 first_ms 0.5 median_ms 0.1 same_config_timed 11 same_config_time_s 0.0011 "
                    "same_config_median_ms 0.1\n"
                    "kernel _Z1qv launches 0 swapped 0 refused 0 same_config 0 method cupti timed 0 time_s 0 "
                    "first_ms 0 median_ms 0 same_config_timed 0 same_config_time_s 0 same_config_median_ms 0\n")
    report = read_report(path)
    k = report.get("_Z1kv")
    assert (k.launches, k.method, k.first_ms, k.median_ms, k.same_config_median_ms) == (12, "cupti", 0.5, 0.1, 0.1)
    assert report.get("_Z1qv").median_ms is None  # never launched: no time, not 0
    assert report.get("_Z9missingv").launches == 0
    assert timing_method_of(report) == "cupti"
    path.write_text(path.read_text().replace("method cupti", "method events")
                    + "fallback libcupti.so: cannot open shared object file\n")
    assert timing_method_of(read_report(path)) == "events (CUPTI unusable: libcupti.so: cannot open shared object file)"
    assert read_report(tmp_path / "none.txt").kernels == {}


def test_a_kernels_shared_variables_are_not_the_applications_globals():
    """A __shared__ variable (the block reduction of cooperative_solver's kernels) is listed
    among the kernel's globals (address space 3) but is no memory of the application's: the
    plan leaves it out, else the swapper finds it unregistered and keeps the original code."""
    from types import SimpleNamespace

    from mneme.tune.apply import application_globals

    kernel = SimpleNamespace(globals=[SimpleNamespace(name="counter", size=4, address_space=1),
                                      SimpleNamespace(name="table", size=64, address_space=4),
                                      SimpleNamespace(name="_ZZ12block_max_toPjfE10block_bits", size=4,
                                                      address_space=3)])
    assert application_globals(kernel) == [("counter", 4), ("table", 64)]

"""Patterns of real applications, recorded and replayed on a GPU (issue: CUDA Graphs,
managed memory, nondeterministic kernels, launch-dependent shared memory).

Each corpus program runs once plainly and once under `mneme record`; its own results must
not change, every recorded instance must replay and verify by its determinism class, and
the classes must be the ones the kernels' nature implies."""

from __future__ import annotations

import struct
from collections import Counter

import pytest
from mneme.replay.db import Database
from mneme.replay.engine import ReplayConfig, ReplaySession
from mneme.replay.engine import determinism as nd
from mneme.replay.jit import CompileConfig
from mneme.runtime import driver_available
from record_support import PROGRAMS, executable, mneme_record

pytestmark = pytest.mark.gpu

REAL_APPS = [
    "graph_capture",
    "graph_nodes",
    "driver_graphs",
    "managed_solver",
    "managed_memory",
    "managed_mlp",
    "stream_compaction",
    "float_histogram",
    "clock_timing",
    "block_shared_reduction",
    "atomic_pool",
]
#: the class the nondeterministic output region of each program must get
EXPECTED_CLASS = {
    "stream_compaction": nd.ORDER,
    "float_histogram": nd.FLOAT,
    "clock_timing": nd.ANY,
    "atomic_pool": nd.ORDER,  # insert_keys: slots and chain links in scheduling order
}


@pytest.fixture(scope="module", autouse=True)
def _gpu():
    if not driver_available():
        pytest.skip("no usable CUDA driver")


def own_results(stdout: str) -> list[str]:
    """What a program computed, in a form that does not depend on scheduling."""
    return [line for line in stdout.splitlines() if line.startswith(("corpus-output", "MNEME-RESULT"))]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            import subprocess

            out = tmp_path_factory.mktemp(name)
            exe = executable(name, out)
            plain = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
            result = mneme_record(out / "rec.rdb", exe)
            cache[name] = (out / "rec.rdb", plain, result)
        return cache[name]

    return get


@pytest.mark.parametrize("name", REAL_APPS)
def test_application_computes_the_same_under_record(recorded, name):
    db_path, plain, result = recorded(name)
    assert plain.returncode == 0, plain.stderr
    assert result.returncode == PROGRAMS[name].expect_exit == 0, result.stderr
    assert own_results(result.stdout) == own_results(plain.stdout)
    assert "runs unrecorded" not in result.stderr, result.stderr
    assert list(Database.open(db_path).instances())


@pytest.mark.parametrize("name", REAL_APPS)
def test_every_instance_replays_and_verifies_by_its_class(recorded, name):
    db_path, _, _ = recorded(name)
    classes: Counter = Counter()
    failures = []
    for inst in Database.open(db_path).instances():
        with ReplaySession(inst) as session:
            result = session.run(CompileConfig.for_level("O3", arch="sm_90"), ReplayConfig(iterations=3))
            if result.verified is not True:
                failures.append(f"{inst.id}: {[m.describe() for m in result.mismatches[:2]]}")
            classes.update(result.determinism.values())
            # the profile is kept: a second session reads it instead of measuring again
            assert nd.load_profile(inst) is not None
    assert failures == []
    print(f"\n{name}: classes of non-exact regions {dict(classes)}")
    if name in EXPECTED_CLASS:
        assert classes[EXPECTED_CLASS[name]] >= 1, dict(classes)
    else:
        assert not classes, f"{name} is deterministic: every region exact, got {dict(classes)}"


def _scalar(inst, index: int, fmt: str):
    param = inst.kernel.params[index]
    return struct.unpack_from(fmt, bytes(inst.args), param.offset)[0]


def test_captured_graph_launches_are_recorded_with_their_updates(recorded):
    """12 graph launches after one eager step; the time step changes after 6 launches
    through a re-capture and cudaGraphExecUpdate."""
    db_path, _, _ = recorded("graph_capture")
    by_kernel: dict[str, list] = {}
    for inst in Database.open(db_path).instances():
        by_kernel.setdefault(inst.kernel.demangled_name.split("(")[0], []).append(inst)
    updates = {round(_scalar(i, 2, "<f"), 4): i.occurrences for i in by_kernel["update"]}
    assert updates == {0.01: 1, 0.02: 6, 0.015: 6}
    assert sum(i.occurrences for i in by_kernel["flux"]) == 13
    assert sum(i.occurrences for i in by_kernel["residual"]) == 13


def test_graph_built_node_by_node_follows_set_params_and_enabling(recorded):
    db_path, _, _ = recorded("graph_nodes")
    scale = {}
    for inst in Database.open(db_path).instances():
        if inst.kernel.demangled_name.startswith("scale_bits"):
            scale[(_scalar(inst, 3, "<I"), _scalar(inst, 4, "<I"))] = inst.occurrences
    # eager (3, 1) once; left branch (5, 2) for launches 0-2 and (17, 6) for 3-7; right
    # branch (9, 4) on every launch but the one it was disabled for
    assert scale == {(3, 1): 1, (5, 2): 3, (17, 6): 5, (9, 4): 7}


def test_driver_graph_taken_by_lookup_is_recorded_with_its_exec_updates(recorded):
    """XLA's way: cuGraph* taken through cuGetProcAddress, instantiated with
    cuGraphInstantiateWithFlags, changed with cuGraphExecKernelNodeSetParams,
    cuGraphExecMemsetNodeSetParams and cuGraphExecUpdate between six launches; the joining
    node keeps its arguments packed (`extra`), as XLA's cuBLASLt nodes do. Every graph
    kernel is recorded with the arguments of its launch (the mirror followed each change);
    test_application_computes_the_same_under_record asserts no launch ran unrecorded."""
    db_path, _, _ = recorded("driver_graphs")
    scale, fill, combine = Counter(), Counter(), 0
    for inst in Database.open(db_path).instances():
        name = inst.kernel.demangled_name
        if name.startswith("scale_add"):
            scale[(_scalar(inst, 2, "<I"), _scalar(inst, 3, "<I"))] += inst.occurrences
        elif name.startswith("fill_index"):
            fill[_scalar(inst, 2, "<I")] += inst.occurrences
        elif name.startswith("combine"):
            combine += inst.occurrences
    # eager (5, 1) once; launches 0-1 (5, 1), 2-3 (7, 9) after SetParams; launch 4 the
    # updated graph's (11, 4); launch 5 (2, 3), set after the update through the original graph's node
    assert scale == {(5, 1): 3, (7, 9): 2, (11, 4): 1, (2, 3): 1}
    assert fill == {3: 5, 13: 2}
    assert combine == 7


def test_managed_memory_is_recorded_at_its_own_addresses(recorded):
    db_path, _, _ = recorded("managed_solver")
    db = Database.open(db_path)
    hi = db.info.vas_base + db.info.vas_size
    managed = [r for i in db.instances() for r in i.regions if r.kind == "managed"]
    # served from the fixed range right after the device range (replay can take it again)
    assert managed and all(hi <= r.address < hi + (1 << 40) for r in managed)
    sizes = {r.size for r in managed}
    assert {16, 256 * 256 * 4, 256 * 4} <= sizes  # params, the two fields, the row sums


def _tune(db_path, instance, spaces, tmp_path, trials, sampler="tpe"):
    from mneme.tune import TuneOptions, Tuner

    options = TuneOptions(trials=trials, devices=[0], storage=f"sqlite:///{tmp_path / 't.db'}",
                          seed=3, iterations=3, sampler=sampler)
    return Tuner(db_path, [instance], spaces, options).run()


@pytest.mark.parametrize("name", ["stream_compaction", "float_histogram"])
def test_tuning_a_nondeterministic_kernel_finds_verified_trials(recorded, name, tmp_path):
    db_path, _, _ = recorded(name)
    inst = next(Database.open(db_path).instances())
    outcome = _tune(db_path, inst.id, "launch,pipeline", tmp_path, 16)
    verified = [t for t in outcome.trials if t.verified is True]
    assert outcome.baseline["verified"] is True
    assert len(verified) >= 8, [(t.params, t.reason) for t in outcome.trials]
    print(f"\n{name}: {len(verified)}/{len(outcome.trials)} verified, "
          f"{outcome.trials_per_second:.1f} trials/s")


def test_launch_space_scales_per_thread_shared_memory(recorded, tmp_path):
    """The final pass (1 block of 128 threads, 1 KiB of shared memory) at every block size:
    power-of-two blocks sum exactly and verify; without scaling, 512 and 1024 threads would
    index past 1 KiB of shared memory and fault."""
    db_path, _, _ = recorded("block_shared_reduction")
    inst = min(Database.open(db_path).instances(), key=lambda i: i.grid[0])  # 1 x 128
    assert inst.shared_mem == 128 * 8
    outcome = _tune(db_path, inst.id, "launch", tmp_path, 32, sampler="grid")  # every block size
    verified = {t.params["block_x"] for t in outcome.trials if t.verified is True}
    assert verified >= {128, 256, 512, 1024}, [(t.params, t.reason) for t in outcome.trials]
    faulted = [t for t in outcome.trials if t.reason and "differ" not in t.reason]
    assert faulted == [], [(t.params, t.reason) for t in faulted]


def test_graphs_that_cannot_run_node_by_node_run_unrecorded_saying_so(recorded):
    """A graph with memory allocation/free nodes and a graph instantiated for device-side
    launch: each runs as it is, with one line naming it and the call site; the program's
    own results do not change; only its eager launches are recorded."""
    db_path, plain, result = recorded("graph_unrecordable")
    assert result.returncode == 0, result.stderr
    assert own_results(result.stdout) == own_results(plain.stdout)
    lines = [line for line in result.stderr.splitlines() if "runs unrecorded" in line]
    assert len(lines) == 2, result.stderr
    assert any("memory allocation node" in line for line in lines), lines
    assert any("device-side launch" in line for line in lines), lines
    assert all("graph_unrecordable+0x" in line and "addr2line" in line for line in lines), lines
    occurrences = {i.kernel.demangled_name.split("(")[0]: i.occurrences
                   for i in Database.open(db_path).instances()}
    assert occurrences == {"fill_square": 1, "fold": 1}


@pytest.mark.parametrize("name", ["pointer_structures", "many_launches", "struct_by_value"])
def test_reachable_capture_keeps_what_the_kernel_reaches(tmp_path, name):
    """--capture reachable: pointers in arguments, device globals and, transitively, in
    device memory (a linked list, a descriptor of pointers) are followed; every instance
    still replays and verifies, with at most the regions of a full capture."""
    exe = executable(name, tmp_path)
    full, reach = tmp_path / "all.rdb", tmp_path / "reach.rdb"
    assert mneme_record(full, exe).returncode == 0
    result = mneme_record(reach, exe, "--capture", "reachable")
    assert result.returncode == 0, result.stderr
    everything = {i.id: i for i in Database.open(full).instances()}
    reached = {i.id: i for i in Database.open(reach).instances()}
    assert reached.keys() == everything.keys()
    fewer = 0
    for key, inst in reached.items():
        assert inst.capture == "reachable"
        # device globals sit where each run's module was loaded: compare the allocations
        names = {r.name for r in inst.regions if r.kind != "global"}
        full_names = {r.name for r in everything[key].regions if r.kind != "global"}
        assert names <= full_names
        fewer += len(names) < len(full_names)
        with ReplaySession(inst) as session:
            r = session.run(CompileConfig.for_level("O3", arch="sm_90"), ReplayConfig(iterations=2))
            assert r.verified is True, (key, [m.describe() for m in r.mismatches[:2]])
    print(f"\n{name}: {fewer} of {len(reached)} instances captured fewer regions")
    if name == "many_launches":
        assert fewer > 0


def test_reachable_capture_misses_a_computed_pointer_and_replay_says_so(tmp_path):
    """A pointer computed from an integer is not followed: the second buffer is not
    captured, and its replay (in a process of its own: a fault ends the CUDA context)
    fails with one line, never verifies."""
    import subprocess
    import sys

    exe = executable("computed_pointer", tmp_path)
    reach = tmp_path / "reach.rdb"
    assert mneme_record(reach, exe, "--capture", "reachable").returncode == 0
    (inst,) = Database.open(reach).instances()
    assert len([r for r in inst.regions if r.kind == "heap"]) == 1  # only `a`
    result = subprocess.run([sys.executable, "-m", "mneme.cli", "replay", "-rdb", str(reach),
                             "-rid", inst.id], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0, result.stdout
    assert "Traceback" not in result.stderr, result.stderr
    assert "verified   yes" not in result.stdout
    print(f"\ncomputed_pointer under --capture reachable: exit {result.returncode}: "
          f"{(result.stderr.strip() or result.stdout.strip()).splitlines()[-1]}")


def test_managed_memory_stays_the_drivers_placed_in_the_range(recorded):
    """--managed placed (the default): the application keeps real managed memory (its
    own pointer query says so: host memory standing in would say 'host'), placed in the
    recorder's range, each allocation a region at its own address."""
    db_path, plain, result = recorded("managed_mlp")
    assert "corpus-output weights_memory_type 0000000000000003" in result.stdout, result.stdout[-600:]
    assert "outside the recorder's range" not in result.stderr, result.stderr
    db = Database.open(db_path)
    hi = db.info.vas_base + db.info.vas_size
    managed = [r for i in db.instances() for r in i.regions if r.kind == "managed"]
    assert managed and all(hi <= r.address < hi + (1 << 40) for r in managed)
    assert {1024 * 1024 * 4, 256 * 1024 * 4, 1024 * 4} <= {r.size for r in managed}


def test_managed_memory_served_from_host_memory_when_asked(tmp_path):
    """--managed host: host memory mapped in the range stands in; the program computes the
    same and every instance replays verified."""
    import subprocess

    exe = executable("managed_solver", tmp_path)
    plain = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    result = mneme_record(tmp_path / "host.rdb", exe, "--managed", "host")
    assert result.returncode == 0, result.stderr
    assert own_results(result.stdout) == own_results(plain.stdout)
    instances = list(Database.open(tmp_path / "host.rdb").instances())
    assert instances
    for inst in instances:
        with ReplaySession(inst) as session:
            replayed = session.run(CompileConfig.for_level("O3", arch="sm_90"), ReplayConfig(iterations=1))
            assert replayed.verified is True, inst.id

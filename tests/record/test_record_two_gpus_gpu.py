"""Recording an application that works on two GPUs in one process (issue 25): the corpus
program two_gpus fills a half on each GPU, reads GPU 1's half from GPU 0 through a peer
pointer, scales on GPU 1 and brings the half over with cudaMemcpyPeer. Every launch is
recorded on its own GPU, in that GPU's own address range; the launch that reads GPU 1's
memory holds it as a "peer" region. On two GPUs every instance replays verified; with one
GPU visible the single-GPU instances replay and the peer one is refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from mneme.replay.db import Database
from mneme.replay.engine import ReplayConfig, replay
from mneme.replay.jit import CompileConfig
from record_support import corpus_build, executable, mneme_record, require_two_gpus

pytestmark = pytest.mark.gpu


def _build(build: str, folder):
    """clang: mneme-clang++ (IR manifest); nvcc-shared / nvcc-static: nvcc's builds with the
    shared and the default static CUDA runtime (fatbinaries, driver entry points)."""
    if build == "clang":
        return executable("two_gpus", folder)
    try:
        corpus_build.find_nvcc()
    except corpus_build.CorpusError as error:
        pytest.skip(str(error))
    program = corpus_build.load_program(corpus_build.CORPUS_DIR / "cuda" / "two_gpus")
    cudart = build.split("-")[1]
    return corpus_build.build_nvcc_program(program.directory, folder / build, cudart=cudart).executable


@pytest.fixture(scope="module", params=["clang", "nvcc-shared", "nvcc-static"])
def recording(request, tmp_path_factory):
    require_two_gpus()
    folder = tmp_path_factory.mktemp(f"two-gpus-{request.param}")
    exe = _build(request.param, folder)
    db = folder / "two_gpus.rdb"
    run = mneme_record(db, exe)
    print(run.stdout, run.stderr)
    assert run.returncode == 0, run.stderr
    assert "MNEME-RESULT ok" in run.stdout
    assert "working on GPUs 0 and 1" in run.stdout
    return db


def _mneme(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mneme.cli", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, **(env or {})})


def _instances(db) -> dict[str, list[dict]]:
    listing = _mneme("ls", str(db), "--json")
    assert listing.returncode == 0, listing.stderr
    by_kernel: dict[str, list[dict]] = {}
    for row in json.loads(listing.stdout):
        assert "broken" not in row, row
        by_kernel.setdefault(row["kernel"].split("(")[0], []).append(row)
    return by_kernel


def test_each_launch_is_recorded_on_its_gpu_with_the_peer_memory_it_reads(recording):
    rows = _instances(recording)
    assert sorted(r["device"] for r in rows["fill_ramp"]) == [0, 1]
    assert [(r["device"], r["peer_devices"]) for r in rows["scale_half"]] == [(1, [])]
    assert [(r["device"], r["peer_devices"]) for r in rows["add_remote"]] == [(0, [1])]
    assert [(r["device"], r["peer_devices"]) for r in rows["add_copied"]] == [(0, [])]
    database = Database.open(recording)
    by_device = {}
    for inst in database.instances():
        by_device.setdefault(inst.device, set()).add(inst.address_range)
    # one range per GPU, disjoint
    assert len(by_device[0]) == len(by_device[1]) == 1
    (base0, size0), (base1, size1) = by_device[0].pop(), by_device[1].pop()
    assert base0 + size0 <= base1 or base1 + size1 <= base0
    (remote,) = [i for i in database.instances() if i.kernel.demangled_name.startswith("add_remote")]
    peers = [r for r in remote.regions if r.kind == "peer"]
    assert [r.device for r in peers] == [1] and base1 <= peers[0].address < base1 + size1
    table = _mneme("ls", str(recording))
    assert table.returncode == 0 and "0+1" in table.stdout, table.stdout
    check = _mneme("check", str(recording))
    assert check.returncode == 0 and "every chunk verified" in check.stdout, check.stdout + check.stderr
    assert [r["occurrences"] for r in rows["add_remote"]] == [21]


def test_every_instance_replays_verified_on_two_gpus(recording):
    failures = []
    instances = list(Database.open(recording).instances())
    assert len(instances) == 5
    for inst in instances:
        result = replay(inst, CompileConfig.for_level("O3", arch="sm_90"), ReplayConfig())
        if result.verified is not True:
            failures.append(f"{inst.id} {inst.kernel.demangled_name}: {result.mismatches[:2]}")
    assert failures == []


def test_with_one_gpu_visible_the_peer_instance_is_refused_in_one_line(recording):
    one_gpu = {"CUDA_VISIBLE_DEVICES": "0"}
    outcomes = {}
    for inst in Database.open(recording).instances():
        run = _mneme("replay", "-rdb", str(recording), "-rid", inst.id, "--json", env=one_gpu)
        outcomes[inst.kernel.demangled_name.split("(")[0], inst.device] = run
    remote = outcomes.pop(("add_remote", 0))
    assert remote.returncode != 0
    lines = [line for line in remote.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "reads the memory of 1 other GPU" in lines[0], remote.stderr
    assert "Traceback" not in remote.stderr
    for key, run in outcomes.items():
        assert run.returncode == 0, (key, run.stderr)
        assert json.loads(run.stdout)["verified"] is True, (key, run.stdout)

"""Record the corpus, then replay every recorded instance bit-exact under default<O3>."""

from __future__ import annotations

import pytest
from mneme.replay.db import Database
from mneme.replay.engine import ReplayConfig, replay
from mneme.replay.engine.verify import Tolerance
from mneme.replay.jit import CompileConfig
from mneme.runtime import driver_available
from record_support import PROGRAMS, executable, mneme_record

pytestmark = pytest.mark.gpu
# float atomicAdd order differs between runs: those results are not bit-reproducible
NONDETERMINISTIC = {"atomics"}
# expf/sqrt/__fdividef: our O3 pipeline and libdevice link contract and round differently
# from the application's own clang build (measured: 56 of 18,648 bytes differ on the H100),
# so these are verified within float32 tolerances, as a user would annotate them.
TOLERANT = {"math_functions": Tolerance("float32", atol=1e-6, rtol=1e-5)}
PROGRAMS_REPLAYED = sorted(set(PROGRAMS) - {"crash_after_launch", "large_working_set"})


@pytest.fixture(scope="module", autouse=True)
def _gpu():
    if not driver_available():
        pytest.skip("no usable CUDA driver")


@pytest.mark.parametrize("name", PROGRAMS_REPLAYED)
def test_recorded_instances_replay_bit_exact(tmp_path, name):
    exe = executable(name, tmp_path)
    db_path = tmp_path / "rec.rdb"
    assert mneme_record(db_path, exe).returncode == PROGRAMS[name].expect_exit
    instances = list(Database.open(db_path).instances())
    assert instances
    failures = []
    for inst in instances:
        tolerance = TOLERANT.get(name)
        config = ReplayConfig(tolerances={r.name: tolerance for r in inst.regions
                                          if r.kind == "heap" and r.size % 4 == 0} if tolerance else {})
        result = replay(inst, CompileConfig.for_level("O3", arch="sm_90"), config)
        if result.verified is not True:
            failures.append(f"{inst.id} {inst.kernel.demangled_name}: "
                            + "; ".join(str(m.to_dict()) for m in result.mismatches[:2]))
    if name in NONDETERMINISTIC and failures:
        pytest.xfail("; ".join(failures))
    assert failures == []

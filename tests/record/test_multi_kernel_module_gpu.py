"""Every instance of a multi-kernel module replayed verified in one process (issue 35 item 1).

lut_kernels: six kernels of one .cu reading a __device__ lookup table. In one process, a
device error between replays (a driver error rethrown through the LLVM module's exception
translator, as bind_module's lookup of a global raises) used to leave every later kernel
"left inconsistent by an earlier LLVM error"; the table must be found in every kernel's
compiled module.
"""

from __future__ import annotations

import pytest
from mneme.replay.db import Database
from mneme.replay.engine import ReplayConfig, ReplaySession
from mneme.replay.jit import CompileCache, CompileConfig
from mneme.runtime import Device, DriverError, driver_available
from record_support import executable, mneme_record

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def device():
    if not driver_available():
        pytest.skip("no usable CUDA driver")
    return Device(0)


def test_every_instance_of_a_multi_kernel_module_replays_verified_in_one_process(tmp_path, device):
    exe = executable("lut_kernels", tmp_path)
    db_path = tmp_path / "rec.rdb"
    recorded = mneme_record(db_path, exe)
    assert recorded.returncode == 0, recorded.stderr[-2000:]
    instances = list(Database.open(db_path).instances())
    assert len({i.kernel.static_hash for i in instances}) == 6
    cache = CompileCache(None)  # one cache for all, as a script or a tuner worker keeps it
    failures = []
    for round_ in range(2):  # the second round after every kernel's module is loaded
        for inst in instances:
            with ReplaySession(inst, device=device, cache=cache if round_ else None) as session:
                result = session.run(CompileConfig.for_level("O3"), ReplayConfig(iterations=2))
                # a driver error through the exception translators, as bind_module meets one
                loaded = next(iter(session._loaded.values()))
                with pytest.raises(DriverError):
                    loaded.module.global_address("no_such_global")
            missing = [n for n in result.notes if "is not in the compiled module" in n]
            if result.verified is not True or missing:
                failures.append(f"{inst.kernel.demangled_name}: verified {result.verified}; "
                                f"{'; '.join(missing)} {result.mismatches[:1]}")
    assert failures == []

"""KernelTimer (CUPTI) and GpuClocks (NVML): the one-line fallbacks where they cannot be
used, the ABI declared in cupti_abi.hpp against the toolkit's header, and (GPU) real
kernel records."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mneme.runtime import _native, driver_available
from mneme.runtime.kernel_timing import (
    EVENTS,
    SAMPLE_REUSE_S,
    GpuMonitor,
    TimeSummary,
    cupti_wheel_libraries,
    fallback_line,
    kernel_timer,
    nvml_index,
)

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "packages" / "mneme-runtime" / "native"


def _run(code: str, **env: str) -> str:
    """Python code in a fresh process (KernelTimer is process-wide and loads once)."""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, **env}, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_missing_library_named_by_the_user_is_one_line():
    out = _run("from mneme.runtime.kernel_timing import kernel_timer\n"
               "t = kernel_timer(); print(t.start(), '|', t.reason, '|', t.available)",
               MNEME_CUPTI_LIBRARY="/nonexistent/libcupti.so")
    started, reason, available = (s.strip() for s in out.split("|"))
    assert started == "False" and available == "False"
    assert reason.startswith("MNEME_CUPTI_LIBRARY=/nonexistent/libcupti.so cannot be loaded")
    assert "\n" not in reason
    assert fallback_line(reason).startswith("events (CUPTI unusable: MNEME_CUPTI_LIBRARY=")


def test_search_order_env_then_wheels_then_toolkit():
    out = _run("from mneme.runtime.kernel_timing import kernel_timer\n"
               "import json; print(json.dumps(kernel_timer().candidates()))",
               MNEME_CUPTI_LIBRARY="/chosen/libcupti.so", CUDA_HOME="/opt/cuda-x")
    import json

    candidates = json.loads(out)
    assert candidates[0] == "/chosen/libcupti.so"
    wheels = cupti_wheel_libraries()
    assert candidates[1 : 1 + len(wheels)] == wheels
    toolkit = candidates.index("/opt/cuda-x/extras/CUPTI/lib64/libcupti.so*")
    assert toolkit == 1 + len(wheels)
    assert candidates[-3:] == ["libcupti.so", "libcupti.so.13", "libcupti.so.12"]


def test_drain_before_start_is_empty_and_method_is_cupti():
    timer = kernel_timer()
    assert _native.KernelTimer.method() == "cupti"
    if not timer.collecting:
        assert timer.drain() == []


@pytest.mark.skipif(driver_available(), reason="checks the machine without a driver")
def test_no_driver_reason():
    from mneme.runtime.kernel_timing import start_cupti

    assert start_cupti() == (False, "no CUDA driver")


def test_nvml_absent_or_present_answers_in_one_line():
    monitor = GpuMonitor(0)
    if monitor.available:
        monitor.begin()
        state = monitor.end()
        assert state is not None and state.sm_clock_mhz > 0
    else:
        assert monitor.reason.startswith("NVML not")
        assert "\n" not in monitor.reason
        monitor.begin()
        assert monitor.end() is None


@pytest.mark.gpu
def test_back_to_back_measurements_share_their_nvml_samples():
    """A sample costs 3-4 ms of NVML calls on an H100 (most of a short replay): the tuner's
    back-to-back measurements reuse one for SAMPLE_REUSE_S; energy only where both samples
    bound a measurement that long."""
    monitor = GpuMonitor(0)
    if not monitor.available:
        pytest.skip(monitor.reason)
    real, taken = monitor.clocks, []

    class Counted:  # the real NVML sampler, its calls counted
        available = True

        def sample(self, index):
            taken.append(index)
            return real.sample(index)

    monitor.clocks = Counted()
    for _ in range(20):
        monitor.begin()
        state = monitor.end()
        assert state is not None and state.sm_clock_mhz > 0 and state.energy_mj is None
    assert len(taken) <= 2, taken
    time.sleep(SAMPLE_REUSE_S)
    monitor.begin()
    time.sleep(SAMPLE_REUSE_S)
    state = monitor.end()
    assert len(taken) <= 4 and state.sm_clock_mhz > 0
    if real.sample(monitor.index).has_energy:
        assert state.energy_mj is not None and state.energy_mj >= 0


def test_nvml_index_follows_numeric_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert nvml_index(0) == 3 and nvml_index(1) == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1234")
    assert nvml_index(0) == 0


def test_time_summary():
    s = TimeSummary.of([4.0, 1.0, 2.0, 3.0, 100.0])
    assert (s.median_ms, s.min_ms, s.max_ms, s.count) == (3.0, 1.0, 100.0, 5)
    assert s.p25_ms == 2.0 and s.p75_ms == 4.0
    assert TimeSummary.of([]) is None
    assert TimeSummary.of([2.5]).p75_ms == 2.5
    assert EVENTS == "events"


def _cupti_header() -> Path | None:
    for root in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if not root:
            continue
        for sub in ("extras/CUPTI/include", "include"):
            if (Path(root) / sub / "cupti_activity.h").exists():
                return Path(root) / sub
    return None


@pytest.mark.skipif(_cupti_header() is None, reason="no CUPTI headers on this machine")
def test_declared_abi_matches_the_toolkit_header(tmp_path):
    """cupti_abi.hpp declares CUPTI's layouts itself (no headers needed to build): they
    must be the real header's."""
    compiler = shutil.which("clang++-22") or shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("no C++ compiler")
    source = tmp_path / "check.cpp"
    source.write_text("""
#include <cstddef>
#include <cupti_activity.h>
#include "cupti_abi.hpp"
namespace c = mneme::runtime::cupti;
using K = CUpti_ActivityKernel10;
#define SAME(ours, theirs) static_assert(offsetof(c::KernelActivity, ours) == offsetof(K, theirs), #ours);
SAME(start, start) SAME(end, end) SAME(device_id, deviceId) SAME(stream_id, streamId)
SAME(grid_x, gridX) SAME(grid_z, gridZ) SAME(block_x, blockX) SAME(block_z, blockZ)
SAME(dynamic_shared_memory, dynamicSharedMemory) SAME(correlation_id, correlationId) SAME(name, name)
static_assert(c::kConcurrentKernel == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
static_assert(c::kFlushForced == CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
static_assert(c::kErrorMultipleSubscribers == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED);
static_assert(c::kErrorMaxLimitReached == CUPTI_ERROR_MAX_LIMIT_REACHED);
static_assert(c::kErrorInsufficientPrivileges == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES);
static_assert(sizeof(CUptiResult) == sizeof(c::Result));
int main() {}
""")
    cuda_include = Path("/usr/local/cuda/include")
    result = subprocess.run(
        [compiler, "-std=c++20", "-fsyntax-only", f"-I{_cupti_header()}", f"-I{cuda_include}",
         f"-I{NATIVE / 'src'}", str(source)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.gpu
def test_cupti_times_real_kernels(device):
    """Ten launches give ten records of the kernel's name and shape, each shorter than the
    events around all of them."""
    from mneme.runtime import DEFAULT_BASE
    from mneme.runtime.kernel_timing import start_cupti

    started, reason = start_cupti()
    assert started, reason
    module = device.load_module((Path(__file__).parent / "kernels.ptx").read_text())
    kernel = module.function("vector_add")
    n = 1 << 22
    timer = kernel_timer()
    with device.address_space(DEFAULT_BASE, 1 << 30) as space:
        buffers = [space.allocate(n * 4) for _ in range(3)]
        stream = device.stream()
        timer.drain()
        start, end = device.event(), device.event()
        start.record(stream)
        for _ in range(10):
            kernel(n // 256, 256, *buffers, n, stream=stream)
        end.record(stream)
        end.synchronize()
        records = [r for r in timer.drain() if r.name == "vector_add"]
    assert len(records) == 10
    assert all(r.grid == (n // 256, 1, 1) and r.block == (256, 1, 1) for r in records)
    assert all(0 < r.duration_ms for r in records)
    assert sum(r.duration_ms for r in records) <= start.elapsed_ms(end)

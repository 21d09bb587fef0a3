"""The device layer on a real CUDA GPU (skipped without a driver).

Self-contained: only numpy and mneme.runtime. The kernels are hand-written PTX
(kernels.ptx), so no compiler is needed to run these.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from mneme.runtime import (
    DEFAULT_BASE,
    AddressSpace,
    Device,
    DriverError,
    RangeUnavailableError,
)

pytestmark = pytest.mark.gpu

MiB, GiB = 1 << 20, 1 << 30
PTX = (Path(__file__).parent / "kernels.ptx").read_text()


@pytest.fixture
def space(device: Device):
    with device.address_space(DEFAULT_BASE, 4 * GiB) as s:
        yield s


@pytest.fixture(scope="module")
def module(device: Device):
    return device.load_module(PTX)


def test_properties(device: Device):
    p = device.properties
    assert p.backend == "cuda" and p.name
    assert p.compute_capability_major >= 5
    assert p.multiprocessor_count > 0 and p.max_threads_per_block >= 1024
    assert p.l2_cache_size > 0 and p.total_memory > 0
    assert p.virtual_memory_management
    assert p.granularity > 0 and p.granularity & (p.granularity - 1) == 0
    assert p.driver_version >= 12000
    free, total = device.memory_info()
    assert 0 < free <= total


def test_reserves_exactly_the_fixed_address(device: Device, space: AddressSpace):
    assert space.granularity == device.properties.granularity
    first = space.allocate(1000)
    assert first.address == DEFAULT_BASE
    with pytest.raises(RangeUnavailableError, match="cannot reserve"):
        device.address_space(DEFAULT_BASE, 2 * MiB)


def test_host_device_round_trip(device: Device, space: AddressSpace):
    data = np.random.default_rng(1).integers(0, 2**32, 3 * MiB // 4 + 17, dtype=np.uint32)
    buffer = space.allocate(data.nbytes)
    device.copy_to_device(buffer, data)
    assert np.array_equal(device.read(buffer, data.shape, data.dtype), data)
    device.copy_to_device(buffer.address + 8, b"\x01\x02\x03\x04")
    assert bytes(device.read(buffer.address + 8, 4)) == b"\x01\x02\x03\x04"


def test_device_to_device_and_fill(device: Device, space: AddressSpace):
    src, dst = space.allocate(5 * MiB), space.allocate(5 * MiB)
    data = np.arange(5 * MiB // 8, dtype=np.int64)
    device.copy_to_device(src, data)
    device.copy_device_to_device(dst, src, data.nbytes)
    assert np.array_equal(device.read(dst, data.shape, np.int64), data)
    device.fill(dst, 0xAB, 1000)
    out = device.read(dst, 1008)
    assert (out[:1000] == 0xAB).all() and out[1000:].tobytes() == data.view(np.uint8)[
        1000:1008
    ].tobytes()


def test_async_copies_with_pinned_memory(device: Device, space: AddressSpace):
    stream = device.stream()
    host_in = device.pinned_array(1 << 20, np.float32)
    host_in[:] = np.linspace(0, 1, host_in.size, dtype=np.float32)
    host_out = device.pinned_array(1 << 20, np.float32)
    buffer = space.allocate(host_in.nbytes)
    device.copy_to_device(buffer, host_in, stream=stream)
    device.copy_from_device(host_out, buffer, stream=stream)
    stream.synchronize()
    assert np.array_equal(host_in, host_out)


def test_vector_add_kernel_with_raw_argument_buffer(device: Device, space: AddressSpace, module):
    n = 1_000_003
    rng = np.random.default_rng(2)
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    da, db, dout = (space.allocate(n * 4) for _ in range(3))
    device.copy_to_device(da, a)
    device.copy_to_device(db, b)
    kernel = module.function("vector_add")
    # The buffer exactly as a recording holds it: three pointers and a u32.
    args = struct.pack("<QQQI", da.address, db.address, dout.address, n)
    kernel.launch(-(-n // 256), 256, args)
    device.synchronize()
    assert np.array_equal(device.read(dout, n, np.float32), a + b)
    assert kernel.pack_arguments(da, db, dout, n) == args


def test_parameter_info_and_attributes(module):
    mixed = module.function("mixed_params")
    assert [(p.offset, p.size) for p in mixed.params] == [(0, 1), (8, 8), (16, 4), (32, 32)]
    add = module.function("vector_add")
    assert [(p.offset, p.size) for p in add.params] == [(0, 8), (8, 8), (16, 8), (24, 4)]
    attributes = add.attributes
    assert attributes.num_registers > 0
    assert attributes.local_size_bytes == 0
    assert attributes.shared_size_bytes == 0
    assert attributes.max_threads_per_block >= 256
    # measured on the H100 host: the driver reports the PTX target (.target sm_52), not .version 7.0
    assert attributes.ptx_version == 52


def test_module_globals(device: Device, space: AddressSpace, module):
    address, size = module.global_address("bias")
    assert size == 4
    module.set_global("bias", np.array([41], dtype=np.uint32))
    assert module.get_global("bias", np.uint32)[0] == 41
    data = space.allocate(256 * 4)
    device.copy_to_device(data, np.arange(256, dtype=np.uint32))
    module.function("add_bias")(1, 256, data, 256)
    device.synchronize()
    assert np.array_equal(device.read(data, 256, np.uint32), np.arange(256) + 41)


def test_unknown_kernel_and_bad_ptx_are_driver_errors(device: Device, module):
    with pytest.raises(DriverError, match="no kernel named 'nope'"):
        module.function("nope")
    with pytest.raises(DriverError, match="cuModuleLoadDataEx failed: CUDA_ERROR") as info:
        device.load_module(".version 7.0\n.target sm_52\n.address_size 64\nthis is not ptx\n")
    assert info.value.name.startswith("CUDA_ERROR_")
    assert not getattr(DriverError, "mneme_user_error", False)


def test_cubin_loads_too(device: Device, tmp_path):
    ptxas = shutil.which("ptxas") or "/usr/local/cuda/bin/ptxas"
    if not Path(ptxas).exists():
        pytest.skip("ptxas not installed")
    p = device.properties
    arch = f"sm_{p.compute_capability_major}{p.compute_capability_minor}"
    (tmp_path / "k.ptx").write_text(PTX)
    subprocess.run(
        [ptxas, f"-arch={arch}", "-o", str(tmp_path / "k.cubin"), str(tmp_path / "k.ptx")],
        check=True,
    )
    cubin = (tmp_path / "k.cubin").read_bytes()
    assert cubin[:4] == b"\x7fELF"
    kernel = device.load_module(cubin).function("vector_add")
    assert len(kernel.params) == 4


def test_events_time_a_kernel(device: Device, space: AddressSpace, module):
    n = 1 << 24
    buffers = [space.allocate(n * 4) for _ in range(3)]
    kernel = module.function("vector_add")
    stream = device.stream()
    start, end = device.event(), device.event()
    start.record(stream)
    for _ in range(10):
        kernel(n // 256, 256, *buffers, n, stream=stream)
    end.record(stream)
    end.synchronize()
    elapsed = start.elapsed_ms(end)
    # 10 x 3 x 64 MiB moved: well above zero, well below a second on any GPU.
    assert 0.01 < elapsed < 1000


def test_alloc_free_cycles_leak_no_device_memory(device: Device):
    with device.address_space(DEFAULT_BASE, 4 * GiB) as space:
        space.free(space.allocate(64 * MiB))  # warm up the driver's own pools
        device.synchronize()
        free_before, _ = device.memory_info()
        for i in range(100):
            blocks = [space.allocate(size) for size in (300, 3 * MiB, 17 * MiB + 5, 1 << 10)]
            device.fill(blocks[1], i & 0xFF, 3 * MiB)
            for block in blocks:
                space.free(block)
        device.synchronize()
        assert space.stats().mapped_bytes == 0
        assert space.stats().allocations_total == 401
        free_after, _ = device.memory_info()
    assert free_after >= free_before - 2 * MiB, (free_before, free_after)
    # Closing the space gives the range back too.
    device.address_space(DEFAULT_BASE, 4 * GiB).close()

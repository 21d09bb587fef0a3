"""Restore's device path (nvCOMP) against the host path on the GPU: random, compressible,
all-zero and partly missing chunks, partial last chunks, a destination nvCOMP cannot
write in place, XOR epilogues; and the fallback when nvCOMP does not load. Skipped by the
``device`` fixture without a GPU."""

from __future__ import annotations

import numpy as np
import pytest
from mneme.replay.db import Database, DatabaseWriter, KernelRecord
from mneme.replay.engine import DeviceVerifier, device_decompress, device_restore
from mneme.replay.engine.restore import DeviceImage
from replay_support import INFO, SAXPY, heap, static_hash

pytestmark = pytest.mark.gpu

CHUNK = 64 << 10
BASE = INFO.vas_base


def _record():
    from mneme.replay.db import InstanceRecord

    rng = np.random.default_rng(22)
    random = rng.integers(0, 256, 9 * CHUNK + 1234, dtype=np.uint8)  # partial last chunk
    compressible = np.repeat(rng.integers(0, 4, (20 * CHUNK) // 64, dtype=np.uint8), 64)
    zeros = np.zeros(6 * CHUNK + 8, np.uint8)
    odd = rng.integers(0, 256, 3 * CHUNK, dtype=np.uint8)  # at an address nvCOMP refuses
    random_after = random.copy()
    random_after[-100:] ^= 0x5A  # only the partial last chunk of the delta is stored
    compressible_after = compressible.copy()
    compressible_after[::4096] += 1  # every chunk of the delta stored
    zeros_after = zeros.copy()
    zeros_after[3 * CHUNK + 1] = 9
    addresses = (BASE, BASE + (2 << 20), BASE + (4 << 20), BASE + (6 << 20) + 4)
    before = (random, compressible, zeros, odd)
    after = (random_after, compressible_after, zeros_after, odd)
    return InstanceRecord(
        grid=(1, 1, 1), block=(1, 1, 1), args=bytes(32),
        prologue=tuple(heap(a, d) for a, d in zip(addresses, before, strict=True)),
        epilogue=tuple(heap(a, d) for a, d in zip(addresses, after, strict=True)),
    )


@pytest.fixture(scope="module")
def instances(tmp_path_factory):
    """The same instance twice: epilogues stored as XOR deltas (diff) and as bytes."""
    work = tmp_path_factory.mktemp("nvcomp-db")
    # restore never compiles (and the GPU host has no clang): the kernel is stored as PTX text
    kernel = KernelRecord(static_hash(SAXPY), SAXPY, b"// restore test: never compiled\n",
                          "saxpy(float, float const*, float*, int)", code="ptx")
    out = []
    for fmt in ("diff", "bytes"):
        path = work / f"{fmt}.rdb"
        with DatabaseWriter.create(path, INFO, chunk_size=CHUNK, epilogue_format=fmt) as writer:
            writer.add_kernel(kernel)
            writer.add_instance(static_hash(SAXPY), _record())
        out.append(next(Database.open(path).instances()))
    return out


def _contents(device, image, instance) -> dict:
    got = {}
    for region in instance.regions:
        got[("prologue", region.name)] = device.read(int(region.address), region.size)
        got[("epilogue", region.name)] = device.read(image.expected[region.name], region.size)
    return got


@pytest.mark.parametrize("max_chunks", [5, device_restore.MAX_CHUNKS])
def test_device_path_equals_host_path(device, instances, monkeypatch, max_chunks):
    if not any(p.is_file() for p in device_decompress.library_candidates()):
        pytest.skip("nvidia-libnvcomp-cu13 is not installed")
    monkeypatch.setattr(device_restore, "MAX_CHUNKS", max_chunks)  # many batches, both slots
    verifier = DeviceVerifier(device, "sm_{}{}".format(*device.compute_capability))
    for instance in instances:
        seen = {}
        for mode in ("host", "device"):
            with DeviceImage(device, instance.kernel.db.info, instance, verifier=verifier,
                             decompress=mode) as image:
                assert image.restore_path == ("nvcomp" if mode == "device" else "host")
                seen[mode] = _contents(device, image, instance)
        for key, host in seen["host"].items():
            name = key[1]
            want = instance.prologue(name) if key[0] == "prologue" else instance.epilogue(name)
            assert (host == want).all(), key
            assert (seen["device"][key] == host).all(), key


def test_small_instances_restore_on_the_host(device, instances):
    """Under "auto" an instance below NVCOMP_MIN_BYTES never loads nvCOMP (its first use
    places the driver's code where a later instance's mapped memory must go)."""
    instance = instances[0]
    with DeviceImage(device, instance.kernel.db.info, instance) as image:
        assert image.restore_path == "host" and image.restore_note == ""


def test_unloadable_nvcomp_falls_back_with_one_line(device, instances, monkeypatch, tmp_path):
    from mneme.replay.engine import device_restore

    monkeypatch.setattr(device_restore, "NVCOMP_MIN_BYTES", 0)
    monkeypatch.setenv("MNEME_NVCOMP", str(tmp_path / "absent.so"))
    device_decompress.load.cache_clear()
    try:
        verifier = DeviceVerifier(device, "sm_{}{}".format(*device.compute_capability))
        instance = instances[0]
        with DeviceImage(device, instance.kernel.db.info, instance, verifier=verifier) as image:
            assert image.restore_path == "host"
            assert "\n" not in image.restore_note and "absent.so" in image.restore_note
            got = _contents(device, image, instance)
        region = instance.regions[0]
        assert (got[("epilogue", region.name)] == instance.epilogue(region.name)).all()
    finally:
        device_decompress.load.cache_clear()


def test_forced_host_restore(device, instances, monkeypatch):
    monkeypatch.setenv("MNEME_RESTORE", "host")
    instance = instances[1]
    with DeviceImage(device, instance.kernel.db.info, instance) as image:
        assert image.restore_path == "host" and "MNEME_RESTORE=host" in image.restore_note

"""The verification module's kernels on the device against their host references:
exact and tolerant comparison, the multiset digest (order-insensitive regions) and the XOR
that restore resolves epilogues with.

In a module of their own, ahead of test_replay_gpu.py: on the H200 host, after the golden
replays at 0x7f0000000000 released their range, the driver answered every later fixed
reservation in that process with that range (0x230000000000 included; a fresh process
gets it). Every test here is skipped by the ``device`` fixture without a GPU.
"""

from __future__ import annotations

import numpy as np
import pytest
from mneme.replay.engine import DeviceVerifier, RegionCheck, Tolerance, reference_words
from mneme.replay.engine.verify import initial_words
from mneme.replay.engine.verify_kernels import MULTISET_WIDTHS, RESULT_BYTES, multiset_digest_host

pytestmark = pytest.mark.gpu


def test_device_verifier_matches_the_reference(device):
    rng = np.random.default_rng(7)
    n = 1 << 16
    expected = rng.normal(size=n).astype(np.float32)
    actual = expected.copy()
    actual[rng.choice(n, 300, replace=False)] *= np.float32(1.001)
    actual[12345] = np.nan
    with device.address_space(0x230000000000, 64 << 20) as space:
        a = space.allocate(actual.nbytes)
        b = space.allocate(expected.nbytes)
        out = space.allocate(RESULT_BYTES)
        device.copy_to_device(a, actual)
        device.copy_to_device(b, expected)
        verifier = DeviceVerifier(device, "sm_{}{}".format(*device.compute_capability))
        for tolerance in (
            Tolerance(),
            Tolerance("float32"),
            Tolerance("float32", rtol=5e-4),
            Tolerance("float32", atol=1e-2, norm="l2"),
            Tolerance("float32", atol=1e-2, norm="max"),
        ):
            check = RegionCheck("r", int(a), int(b), actual.nbytes, tolerance, int(a))
            words = verifier.raw_words(check, int(out))
            want = reference_words(actual, expected, check.plan, tolerance)
            assert list(words[:3]) == list(want[:3]), tolerance
            for index in (3, 4):  # float sums: the order differs
                assert words[index].view(np.float64) == pytest.approx(
                    want[index].view(np.float64), rel=1e-9
                )
            assert words[5] == want[5]
        assert initial_words(1)[0, 1] == 2**64 - 1


def test_device_multiset_digest_matches_the_reference(device):
    """The order-insensitive comparison on the device computes what the host reference
    does (tests/replay/test_replay_verify.py checks the reference's semantics)."""
    rng = np.random.default_rng(11)
    data = rng.integers(0, 256, size=1 << 20, dtype=np.uint8)
    with device.address_space(0x230000000000, 64 << 20) as space:
        buffer = space.allocate(data.nbytes)
        out = space.allocate(RESULT_BYTES)
        device.copy_to_device(buffer, data)
        verifier = DeviceVerifier(device, "sm_{}{}".format(*device.compute_capability))
        for width in MULTISET_WIDTHS:
            assert verifier.multiset_digest(int(buffer), data.nbytes, width, int(out)) == \
                multiset_digest_host(data, width), width
        with pytest.raises(ValueError, match="aligned"):
            verifier.multiset_digest(int(buffer) + 4, 64, 16, int(out))


@pytest.mark.parametrize("tolerance", [Tolerance(), Tolerance("float32", rtol=1e-3)],
                         ids=["exact", "float32"])
def test_a_long_range_checks_against_a_short_repeating_zero_buffer(device, tolerance):
    """A sparse region's zero range is one check against a small zero buffer that the
    kernel reads over and over (``period``): clean, it verifies; one byte written anywhere
    in it, even past the first period, is found at its offset."""
    size, period = 48 << 20, 1 << 20
    with device.address_space(0x230000000000, 64 << 20) as space:
        actual = space.allocate(size)
        zeros = space.allocate(period)
        out = space.allocate(RESULT_BYTES)
        device.fill(actual, 0, size)
        device.fill(zeros, 0, period)
        verifier = DeviceVerifier(device, "sm_{}{}".format(*device.compute_capability))
        check = RegionCheck("pool", int(actual), int(zeros), size, tolerance, 0x7000_0000_0000, period)
        assert verifier.run([check], int(out)) == []
        stray = 37 * period + 4099 * 4 + 1  # past the first period; a float32's second byte
        device.copy_to_device(int(actual) + stray, np.array([0x40], np.uint8))
        [found] = verifier.run([check], int(out))
        assert found.count == 1
        assert found.first_offset == (stray if not check.plan.typed else stray // 4 * 4)


@pytest.mark.parametrize("nbytes, offset", [(1 << 20, 0), (1_000_003, 0), (4099, 3)])
def test_device_xor_matches_numpy(device, nbytes, offset):
    """Restore resolves XOR-encoded epilogues with this kernel: 8-byte words where both
    sides are aligned, bytes for the rest (or all of it when they are not)."""
    rng = np.random.default_rng(nbytes)
    a = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
    b = rng.integers(0, 256, size=nbytes, dtype=np.uint8)
    with device.address_space(0x230000000000, 64 << 20) as space:
        dst = space.allocate(nbytes + 16)
        src = space.allocate(nbytes + 16)
        device.copy_to_device(int(dst) + offset, a)
        device.copy_to_device(int(src), b)
        verifier = DeviceVerifier(device, "sm_{}{}".format(*device.compute_capability))
        verifier.xor_into(int(dst) + offset, int(src), nbytes)
        got = np.empty(nbytes, dtype=np.uint8)
        device.copy_from_device(got, int(dst) + offset)
        assert np.array_equal(got, a ^ b)

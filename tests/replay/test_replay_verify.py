"""Verification semantics (numpy reference of the device kernels) and the kernels' IR."""

import numpy as np
import pytest
from mneme.replay.engine import (
    Mismatch,
    ReplayConfigError,
    Tolerance,
    plan_check,
    reference_words,
    verify_host,
)
from mneme.replay.engine import determinism as nd
from mneme.replay.engine.verify import verification_cubin
from mneme.replay.engine.verify_kernels import (
    MULTISET_WIDTHS,
    TYPED_DTYPES,
    multiset_digest_host,
    multiset_kernel_name,
    raw_kernel_name,
)
from mneme.replay.jit import kernel_names, parse_module, parse_ptxas_report


def test_identical_regions_verify():
    data = np.arange(1000, dtype=np.float32)
    assert verify_host(data, data) is None
    assert verify_host(data, data, Tolerance("float32", atol=0.1)) is None
    assert verify_host(data, data, Tolerance("float32", norm="l2")) is None


def test_bit_exact_counts_bytes_and_finds_the_first():
    expected = np.zeros(4096, dtype=np.uint8)
    actual = expected.copy()
    actual[[1001, 1003, 4000]] = [1, 2, 3]
    found = verify_host(actual, expected, region="r", address=0x1000)
    assert found == Mismatch("r", 0x1000, 4096, "bytes", 3, 1001)
    assert "3 bytes differ, first at offset 1001" in found.describe()


@pytest.mark.parametrize("address", [0x1000, 0x1004, 0x1002, 0x1001])
def test_raw_width_follows_alignment_and_offsets_stay_in_bytes(address):
    expected = np.zeros(64, dtype=np.uint8)
    actual = expected.copy()
    actual[13] = 9
    plan = plan_check(Tolerance(), 64, address)
    width = {0: 8, 4: 4, 2: 2, 1: 1}[address & 7]
    assert plan.kernel == raw_kernel_name(width) and plan.count == 64 // width
    assert verify_host(actual, expected, address=address).first_offset == 13


def test_elementwise_tolerance_in_float32():
    expected = np.linspace(-1, 1, 500, dtype=np.float32)
    actual = expected * np.float32(1 + 1e-6)
    tolerance = Tolerance("float32", atol=0.0, rtol=1e-5)
    assert verify_host(actual, expected, tolerance) is None
    assert verify_host(actual, expected) is not None  # bit-exact sees the change
    actual[321] += 0.5
    found = verify_host(actual, expected, tolerance)
    assert found.unit == "float32" and found.count == 1
    assert found.first_offset == 321 * 4
    assert found.max_error == pytest.approx(0.5, rel=1e-3)


def test_nan_matches_nan_and_nothing_else():
    expected = np.array([1.0, np.nan, 3.0, 4.0], dtype=np.float64)
    tolerance = Tolerance("float64", atol=1e-9)
    assert verify_host(expected.copy(), expected, tolerance) is None
    actual = expected.copy()
    actual[2] = np.nan
    found = verify_host(actual, expected, tolerance)
    assert found.count == 1 and found.first_offset == 16 and found.max_error == np.inf


def test_norms():
    expected = np.ones(10000, dtype=np.float32)
    actual = expected.copy()
    actual[::100] += np.float32(1e-3)  # 100 elements off by 1e-3: l2 error 1e-2
    assert verify_host(actual, expected, Tolerance("float32", rtol=2e-4, norm="l2")) is None
    found = verify_host(actual, expected, Tolerance("float32", rtol=5e-5, norm="l2"))
    assert found.count == 100 and found.norm_error == pytest.approx(1e-2, rel=1e-3)
    assert found.norm_bound == pytest.approx(5e-5 * 100, rel=1e-6)
    assert verify_host(actual, expected, Tolerance("float32", atol=2e-3, norm="max")) is None
    assert verify_host(actual, expected, Tolerance("float32", atol=5e-4, norm="max")) is not None


def test_integers_and_complex_compare_as_numbers():
    expected = np.arange(100, dtype=np.int16)
    actual = expected.copy()
    actual[50] += 2
    assert verify_host(actual, expected, Tolerance("int16", atol=2)) is None
    assert verify_host(actual, expected, Tolerance("int16", atol=1)).first_offset == 100
    z = np.arange(8, dtype=np.complex64)
    plan = plan_check(Tolerance("complex64", atol=1e-6), z.nbytes, 0)
    assert plan.dtype == "float32" and plan.count == 16


def test_tolerance_needs_whole_aligned_elements():
    with pytest.raises(ReplayConfigError, match="not a whole number of float32"):
        plan_check(Tolerance("float32", atol=1e-3), 10, 0)
    with pytest.raises(ReplayConfigError, match="not aligned"):
        plan_check(Tolerance("float64", atol=1e-3), 16, 4)
    # exact checks fall back to raw bytes instead
    assert not plan_check(Tolerance("float32"), 10, 0).typed


def test_tolerance_validation_and_round_trip():
    tolerance = Tolerance("f4", atol=1, rtol=0.5, norm="l2")
    assert tolerance.dtype == "float32" and tolerance.atol == 1.0
    assert Tolerance.from_dict(tolerance.to_dict()) == tolerance
    with pytest.raises(ReplayConfigError, match="needs the dtype"):
        Tolerance(atol=1e-3)
    with pytest.raises(ReplayConfigError, match="norm must be"):
        Tolerance("float32", norm="l1")
    with pytest.raises(ReplayConfigError, match="finite and >= 0"):
        Tolerance("float32", atol=-1)
    with pytest.raises(ReplayConfigError, match="unknown dtype"):
        Tolerance("float99")


def test_reference_words_layout():
    expected = np.zeros(16, dtype=np.float32)
    actual = expected.copy()
    actual[3] = 2.0
    plan = plan_check(Tolerance("float32", atol=0.5, norm="l2"), 64, 0)
    words = reference_words(actual, expected, plan, Tolerance("float32", atol=0.5, norm="l2"))
    assert words[0] == 1 and words[1] == 3
    assert words[2].view(np.float64) == 2.0 and words[3].view(np.float64) == 4.0


def test_verification_kernels_compile_for_the_gpu():
    cubin = verification_cubin("sm_90")
    assert cubin[:4] == b"\x7fELF"
    from mneme.replay.engine.verify_kernels import verification_ir

    names = kernel_names(parse_module(verification_ir()))
    assert {f"mneme_verify_{d}" for d in TYPED_DTYPES} <= set(names)
    assert {raw_kernel_name(w) for w in (1, 2, 4, 8)} <= set(names)
    assert {multiset_kernel_name(w) for w in MULTISET_WIDTHS} <= set(names)
    assert parse_ptxas_report("") == {}


@pytest.mark.parametrize("width", MULTISET_WIDTHS)
def test_multiset_digest_ignores_order_and_sees_every_change(width):
    """The reference semantics of the device's order-insensitive comparison: any
    permutation of whole elements keeps the digest, any changed, added or moved-apart
    byte changes it, and it agrees with the host's sort-and-compare on random data."""
    rng = np.random.default_rng(width)
    data = rng.integers(0, 256, size=width * 4096, dtype=np.uint8)
    elements = data.reshape(-1, width)
    shuffled = elements[rng.permutation(len(elements))].reshape(-1)
    digest = multiset_digest_host(data, width)
    assert multiset_digest_host(shuffled, width) == digest
    changed = shuffled.copy()
    changed[rng.integers(changed.size)] ^= 1
    assert multiset_digest_host(changed, width) != digest
    # bytes moved across element boundaries: the same bytes, another multiset of elements
    rolled = np.roll(data, 1)
    assert multiset_digest_host(rolled, width) != digest
    # two elements swapped for a duplicate of one: sums of plain values could not tell
    duplicate = elements.copy()
    duplicate[1] = duplicate[0]
    assert multiset_digest_host(duplicate.reshape(-1), width) != digest
    for candidate in (shuffled, changed, rolled):
        same = nd.sorted_elements(candidate, width).tobytes() == nd.sorted_elements(data, width).tobytes()
        assert (multiset_digest_host(candidate, width) == digest) == same
    with pytest.raises(ValueError, match="whole number"):
        multiset_digest_host(data[:-1], width)

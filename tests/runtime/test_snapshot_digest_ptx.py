"""The recorder's chunk-digest kernel is checked in as PTX (snapshot_digest_ptx.inc):
it must be what snapshot_digest.cu compiles to, so a change to the source cannot be
forgotten in the kernel the recorder runs."""

import shutil

import pytest
from mneme.runtime import snapshot_digest


@pytest.mark.skipif(shutil.which("clang++-22") is None, reason="clang++-22 not installed")
def test_the_checked_in_ptx_is_the_source_compiled():
    assert snapshot_digest.GENERATED.read_text() == snapshot_digest.as_cpp(snapshot_digest.compile_ptx())


def test_the_kernel_needs_no_toolkit():
    ptx = snapshot_digest.GENERATED.read_text()
    assert ".visible .entry mneme_chunk_digest(" in ptx
    assert f".target {snapshot_digest.ARCH}" in ptx
    assert ".version 7.0" in ptx  # PTX_VERSION, whatever toolkit generated it
    assert "call" not in ptx.split("mneme_chunk_digest(", 1)[1]  # no libdevice, no calls

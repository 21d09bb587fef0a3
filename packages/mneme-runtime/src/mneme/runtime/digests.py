"""Chunk digests, as the recorder's C++ writer computes them (the native module's own
code): the Python writer (mneme.replay.db.content_store) names a content-store entry by
the same digest, so that both writers share a chunk either of them stored."""

from __future__ import annotations

from mneme.runtime import _native


def chunk_digest(data: bytes) -> str:
    """The digest of a chunk's raw (unpadded) bytes."""
    return _native.chunk_digest(data)


__all__ = ["chunk_digest"]

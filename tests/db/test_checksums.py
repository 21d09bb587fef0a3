"""CRC-32C combination: the checksum of A+B from A's, B's and B's length, as `check` folds
chunk checksums into region checksums."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from mneme.replay.db.hashing import combine_checksums, content_checksum


@settings(max_examples=200, deadline=None)
@given(a=st.binary(max_size=3000), b=st.binary(max_size=3000))
def test_combining_equals_checksumming_the_concatenation(a, b):
    whole = content_checksum(np.frombuffer(a + b, np.uint8))
    parts = combine_checksums(content_checksum(np.frombuffer(a, np.uint8)),
                              content_checksum(np.frombuffer(b, np.uint8)), len(b))
    assert parts == whole


def test_many_full_chunks_fold_to_the_region_checksum():
    data = np.random.default_rng(3).integers(0, 256, (4 << 20) * 3 + 12345, dtype=np.uint8)
    folded = 0
    for start in range(0, data.size, 4 << 20):
        piece = data[start:start + (4 << 20)]
        folded = combine_checksums(folded, content_checksum(piece), piece.size)
    assert folded == content_checksum(data)

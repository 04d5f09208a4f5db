"""How ranks divide the frames of a file they write: whole chunks, equal or weighted shares."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from h5mdtool.h5md.chunkwriter import STORE_COST, GatheredChunkWriter
from h5mdtool.parallel.mpi import chunk_aligned_slices


@settings(max_examples=300, deadline=None)
@given(n_items=st.integers(0, 500), chunk=st.integers(1, 40), weights=st.one_of(
    st.none(), st.lists(st.floats(0, 10), min_size=1, max_size=12).filter(lambda w: sum(w) > 0)))
def test_every_item_once_in_whole_chunks_and_in_proportion(n_items, chunk, weights):
    """Contiguous shares covering every item once, starting on chunk boundaries; weighted
    shares hold their weight's part of the chunks within one chunk, equal ones within one."""
    n_parts = 4 if weights is None else len(weights)
    slices = chunk_aligned_slices(n_items, chunk, n_parts, weights)
    assert len(slices) == n_parts
    assert slices[0][0] == 0 and slices[-1][1] == n_items
    for (_, stop), (start, _) in zip(slices, slices[1:]):
        assert stop == start
    for start, stop in slices:
        assert start <= stop and (start == n_items or start % chunk == 0)
    n_chunks = -(-n_items // chunk)
    counts = [-(-(stop - start) // chunk) if stop > start else 0 for start, stop in slices]
    assert sum(counts) == n_chunks
    if weights is None:
        assert max(counts) - min(counts) <= 1
    else:
        for count, weight in zip(counts, weights):
            assert abs(count - n_chunks * weight / sum(weights)) <= 1 + 1e-9


def test_weights_are_checked():
    with pytest.raises(ValueError):
        chunk_aligned_slices(10, 2, 2, [0, 0])
    with pytest.raises(ValueError):
        chunk_aligned_slices(10, 2, 3, [1, 1])


@pytest.mark.parametrize("n_ranks", [2, 3, 8, 9, 10, 384])
def test_rank_0_storing_every_chunk_takes_a_smaller_share(n_ranks):
    """Rank 0's share plus storing every rank's chunks equals another rank's share, until it takes none."""
    weights = GatheredChunkWriter.rank_weights(n_ranks)
    assert weights[1:] == [1.0] * (n_ranks - 1)
    total = sum(weights)
    root, other = weights[0] / total, 1 / total
    if weights[0] > 0:
        assert root + STORE_COST == pytest.approx(other)
    else:
        assert n_ranks - 1 >= 1 / STORE_COST

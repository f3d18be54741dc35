"""The pieces of split sequences (`prepare.pieces`): the one numbering both engines use."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from seqpack_cli.errors import InputError
from seqpack_cli.over_cap import cut_lengths
from seqpack_cli.prepare.pieces import first_piece_id, piece_ids_error, pieces_of

_sources = st.lists(st.integers(5, 200), min_size=0, max_size=30)


@given(_sources, st.integers(1, 4), st.integers(0, 10**6))
def test_pieces_cover_each_source_once_in_order(lengths: list[int], cap: int, first: int) -> None:
    """Every source's pieces start at 0, cap, 2*cap, ... and their lengths add up to the
    source's; the ids run from `first` with no gap."""
    array = np.array(lengths, dtype=np.int64)
    pieces, per_source = cut_lengths(array, cap)
    sources = np.arange(array.size, dtype=np.int64) * 3 + 11  # ascending ids
    within, table = pieces_of(sources, per_source, first, cap)
    assert table.shape == (int(per_source.sum()), 3) and table.dtype == np.int64
    assert table[:, 0].tolist() == list(range(first, first + table.shape[0]))
    assert table[:, 1].tolist() == np.repeat(sources, per_source).tolist()
    assert (table[:, 2] == within * cap).all()
    ends = table[:, 2] + pieces
    for source, length in zip(sources.tolist(), lengths, strict=True):
        mine = table[:, 1] == source
        assert table[mine, 2].tolist() == list(range(0, length, cap))
        assert int(ends[mine][-1]) == length


@given(_sources, st.integers(1, 4), st.integers(0, 30))
def test_chunked_numbering_equals_numbering_all_at_once(
    lengths: list[int], cap: int, cut: int
) -> None:
    """The Dask split tasks number their chunk of sources from the pieces before it: the tables
    of the chunks, back to back, are the local engine's table of all sources."""
    array = np.array(lengths, dtype=np.int64)
    _, per_source = cut_lengths(array, cap)
    sources = np.arange(array.size, dtype=np.int64)
    _, whole = pieces_of(sources, per_source, 100, cap)
    cut = min(cut, array.size)
    before = int(per_source[:cut].sum())
    _, head = pieces_of(sources[:cut], per_source[:cut], 100, cap)
    _, tail = pieces_of(sources[cut:], per_source[cut:], 100 + before, cap)
    assert np.array_equal(np.concatenate([head, tail]), whole)


def test_the_first_piece_id_and_the_ids_running_out() -> None:
    assert first_piece_id(None, 10**9, 42) == 42  # row indexes: past the last row
    assert first_piece_id("id", 99, 42) == 100
    assert first_piece_id("id", None, 0) == 0
    assert piece_ids_error("id", 2**63 - 2, 2) is None
    error = piece_ids_error("id", 2**63 - 2, 3)
    assert isinstance(error, InputError)
    assert "'id'" in str(error) and "id_column" in str(error) and "2**63" in str(error)

"""pack_stream: online best-fit decreasing over a bounded buffer."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.packing.online import pack_stream

Item = tuple[int, int]  # (item index, length): distinct items, so "exactly once" is checkable


def _length(item: Item) -> int:
    return item[1]


def _items(lengths: list[int]) -> list[Item]:
    return [(index, length) for index, length in enumerate(lengths)]


def _bfd_num_bins(lengths: list[int], max_seq_len: int) -> int:
    """Offline best-fit decreasing, the obvious quadratic way (the oracle)."""
    rooms: list[int] = []
    for length in sorted(lengths, reverse=True):
        fits = [i for i, room in enumerate(rooms) if room >= length]
        if fits:
            best = min(fits, key=lambda i: rooms[i])
            rooms[best] -= length
        else:
            rooms.append(max_seq_len - length)
    return len(rooms)


class _CountingSource:
    """An iterable that records how many items have been taken from it."""

    def __init__(self, items: list[Item]) -> None:
        self.items = items
        self.num_taken = 0

    def __iter__(self) -> Iterator[Item]:
        for item in self.items:
            self.num_taken += 1
            yield item


def test_golden_small_stream() -> None:
    # max_seq_len=10, buffer_size=4 (keep at most 2 items in open bins after a round).
    # Round 1 reads 6,5,3,4 and places them longest first: 6 -> new bin A (room 4),
    #   5 -> new bin B (room 5), 4 -> A (best fit, room 0: A is full), 3 -> B (room 2).
    #   A is full, so it is emitted: [6,4]; B's 2 items are within the half buffer kept open.
    # Round 2 reads 2,7 (2 pending + 2 held = 4): 7 -> new bin C (room 3), 2 -> B (the
    #   tightest fit, room 0): B is emitted: [5,3,2]; C (1 item) stays open.
    # End of stream: 1 -> C (room 2), and every open bin is emitted: [7,1].
    lengths = [6, 5, 3, 4, 2, 7, 1]
    bins = list(pack_stream(_items(lengths), 10, length_fn=_length, buffer_size=4))
    assert [[length for _, length in b] for b in bins] == [[6, 4], [5, 3, 2], [7, 1]]
    assert [[index for index, _ in b] for b in bins] == [[0, 3], [1, 2, 4], [5, 6]]


def test_default_length_fn_is_len_and_items_come_back_unchanged() -> None:
    token_lists = [[1] * 3, [2] * 5, [3] * 2, [4] * 4]
    bins = list(pack_stream(token_lists, 8))
    assert sorted(map(tuple, (item for b in bins for item in b))) == sorted(map(tuple, token_lists))
    assert all(sum(map(len, b)) <= 8 for b in bins)


def test_empty_stream_yields_nothing() -> None:
    assert list(pack_stream([], 16)) == []


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 64), max_size=300),
    max_seq_len=st.integers(64, 160),
    buffer_size=st.integers(1, 40),
    max_seqs_per_bin=st.none() | st.integers(1, 6),
)
def test_every_item_once_caps_respected_buffer_bounded(
    lengths: list[int], max_seq_len: int, buffer_size: int, max_seqs_per_bin: int | None
) -> None:
    source = _CountingSource(_items(lengths))
    seen: list[Item] = []
    for b in pack_stream(
        source,
        max_seq_len,
        length_fn=_length,
        buffer_size=buffer_size,
        max_seqs_per_bin=max_seqs_per_bin,
    ):
        # Held items when this bin comes out: read so far, minus yielded before, is bounded.
        assert source.num_taken - len(seen) <= buffer_size
        assert b, "empty bin"
        assert sum(length for _, length in b) <= max_seq_len
        if max_seqs_per_bin is not None:
            assert len(b) <= max_seqs_per_bin
        seen.extend(b)
    assert sorted(seen) == _items(lengths)


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 100), max_size=120), max_seq_len=st.integers(100, 300))
def test_a_buffer_holding_everything_is_offline_best_fit_decreasing(
    lengths: list[int], max_seq_len: int
) -> None:
    bins = list(pack_stream(lengths, max_seq_len, length_fn=int, buffer_size=len(lengths) + 1))
    assert len(bins) == _bfd_num_bins(lengths, max_seq_len)


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 50), max_size=200), buffer_size=st.integers(1, 30))
def test_deterministic(lengths: list[int], buffer_size: int) -> None:
    def run() -> list[list[Item]]:
        return list(pack_stream(_items(lengths), 64, length_fn=_length, buffer_size=buffer_size))

    assert run() == run()


def test_packs_far_tighter_than_next_fit() -> None:
    # A realistic long-tailed distribution: the bounded buffer gets within ~1% of the
    # lower bound while next-fit (lmms-engine's streaming packer) wastes ~20%.
    rng = np.random.default_rng(0)
    max_seq_len = 2048
    lengths = np.clip(rng.lognormal(np.log(400), 0.9, 5000).astype(int), 1, max_seq_len).tolist()
    bins = list(pack_stream(lengths, max_seq_len, length_fn=int, buffer_size=256))
    efficiency = sum(lengths) / (len(bins) * max_seq_len)
    num_next_fit, used = 1, 0
    for length in lengths:
        if used + length > max_seq_len:
            num_next_fit, used = num_next_fit + 1, 0
        used += length
    assert efficiency > 0.98
    assert len(bins) < 0.85 * num_next_fit


def test_fullest_bins_come_out_first_within_a_round() -> None:
    # One round at the end of the stream: bins come out from least to most room left.
    lengths = [9, 7, 5, 3, 1]
    bins = list(pack_stream(lengths, 10, length_fn=int, buffer_size=100))
    rooms = [10 - sum(b) for b in bins]
    assert rooms == sorted(rooms)
    assert sorted(x for b in bins for x in b) == sorted(lengths)


# ---- over-long items ------------------------------------------------------------------------


def test_overlong_error_names_item_index_and_length() -> None:
    with pytest.raises(InputError, match=r"item 2 has length 11 > max_seq_len=10"):
        list(pack_stream([3, 4, 11, 2], 10, length_fn=int))


def test_overlong_error_comes_when_the_item_is_reached() -> None:
    # The stream is lazy: bins completed before the over-long item have been yielded already.
    stream = pack_stream([[1], [1], [1, 1]], 1, buffer_size=1)
    assert next(stream) == [[1]]
    assert next(stream) == [[1]]
    with pytest.raises(InputError, match="item 2 has length 2 > max_seq_len=1"):
        next(stream)


def test_overlong_drop_skips_and_logs_the_count(caplog: pytest.LogCaptureFixture) -> None:
    lengths = [3, 12, 4, 15, 2, 11]
    with caplog.at_level(logging.WARNING, logger="seqpack_cli.packing.online"):
        bins = list(pack_stream(_items(lengths), 10, length_fn=_length, overlong="drop"))
    assert sorted(item for b in bins for item in b) == [(0, 3), (2, 4), (4, 2)]
    (record,) = caplog.records
    assert "dropped 3 item(s)" in record.getMessage()
    assert "item 1 with length 12" in record.getMessage()


def test_overlong_drop_logs_even_when_the_consumer_stops_early(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stream = pack_stream([[0] * 20, [0] * 3, [0] * 4], 10, overlong="drop", buffer_size=1)
    with caplog.at_level(logging.WARNING, logger="seqpack_cli.packing.online"):
        next(stream)
        stream.close()  # type: ignore[attr-defined]
    assert any("dropped 1 item(s)" in r.getMessage() for r in caplog.records)


def test_overlong_truncate_slices_lists_and_arrays() -> None:
    items = [list(range(25)), np.arange(4), np.arange(13)]
    bins = list(pack_stream(items, 10, overlong="truncate", buffer_size=8))
    out = sorted((list(map(int, item)) for b in bins for item in b), key=len)
    assert out == [[0, 1, 2, 3], list(range(10)), list(range(10))]
    assert all(sum(map(len, b)) <= 10 for b in bins)


def test_overlong_truncate_with_truncate_fn_for_dict_items() -> None:
    def cut(d: dict[str, list[int]], n: int) -> dict[str, list[int]]:
        return {key: value[:n] for key, value in d.items()}

    items = [{"input_ids": list(range(12)), "labels": list(range(12))}, {"input_ids": [1, 2]}]
    bins = list(
        pack_stream(
            items,
            8,
            length_fn=lambda d: len(d["input_ids"]),
            overlong="truncate",
            truncate_fn=cut,
        )
    )
    flat = [item for b in bins for item in b]
    assert {len(d["input_ids"]) for d in flat} == {8, 2}
    assert all(len(d["labels"]) == 8 for d in flat if "labels" in d)


def test_overlong_truncate_of_unsliceable_item_is_an_input_error() -> None:
    items = [{"input_ids": list(range(12))}]
    with pytest.raises(InputError, match=r"item 0 \(length 12, type dict\) cannot be sliced"):
        list(pack_stream(items, 8, length_fn=lambda d: len(d["input_ids"]), overlong="truncate"))


def test_truncation_that_does_not_shorten_is_an_input_error() -> None:
    with pytest.raises(InputError, match="still has length 12"):
        list(pack_stream([12], 8, length_fn=int, overlong="truncate", truncate_fn=lambda x, n: x))


# ---- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize("length", [0, -3])
def test_non_positive_length_is_an_input_error(length: int) -> None:
    with pytest.raises(
        InputError,
        match=rf"length_fn\(item 1\) is {length}; expected a positive integer .*"
        "filter out empty items",
    ):
        list(pack_stream([2, length], 8, length_fn=int))


def test_non_integer_length_is_an_input_error() -> None:
    with pytest.raises(
        InputError,
        match=r"length_fn\(item 0\) is 2\.5 of type float; expected a positive integer .*"
        "make length_fn return",
    ):
        list(pack_stream([2.5], 8, length_fn=lambda x: x))


def test_bool_length_is_an_input_error() -> None:
    # True == 1, but a length_fn that returns a bool measures nothing: refused, not packed as 1.
    with pytest.raises(InputError, match=r"length_fn\(item 0\) is the bool True"):
        list(pack_stream([[1, 2]], 8, length_fn=lambda x: True))


def test_numpy_integer_lengths_are_accepted() -> None:
    lengths = np.array([3, 5, 2], dtype=np.int64)
    assert sorted(x for b in pack_stream(lengths, 8, length_fn=lambda x: x) for x in b) == [2, 3, 5]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_seq_len": 0}, "max_seq_len is 0; expected a positive integer"),
        ({"max_seq_len": True}, "max_seq_len is the bool True; expected a positive integer"),
        ({"buffer_size": 0}, "buffer_size is 0; expected a positive integer"),
        ({"buffer_size": 2.0}, "buffer_size is 2.0 of type float; expected a positive integer"),
        ({"max_seqs_per_bin": 0}, "max_seqs_per_bin is 0; expected a positive integer; pass"),
        ({"overlong": "wrap"}, "overlong='wrap'"),
        ({"truncate_fn": lambda x, n: x}, "truncate_fn is given but overlong='error'"),
    ],
)
def test_bad_options_are_config_errors_at_call_time(kwargs: dict, message: str) -> None:
    options = {"max_seq_len": 8, **kwargs}
    max_seq_len = options.pop("max_seq_len")
    with pytest.raises(ConfigError, match=message):
        pack_stream([1, 2], max_seq_len, **options)  # no iteration: validation is eager

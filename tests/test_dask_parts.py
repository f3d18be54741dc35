"""The Dask engine's pieces that need no cluster: how the work is cut, and the merges.

Whatever the cut (file groups, merge units, id ranges, read blocks), what the pieces compute is
what one pass over all rows computes: these are checked against numpy on random inputs.
"""

from __future__ import annotations

import itertools
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.over_cap import OverCap
from seqpack_cli.prepare import PrepareConfig
from seqpack_cli.prepare.engines.dask.group_sort import ids_by_length
from seqpack_cli.prepare.engines.dask.groups import (
    GroupHistogram,
    HistogramTotal,
    balanced_groups,
    check_ranges,
    footer_chunks,
    group_rows,
    kept_counts,
    merge_units,
    plan_groups,
)
from seqpack_cli.prepare.engines.dask.merge import (
    DuplicateCounter,
    RunEncoding,
    Segment,
    concatenated_segments,
    merged_segments,
    pwrite_encoded,
)
from seqpack_cli.prepare.engines.dask.tuning import ClusterTuning
from seqpack_cli.prepare.footers import InputFile
from seqpack_cli.prepare.pools.offsets import Layout
from seqpack_cli.prepare.scan import HistogramPart

sorted_runs = st.lists(
    st.lists(st.integers(-50, 50), max_size=40).map(sorted), min_size=1, max_size=6
)


def _segments(tmp_path: Path, runs: list[list[int]], narrow: int = 0) -> list[Segment]:
    """Each run in a file of its own after a few ids of padding (segments start inside files);
    the runs whose bit is set in `narrow` stored as uint32 offsets from -100."""
    segments = []
    for i, run in enumerate(runs):
        path = tmp_path / f"run-{i}.bin"
        encoding = RunEncoding(-100, True) if narrow >> i & 1 else RunEncoding()
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            pwrite_encoded(fd, np.array([999] * i + run + [-99], dtype=np.int64), 0, encoding)
        finally:
            os.close(fd)
        segments.append(Segment(str(path), i, len(run), encoding))
    return segments


@settings(max_examples=60, deadline=None)
@given(runs=sorted_runs, block=st.integers(1, 9), narrow=st.integers(0, 63))
def test_merged_segments_yield_the_sorted_union(tmp_path_factory, runs, block, narrow) -> None:
    tmp_path = tmp_path_factory.mktemp("runs")
    # Blocks of a few ids: many cut-offs, runs read again and again.
    chunks = list(merged_segments(_segments(tmp_path, runs, narrow), block, min_block=1))
    every = sorted(itertools.chain.from_iterable(runs))
    assert [int(x) for chunk in chunks for x in chunk] == every
    joined = list(concatenated_segments(_segments(tmp_path, runs, narrow), block))
    assert [int(x) for chunk in joined for x in chunk] == list(itertools.chain(*runs))


@settings(max_examples=100, deadline=None)
@given(
    ids=st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=30).map(sorted),
    probe=st.integers(-(2**41), 2**41),
)
def test_run_encodings_round_trip_and_search_like_int64(ids, probe) -> None:
    """A run stored narrow (uint32 offsets) reads back as the int64 ids, and finds where an id
    goes as searching the int64 ids does; ids outside the bounds are refused, never wrapped."""
    values = np.array(ids, dtype=np.int64)
    encoding = RunEncoding.for_bounds((ids[0], ids[-1]))
    assert encoding.narrow == (ids[-1] - ids[0] < 2**32)
    stored = encoding.encode(values)
    assert stored.dtype == (np.dtype("<u4") if encoding.narrow else np.dtype("<i8"))
    assert encoding.decode(stored).tolist() == ids
    assert encoding.position(stored, probe) == int(np.searchsorted(values, probe, "left"))
    if encoding.narrow:
        with pytest.raises(InputError, match="changed"):
            encoding.encode(np.array([ids[0] - 1, ids[-1] + 2**32]))


@settings(max_examples=200, deadline=None)
@given(
    ids=st.lists(st.integers(0, 12), max_size=60).map(sorted),
    cuts=st.lists(st.integers(0, 60), max_size=8),
)
def test_duplicates_are_counted_whatever_the_chunks(ids, cuts) -> None:
    counter = DuplicateCounter()
    bounds = [0, *sorted(min(cut, len(ids)) for cut in cuts), len(ids)]
    for low, high in itertools.pairwise(bounds):
        counter.add(np.array(ids[low:high], dtype=np.int64))
    repeated = {value: count for value, count in Counter(ids).items() if count > 1}
    assert counter.num_ids == len(repeated)
    assert counter.num_extra == sum(count - 1 for count in repeated.values())
    assert counter.example == (min(repeated) if repeated else None)


def _files(rows: list[int]) -> list[InputFile]:
    return [InputFile(Path(f"/data/{i:03d}.parquet"), 100, n) for i, n in enumerate(rows)]


@given(rows=st.lists(st.integers(0, 50), min_size=1, max_size=12), target=st.integers(1, 80))
def test_file_groups_cover_every_file_once_in_order(rows, target) -> None:
    groups = plan_groups(_files(rows), target)
    assert [f for g in groups for f in g.files] == _files(rows)
    assert [g.index for g in groups] == list(range(len(groups)))
    for group, after in zip(groups, [*groups[1:], None], strict=True):
        assert group.first_row == sum(rows[: group.first_file])
        assert group.num_rows <= target or len(group.files) == 1
        if after is not None:  # as many files as fit
            assert group.num_rows + after.files[0].num_rows > target


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.integers(0, 60), min_size=1, max_size=40),
    threads=st.integers(1, 5),
    most=st.integers(1, 120),
)
def test_balanced_groups_keep_every_thread_busy_within_bounds(rows, threads, most) -> None:
    """Every file once, in order; each group within `max_group_rows` unless it is one file."""
    tuning = ClusterTuning(max_group_rows=most)
    groups = balanced_groups(_files(rows), threads, tuning)
    assert [f for g in groups for f in g.files] == _files(rows)
    assert [g.index for g in groups] == list(range(len(groups)))
    assert all(g.first_row == sum(rows[: g.first_file]) for g in groups)
    assert all(g.num_rows <= most or len(g.files) == 1 for g in groups)


def test_balanced_groups_make_whole_waves() -> None:
    """1e8 rows in 64 files on 2 threads: 16 groups of 4 files (8 whole waves), where packing
    files up to 8.4M rows makes 13 (the last wave half idle)."""
    rows = [1_562_500] * 64
    assert len(plan_groups(_files(rows), group_rows(10**8, 2, ClusterTuning()))) == 13
    groups = balanced_groups(_files(rows), 2, ClusterTuning())
    assert len(groups) == 16
    assert {len(g.files) for g in groups} == {4}
    assert len(balanced_groups(_files([10] * 8), 4, ClusterTuning())) == 8  # 2 per thread
    assert len(balanced_groups(_files(rows), 2, ClusterTuning(group_rows=7))) == 64


def test_group_sizes_follow_the_threads_within_bounds() -> None:
    tuning = ClusterTuning()
    assert group_rows(10**8, 2, tuning) == tuning.max_group_rows  # 25M a thread, capped
    assert group_rows(10**6, 2, tuning) == 250_000
    assert group_rows(10, 64, tuning) == 1
    assert group_rows(10**6, 2, ClusterTuning(group_rows=7)) == 7
    assert footer_chunks(1000, 4, tuning) == [
        range(i, min(i + 64, 1000)) for i in range(0, 1000, 64)
    ]
    assert footer_chunks(5, 4, tuning) == [range(i, i + 1) for i in range(5)]


def _histogram(rows) -> GroupHistogram:
    return GroupHistogram.of_part(HistogramPart(list(rows)))


def test_kept_counts_apply_the_over_cap_policy() -> None:
    rows = [(12, 4), (3, 2), (10, 1), (None, 0)]
    drop, truncate = OverCap("drop", 10), OverCap("truncate", 10)
    assert kept_counts(_histogram(rows), drop).as_dict() == {3: 2, 10: 1}
    assert kept_counts(_histogram(rows), truncate).as_dict() == {3: 2, 10: 5}
    assert kept_counts(_histogram([(3, 2), (12, 4)]), truncate).as_dict() == {3: 2, 10: 4}
    kept = kept_counts(_histogram(rows), drop)
    assert kept.lengths.dtype == np.int32 and kept.counts.dtype == np.int32


lengths_and_counts = st.dictionaries(
    st.one_of(st.none(), st.integers(-3, 40), st.integers(2**20 - 2, 2**20 + 2)),
    st.integers(1, 2**40),
    max_size=8,
)


@settings(max_examples=80, deadline=None)
@given(parts=st.lists(lengths_and_counts, min_size=1, max_size=6), data=st.data())
def test_group_histograms_add_up_to_one_histogram_of_every_row(parts, data) -> None:
    """`HistogramTotal` gives what adding every group's rows one by one gives, bad rows counted
    and the first bad one (in the inputs' order) kept."""
    total, expected = HistogramTotal(), Counter()
    firsts = []
    for i, rows in enumerate(parts):
        bad = sum(count for length, count in rows.items() if length is None or length <= 0)
        first = (i, data.draw(st.integers(0, 5)), None) if bad else None
        part = GroupHistogram.of_part(HistogramPart(list(rows.items()), bad, first))
        assert list(part.lengths) == sorted(part.lengths)
        total.add(part)
        expected.update({x: c for x, c in rows.items() if x is not None and x > 0})
        firsts += [first] if first else []
    summed = total.part()
    good = {x: c for x, c in summed.rows if x is not None}
    assert good == {x: c for x, c in expected.items() if c}
    assert [x for x, _ in summed.rows if x is not None] == sorted(good)
    assert summed.num_bad == sum(c for x, c in summed.rows if x is None)
    assert summed.num_bad == sum(
        c for rows in parts for x, c in rows.items() if x is None or x <= 0
    )
    assert summed.first_bad == (min(firsts) if firsts else None)


@settings(max_examples=60, deadline=None)
@given(
    matrix=st.lists(
        st.lists(st.integers(0, 9), min_size=5, max_size=5), min_size=1, max_size=5
    ).filter(lambda m: all(sum(col) for col in zip(*m, strict=True))),
    unit_ids=st.integers(1, 30),
)
def test_merge_units_cover_every_length_and_locate_each_group_stretch(matrix, unit_ids) -> None:
    lengths = [2, 3, 5, 8, 13]
    group_counts = [
        kept_counts(_histogram(zip(lengths, row, strict=True)), OverCap("error", max(lengths)))
        for row in matrix
    ]
    units = merge_units(lengths, group_counts, unit_ids)
    assert [int(x) for unit in units for x in unit.lengths] == lengths
    for unit in units:
        assert len(unit.lengths) == 1 or unit.num_ids <= unit_ids
        for group, start, counts in zip(unit.groups, unit.starts, unit.counts, strict=True):
            row = matrix[group]
            first = lengths.index(int(unit.lengths[0]))
            assert start == sum(row[:first])
            assert list(counts) == row[first : first + len(unit.lengths)]
            assert counts.sum() > 0


@settings(max_examples=60, deadline=None)
@given(
    groups=st.lists(st.lists(st.integers(-1000, 1000), min_size=1, max_size=50), min_size=1),
    range_ids=st.integers(1, 60),
)
def test_check_ranges_partition_every_id(groups, range_ids) -> None:
    samples = []
    for ids in groups:
        ids = np.sort(np.array(ids, dtype=np.int64))
        positions = np.linspace(0, ids.size - 1, min(8, ids.size)).astype(np.int64)
        samples.append((ids[positions], ids.size))
    total = sum(len(ids) for ids in groups)
    ranges = check_ranges(samples, total, range_ids)
    assert ranges[0][0] is None and ranges[-1][1] is None
    for (_, high), (low, _) in itertools.pairwise(ranges):
        assert high == low is not None  # consecutive, no gap
    for value in itertools.chain.from_iterable(groups):
        inside = [
            r for r in ranges if (r[0] is None or r[0] <= value) and (r[1] is None or value < r[1])
        ]
        assert len(inside) == 1


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"engine": "spark"}, "engine is 'spark'; expected one of local, dask"),
        ({"scheduler": "tcp://h:1"}, "scheduler is set, which only engine='dask' uses"),
        ({"workers": 2}, "workers is set, which only engine='dask' uses"),
        ({"engine": "dask"}, "needs one of scheduler"),
        ({"engine": "dask", "workers": 2, "scheduler": "tcp://h:1"}, "both were given"),
        ({"engine": "dask", "workers": 0}, "workers is 0"),
        ({"engine": "dask", "scheduler": " "}, "expected a Dask scheduler address"),
        (
            {"engine": "dask", "workers": 1, "over_cap": "split"},
            "over_cap='split' cuts the tokens of longer sequences into pieces, so it needs the "
            "token store",
        ),
    ],
)
def test_engine_options_are_checked(tmp_path: Path, changes, message) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        PrepareConfig(inputs=[tmp_path], length_column="n", max_seq_len=8, output="o", **changes)


def test_a_missing_dask_is_one_line_with_the_install_command(monkeypatch, tmp_path) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "distributed" else real(name, *a),
    )
    with pytest.raises(ConfigError, match=r"pip install 'seqpack-cli\[dask\]'"):
        PrepareConfig(
            inputs=[tmp_path], length_column="n", max_seq_len=8, output="o", engine="dask",
            workers=1,
        )  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(
    rows=st.lists(st.tuples(st.sampled_from([3, 7, 8, 40, 900]), st.integers(-50, 50)), min_size=1),
    shift=st.sampled_from([0, 2**40, 2**62]),
    batch=st.integers(1, 7),
    known=st.booleans(),
)
def test_a_group_is_ordered_by_length_then_id(rows, shift, batch, known) -> None:
    """Packed keys (ids spanning less than 2**48), or a counting sort then a sort per pool
    (ids spread over int64, or no bounds from the footers): the same order, numpy's lexsort's."""
    lengths = np.array([length for length, _ in rows], dtype=np.int64)
    ids = np.array([value for _, value in rows], dtype=np.int64) * (1 + shift // 64) + shift // 2
    layout = Layout(dict(Counter(lengths.tolist())))
    batches = [[lengths[i : i + batch], ids[i : i + batch]] for i in range(0, len(rows), batch)]
    bounds = (int(ids.min()), int(ids.max())) if known else None
    got = ids_by_length(batches, layout, lambda columns: columns[1], bounds)
    np.testing.assert_array_equal(got, ids[np.lexsort((ids, lengths))])


def test_a_group_that_disagrees_with_its_histogram_is_refused() -> None:
    layout = Layout({3: 2})
    for lengths in ([3], [3, 3, 3], [3, 4]):
        batch = [np.array(lengths), np.arange(len(lengths), dtype=np.int64)]
        with pytest.raises(InputError, match="inputs changed"):
            ids_by_length([batch], layout, lambda columns: columns[1], (0, 5))
    with pytest.raises(InputError, match="inputs changed"):  # outside the footers' bounds
        ids_by_length([[np.array([3, 3]), np.array([0, 9])]], layout, lambda c: c[1], (0, 5))

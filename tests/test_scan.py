"""seqpack_cli.prepare.scan: inputs, footer checks, the DuckDB histogram and the pools pass.

Every SQL result is checked against a numpy oracle computed from the same parquet data.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import ParquetDataset, make_dataset, write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_architecture import import_graph

from seqpack_cli.errors import InputError
from seqpack_cli.over_cap import OverCap
from seqpack_cli.prepare import scan
from seqpack_cli.prepare.db import connect, load_sql
from seqpack_cli.prepare.footers import inspect_inputs
from seqpack_cli.prepare.inputs import resolve_inputs
from seqpack_cli.prepare.pools import id_checks
from seqpack_cli.prepare.pools import offsets as pool_layout
from seqpack_cli.prepare.pools import scan as pools_module
from seqpack_cli.prepare.pools import split as pool_split
from seqpack_cli.prepare.pools.tuning import PoolTuning

SQL_DIR = Path(__file__).resolve().parent.parent / "sql"


# ---- SQL files --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(SQL_DIR.glob("*.sql")), ids=lambda p: p.name)
def test_sql_files_are_one_commented_statement_with_named_parameters(path: Path) -> None:
    text = path.read_text()
    assert text.startswith("--"), "each SQL file opens with a header comment"
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    assert ";" not in code.strip().rstrip(";"), "one statement per file"
    assert "$paths" in code, "inputs come in as the $paths parameter"
    assert not re.search(r"\{[a-z_]*\}|%s|%\(", code), "no string formatting placeholders"
    assert load_sql(path.stem) == text


# ---- resolve_inputs ---------------------------------------------------------------------------


def test_resolve_inputs_expands_files_globs_and_directories(tmp_path: Path) -> None:
    files = [
        write_parquet(tmp_path / "data" / "x=1" / "b.parquet", {"a": [1]}),
        write_parquet(tmp_path / "data" / "x=2" / "a.parquet", {"a": [1]}),
        write_parquet(tmp_path / "data" / "top.parquet", {"a": [1]}),
    ]
    # Spark-style leftovers are not data.
    write_parquet(tmp_path / "data" / "_tmp" / "junk.parquet", {"a": [1]})
    write_parquet(tmp_path / "data" / ".hidden.parquet", {"a": [1]})
    (tmp_path / "data" / "_SUCCESS").write_text("")
    expected = sorted(files, key=lambda p: p.as_posix())
    assert resolve_inputs([tmp_path / "data"]) == expected
    assert resolve_inputs([str(tmp_path / "data" / "**" / "*.parquet")]) == expected
    # Order of naming and duplicates do not matter.
    assert resolve_inputs([files[2], files[0], files[1], files[0]]) == expected
    assert resolve_inputs(str(files[1])) == [files[1]]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.parquet", "does not exist"),
        (lambda d: str(d / "*.nothing"), "matches no files"),
        (lambda d: d, "holds no parquet files (*.parquet"),
    ],
)
def test_resolve_inputs_refuses_what_matches_nothing(tmp_path: Path, make, message) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        resolve_inputs([make(tmp_path)])


# ---- inspect_inputs ---------------------------------------------------------------------------


def test_inspect_inputs_reads_row_counts_and_sizes(parquet_dataset: ParquetDataset) -> None:
    files = inspect_inputs(parquet_dataset.files, "num_tokens", "doc_id")
    assert [f.path for f in files] == parquet_dataset.files
    assert sum(f.num_rows for f in files) == len(parquet_dataset.lengths)
    assert all(f.num_bytes == f.path.stat().st_size for f in files)


def test_inspect_inputs_refuses_non_parquet_and_truncated_files(tmp_path: Path) -> None:
    text_file = tmp_path / "notes.parquet"
    text_file.write_text("not parquet at all")
    with pytest.raises(InputError, match=r"notes\.parquet is not a readable parquet file"):
        inspect_inputs([text_file], "n")
    good = write_parquet(tmp_path / "good.parquet", {"n": list(range(1, 100))})
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[:-20])
    with pytest.raises(InputError, match=r"cut\.parquet is not a readable parquet file"):
        inspect_inputs([cut], "n")


def test_inspect_inputs_lists_the_columns_when_one_is_missing(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "a.parquet", {"tokens": [1], "doc": [2]})
    with pytest.raises(InputError, match=r"'length' \(length_column\).*columns are: tokens, doc"):
        inspect_inputs([path], "length")
    with pytest.raises(InputError, match=r"'uid' \(id_column\).*columns are: tokens, doc"):
        inspect_inputs([path], "tokens", "uid")


@pytest.mark.parametrize(("values", "kind"), [([1.0, 2.5], "double"), (["3", "4"], "string")])
def test_inspect_inputs_refuses_non_integer_lengths(tmp_path: Path, values, kind) -> None:
    path = write_parquet(tmp_path / "a.parquet", {"n": values})
    with pytest.raises(InputError, match=f"holds {kind} values; expected integer token counts"):
        inspect_inputs([path], "n")


def test_inspect_inputs_names_the_file_whose_schema_disagrees(tmp_path: Path) -> None:
    a = write_parquet(tmp_path / "a.parquet", {"n": np.array([1], np.int64), "x": [1]})
    b = write_parquet(tmp_path / "b.parquet", {"x": [1], "n": np.array([1], np.int64)})
    c = write_parquet(tmp_path / "c.parquet", {"n": np.array([1], np.int64), "x": [1.5]})
    d = write_parquet(tmp_path / "d.parquet", {"n": np.array([1], np.int64)})
    e = write_parquet(tmp_path / "e.parquet", {"n": np.array([1], np.uint16), "x": [1]})
    assert len(inspect_inputs([a, b], "n")) == 2  # column order does not matter
    with pytest.raises(InputError, match=r"c\.parquet has a different schema.*'x' is double"):
        inspect_inputs([a, c], "n")
    # Integer widths agree: the length column is read as the widest (int32 + uint16 -> int32).
    narrow = write_parquet(tmp_path / "f.parquet", {"n": np.array([1], np.int32), "x": [1]})
    assert [f.column_types for f in inspect_inputs([narrow, e], "n")] == [(("n", "INTEGER"),)] * 2
    assert inspect_inputs([e, a], "n")[0].column_types == (("n", "BIGINT"),)
    with pytest.raises(InputError, match=r"d\.parquet has a different schema.*no column 'x'"):
        inspect_inputs([a, d], "n")


# ---- histogram --------------------------------------------------------------------------------


def test_histogram_matches_numpy(parquet_dataset: ParquetDataset) -> None:
    histogram = scan.scan_length_histogram(parquet_dataset.files, "num_tokens", threads=2)
    lengths, counts = np.unique(parquet_dataset.lengths, return_counts=True)
    assert histogram == dict(zip(lengths.tolist(), counts.tolist(), strict=True))
    assert list(histogram) == sorted(histogram)


def test_histogram_reports_progress(parquet_dataset: ParquetDataset) -> None:
    calls: list[tuple[str, int, int]] = []
    scan.scan_length_histogram(
        parquet_dataset.files, "num_tokens", progress=lambda *a: calls.append(a)
    )
    total = len(parquet_dataset.lengths)
    assert calls[-1] == ("histogram", total, total)
    assert all(phase == "histogram" and 0 <= done <= total for phase, done, _ in calls)


@pytest.mark.parametrize(
    ("bad", "shown"), [(None, "NULL"), (0, "0"), (-5, "-5")], ids=["null", "zero", "negative"]
)
def test_histogram_refuses_bad_lengths_with_count_and_first_row(tmp_path: Path, bad, shown) -> None:
    write_parquet(tmp_path / "a.parquet", {"n": [3, 4, 5]})
    write_parquet(tmp_path / "b.parquet", {"n": [3, bad, 7, bad]})
    files = resolve_inputs([tmp_path])
    message = rf"2 NULL, zero or negative lengths, the first \({shown}\) in .*b\.parquet at row 1"
    with pytest.raises(InputError, match=message):
        scan.scan_length_histogram(files, "n")


# ---- the pools pass ---------------------------------------------------------------------------


def _scan_pools(files, counts, *, id_column, tmp_path, max_seq_len=10**9, workers=2, tuning=None):
    pieces: dict[int, list[np.ndarray]] = {}

    def append(length, ids):
        assert ids.dtype == np.int64
        pieces.setdefault(length, []).append(np.array(ids))

    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    con = connect(threads=2)
    try:
        result = pools_module.scan_pools(
            con,
            inspect_inputs(files, "num_tokens", id_column),
            "num_tokens",
            counts,
            id_column=id_column,
            over_cap=OverCap("error", max_seq_len),
            work_dir=work,
            append_pool=append,
            workers=workers,
            tuning=tuning,
        )
    finally:
        con.close()
    assert not list(work.iterdir()), "the work file is removed"
    written = {length: np.concatenate(parts) for length, parts in pieces.items()}
    for length, ids in written.items():
        assert ids.size == counts[length], "each pool gets exactly its count"
    return written, result


def _assert_pools_equal(got: dict, expected: dict) -> None:
    assert sorted(got) == sorted(expected)
    for length, ids in expected.items():
        np.testing.assert_array_equal(got[length], ids)


@pytest.mark.parametrize("max_seq_len", [1000, 10**9], ids=["lengths as codes", "indexed"])
@pytest.mark.parametrize("id_column", ["doc_id", None])
def test_pools_match_numpy(
    parquet_dataset: ParquetDataset, tmp_path: Path, id_column, max_seq_len
) -> None:
    pools, result = _scan_pools(
        parquet_dataset.files,
        parquet_dataset.counts(),
        id_column=id_column,
        tmp_path=tmp_path,
        max_seq_len=max_seq_len,
    )
    _assert_pools_equal(pools, parquet_dataset.pools(by_row_index=id_column is None))
    assert result.num_ids == len(parquet_dataset.lengths)
    if id_column:
        assert (result.id_min, result.id_max) == (
            parquet_dataset.ids.min(),
            parquet_dataset.ids.max(),
        )


@pytest.mark.parametrize("path", ["id map", "scatter"])
def test_pools_with_tiny_batches_units_remaps_and_merged_runs(
    parquet_dataset: ParquetDataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    # Shrink every size so each code path runs: many batches, re-mapping of the work file,
    # multi-pool units, big pools sorted in runs and merged (scatter), map chunks smaller than
    # the id span, small appends batched and flushed when too many wait (id map).
    tuning = PoolTuning(
        max_map_ids=0 if path == "scatter" else PoolTuning.max_map_ids,
        map_chunk_ids=100,
        min_append_bytes=8 * 5,
        max_batched_bytes=8 * 20,
        batch_rows=64,
        remap_rows=200,
        unit_ids=50,
        max_sort_ids=8,
    )
    pools, _ = _scan_pools(
        parquet_dataset.files,
        parquet_dataset.counts(),
        id_column="doc_id",
        tmp_path=tmp_path,
        tuning=tuning,
    )
    _assert_pools_equal(pools, parquet_dataset.pools())


def test_pools_leave_out_lengths_over_the_cap(
    parquet_dataset: ParquetDataset, tmp_path: Path
) -> None:
    counts = parquet_dataset.counts(max_seq_len=40)
    pools, _ = _scan_pools(
        parquet_dataset.files, counts, id_column="doc_id", tmp_path=tmp_path, max_seq_len=40
    )
    _assert_pools_equal(pools, parquet_dataset.pools(max_seq_len=40))


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    lengths=st.lists(st.integers(1, 9), min_size=1, max_size=60),
    cut=st.integers(0, 60),
    step=st.sampled_from([3, 2**26, 2**40]),
    seed=st.integers(0, 2**16),
)
def test_pools_property(tmp_path_factory, lengths, cut, step, seed) -> None:
    tmp_path = tmp_path_factory.mktemp("prop")
    rng = np.random.default_rng(seed)
    num = len(lengths)
    # The id spacing picks the path: the id map, the scatter with an exact or a hashed bitmap.
    ids = rng.permutation(num).astype(np.int64) * step - 7
    cut = min(cut, num)
    array = np.array(lengths, dtype=np.int64)
    files = [
        write_parquet(tmp_path / "a.parquet", {"num_tokens": array[:cut], "doc_id": ids[:cut]}),
        write_parquet(tmp_path / "b.parquet", {"num_tokens": array[cut:], "doc_id": ids[cut:]}),
    ]
    counts = {int(x): int((array == x).sum()) for x in np.unique(array)}
    pools, _ = _scan_pools(
        files, counts, id_column="doc_id", tmp_path=tmp_path, workers=1 + seed % 2
    )
    _assert_pools_equal(pools, {x: np.sort(ids[array == x]) for x in counts})


def test_units_keep_big_pools_alone() -> None:
    # Pool sizes 3, 4, 30 (big), 5, 6, 2, 25 (big), 1: big pools get units of their own, the
    # others are grouped until a unit reaches 10 ids.
    layout = pool_layout.Layout(
        {length: size for length, size in enumerate([3, 4, 30, 5, 6, 2, 25, 1], 1)},
        PoolTuning(unit_ids=10, max_sort_ids=20),
    )
    assert layout.units() == [(0, 2), (2, 3), (3, 5), (5, 6), (6, 7), (7, 8)]


@pytest.mark.parametrize("offset", [0, -(2**62), 2**62], ids=["small", "negative", "large"])
@pytest.mark.parametrize("spread", [1, 2**33], ids=["32-bit keys", "64-bit keys"])
def test_sort_pools_sorts_only_what_needs_it(offset: int, spread: int) -> None:
    # Pools [5 7 9] (ascending), [3] (single), [8 2 4] (not), [1 6] (ascending; the drop from 4
    # to 1 sits on a pool boundary, which is not disorder).
    values = np.array([5, 7, 9, 3, 8, 2, 4, 1, 6]) * spread + offset
    pool_split.sort_pools(values, np.array([0, 3, 4, 7, 9]))
    expected = np.array([5, 7, 9, 3, 2, 4, 8, 1, 6]) * spread + offset
    np.testing.assert_array_equal(values, expected)


def test_merged_runs_sorts_a_pool_larger_than_memory_runs(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    values = rng.integers(-(2**62), 2**62, 25_000)
    values[:3000] = np.sort(values[:3000])  # a run that is already sorted is left alone
    path = tmp_path / "flat.bin"
    np.concatenate([[5, 6], values, [7]]).astype(np.int64).tofile(path)
    chunks = list(pool_split.merged_runs(path, 2, values.size, max_sort_ids=1000))
    np.testing.assert_array_equal(np.concatenate(chunks), np.sort(values))


def test_null_ids_are_refused_with_count_and_first_row(tmp_path: Path) -> None:
    write_parquet(tmp_path / "a.parquet", {"num_tokens": [3, 4], "doc_id": [1, 2]})
    write_parquet(tmp_path / "b.parquet", {"num_tokens": [3, 4, 5], "doc_id": [3, None, None]})
    files = resolve_inputs([tmp_path])
    with pytest.raises(
        InputError, match=r"2 NULL ids, the first in .*b\.parquet at row 1 \(0-based\)"
    ):
        _scan_pools(files, {3: 2, 4: 2, 5: 1}, id_column="doc_id", tmp_path=tmp_path)


@pytest.mark.parametrize("step", [1, 2**26, 2**40], ids=["id map", "exact bitmap", "hashed bitmap"])
def test_duplicate_ids_are_refused_with_count_and_example(tmp_path: Path, step: int) -> None:
    # id 2*step occurs in two pools (lengths 3 and 5) and in two files; 4*step occurs 3 times.
    write_parquet(
        tmp_path / "a.parquet",
        {"num_tokens": [3, 4, 5, 6], "doc_id": [x * step for x in (1, 2, 4, 4)]},
    )
    write_parquet(
        tmp_path / "b.parquet", {"num_tokens": [5, 6, 7], "doc_id": [x * step for x in (2, 4, 8)]}
    )
    files = resolve_inputs([tmp_path])
    counts = {3: 1, 4: 1, 5: 2, 6: 2, 7: 1}
    message = (
        rf"2 duplicated ids \(3 extra rows\), e\.g\. id {2 * step} in .*a\.parquet at row 1 "
        r"\(0-based\) and .*b\.parquet at row 0"
    )
    with pytest.raises(InputError, match=message):
        _scan_pools(files, counts, id_column="doc_id", tmp_path=tmp_path)


def test_sparse_duplicate_check_survives_hash_collisions(tmp_path: Path) -> None:
    # A 2**4-bit bitmap makes almost every id a candidate; DuckDB then clears them all.
    ids = np.arange(200, dtype=np.int64) * 2**40
    path = write_parquet(
        tmp_path / "a.parquet", {"num_tokens": np.arange(200) % 5 + 1, "doc_id": ids}
    )
    pools, _ = _scan_pools(
        [path],
        {x: 40 for x in range(1, 6)},
        id_column="doc_id",
        tmp_path=tmp_path,
        tuning=PoolTuning(check_bits_log2=4),
    )
    assert sum(len(p) for p in pools.values()) == 200


def test_sparse_duplicate_check_falls_back_to_duckdb_past_the_candidate_cap(
    tmp_path: Path,
) -> None:
    ids = np.arange(100, dtype=np.int64) * 2**40
    ids[50] = ids[10]
    path = write_parquet(tmp_path / "a.parquet", {"num_tokens": np.full(100, 4), "doc_id": ids})
    with pytest.raises(
        InputError, match=rf"1 duplicated ids \(1 extra rows\), e\.g\. id {ids[10]}"
    ):
        _scan_pools(
            [path],
            {4: 100},
            id_column="doc_id",
            tmp_path=tmp_path,
            tuning=PoolTuning(check_bits_log2=4, max_candidates=3),
        )


@pytest.mark.parametrize("id_column", [None, "doc_id"])
@pytest.mark.parametrize("path", ["id map", "scatter"])
def test_changed_inputs_are_detected(
    parquet_dataset: ParquetDataset,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    id_column: str | None,
) -> None:
    tuning = PoolTuning(max_map_ids=0) if path == "scatter" else None
    counts = parquet_dataset.counts()
    first = next(iter(counts))
    counts[first] += 1  # as if a row vanished between the two passes
    with pytest.raises(InputError, match="the inputs changed while prepare was reading them"):
        _scan_pools(
            parquet_dataset.files, counts, id_column=id_column, tmp_path=tmp_path, tuning=tuning
        )


def test_fixture_dataset_round_trips(tmp_path: Path) -> None:
    data = make_dataset(tmp_path, num_rows=50, seed=3)
    histogram = scan.scan_length_histogram(data.files, "num_tokens")
    assert histogram == data.counts()


@pytest.mark.parametrize("id_column", ["doc_id", None])
def test_bounded_id_spans_are_never_sorted(
    parquet_dataset: ParquetDataset, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, id_column
) -> None:
    # Row indexes and dense id columns take the id map, whose pools come out ascending: no
    # work file is split, nothing is sorted or merged.
    def refuse(*args, **kwargs):
        raise AssertionError("sorted or split pools on the id-map path")

    from seqpack_cli.prepare.pools import scan as pools

    monkeypatch.setattr(pool_split, "sort_pools", refuse)
    monkeypatch.setattr(pool_split, "merged_runs", refuse)
    monkeypatch.setattr(pools, "split_pools", refuse)
    pools, _ = _scan_pools(
        parquet_dataset.files, parquet_dataset.counts(), id_column=id_column, tmp_path=tmp_path
    )
    _assert_pools_equal(pools, parquet_dataset.pools(by_row_index=id_column is None))


def test_footer_id_bounds_pick_the_path(tmp_path: Path) -> None:
    from seqpack_cli.prepare.pools import id_map
    from seqpack_cli.prepare.pools import scan as pools

    ids = np.array([5, 9, 7, 100], dtype=np.int64)
    path = write_parquet(tmp_path / "a.parquet", {"num_tokens": [1, 2, 1, 2], "doc_id": ids})
    files = inspect_inputs([path], "num_tokens", "doc_id")
    assert pools.footer_id_bounds(files, "doc_id") == (5, 100)
    layout = pool_layout.Layout({1: 2, 2: 2})
    assert id_map.fits(layout, 5, 100, 8192)
    assert id_map.fits(layout, 5, 100, 10**9)  # lengths then get dense codes
    assert not id_map.fits(layout, 0, PoolTuning().max_map_ids, 8192)
    assert not id_map.fits(pool_layout.Layout({1: 2, 2: 2}, PoolTuning(max_map_ids=0)), 5, 5, 9)
    # Without statistics there are no bounds, so the scatter path runs, with the same pools.
    import pyarrow as pa
    import pyarrow.parquet as pq

    bare = tmp_path / "bare" / "a.parquet"
    bare.parent.mkdir()
    pq.write_table(
        pa.table({"num_tokens": [1, 2, 1, 2], "doc_id": ids}), bare, write_statistics=False
    )
    bare_files = inspect_inputs([bare], "num_tokens", "doc_id")
    assert pools.footer_id_bounds(bare_files, "doc_id") is None
    got, result = _scan_pools([bare], {1: 2, 2: 2}, id_column="doc_id", tmp_path=tmp_path)
    _assert_pools_equal(got, {1: np.array([5, 7]), 2: np.array([9, 100])})
    assert (result.id_min, result.id_max) == (5, 100)


def test_ids_outside_the_footer_bounds_mean_changed_inputs() -> None:
    from seqpack_cli.prepare.pools import id_map

    ids = id_map.IdMap(pool_layout.Layout({3: 2}), 10, 20, 100)
    ids.add(np.array([3]), np.array([10]))
    with pytest.raises(InputError, match="the inputs changed"):
        ids.add(np.array([3]), np.array([21]))


def test_the_pools_pass_builds_on_scan_not_the_reverse() -> None:
    # scan used to re-export scan_pools lazily, hiding a cycle scan -> pools -> scan.
    graph = import_graph()
    assert "seqpack_cli.prepare.scan" in graph["seqpack_cli.prepare.pools.scan"]
    assert "seqpack_cli.prepare.pools.scan" not in graph["seqpack_cli.prepare.scan"]
    assert not hasattr(scan, "scan_pools")


@settings(max_examples=60, deadline=None)
@given(
    num=st.integers(1, 300),
    step=st.sampled_from([1, 7, 2**40 + 3]),
    offset=st.sampled_from([0, -(2**62), 2**62]),
    duplicates=st.lists(st.tuples(st.integers(0, 299), st.integers(0, 299)), max_size=5),
    bits=st.integers(3, 12),
    num_chunks=st.integers(1, 4),
    seed=st.integers(0, 2**16),
)
def test_id_check_flags_every_duplicate_and_gives_back_real_ids(
    num, step, offset, duplicates, bits, num_chunks, seed
) -> None:
    # The check sorts bijective keys instead of arg-sorting: the candidates it hands to DuckDB
    # must be real ids (not keys), and every duplicated id must be among them, whatever the
    # chunking, the span (exact bitmap or hashed) and the order.
    rng = np.random.default_rng(seed)
    ids = (np.arange(num, dtype=np.int64) * step + offset)[rng.permutation(num)]
    for target, source in duplicates:
        if target < num and source < num:
            ids[target] = ids[source]
    check = id_checks.IdCheck(
        int(ids.min()), int(ids.max()), max_bits_log2=bits, max_candidates=10**6
    )
    for chunk in np.array_split(ids, num_chunks):
        check.add(chunk.copy())
    candidates = set(np.concatenate(check.candidates).tolist()) if check.candidates else set()
    values, counts = np.unique(ids, return_counts=True)
    repeated = set(values[counts > 1].tolist())
    assert repeated <= candidates
    assert candidates <= set(ids.tolist()), "candidates are ids of the data"
    if check.exact:
        assert candidates == repeated, "an exact bitmap flags only true duplicates"


def test_the_duplicate_bitmap_grows_with_the_ids_up_to_its_cap() -> None:
    from seqpack_cli.prepare.pools.scan import check_bits_log2

    tuning = PoolTuning()
    assert check_bits_log2(0, tuning) == 16
    assert check_bits_log2(10**6, tuning) == 25  # 32e6 bits -> 2**25 (4 MiB)
    assert check_bits_log2(10**7, tuning) == 29
    assert check_bits_log2(10**8, tuning) == 30 == tuning.check_bits_log2
    assert check_bits_log2(10**8, PoolTuning(check_bits_log2=4)) == 4

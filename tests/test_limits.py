"""Limits: max_seq_len and lengths near and past 2**31 - 1, and a full disk on the sparse-id path.

seqpack accepts `max_seq_len` up to `MAX_SEQ_LEN_LIMIT` (2**31 - 1, int32 token offsets in a bin);
above it, one line names the option, the value and the bound. Up to it, memory follows the number
of distinct lengths, never the longest length: lengths around 2**30 cost no more than lengths
around 2**10. Lengths past int32 (and past int64, in a uint64 column) are over every cap: dropped
with --filter-over-cap, refused in one line without it, and counted exactly by `seqpack stats`.
"""

from __future__ import annotations

import errno
import json
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ParquetDataset
from typer.testing import CliRunner

from seqpack_cli.checks import MAX_SEQ_LEN_LIMIT, check_max_seq_len
from seqpack_cli.cli.app import app
from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.packing import histogram
from seqpack_cli.packing import per_sequence as packing
from seqpack_cli.prepare import PrepareConfig, load_prepared, prepare_dataset
from seqpack_cli.prepare.pools import id_checks
from seqpack_cli.prepare.pools import offsets as pool_layout
from seqpack_cli.prepare.pools.scan import reserve_work_file
from seqpack_cli.prepare.pools.tuning import PoolTuning
from seqpack_cli.stats import baselines, profile, sweep

LIMIT = 2**31 - 1
OVER_LIMIT = [2**31, 2**40, 2**63 - 1, 2**63, 2**64]
OVER_LIMIT_IDS = ["2^31", "2^40", "2^63-1", "2^63", "2^64"]
# A few distinct lengths around 2**30 (and one short), as a long-context dataset might have.
LONG_COUNTS = {7: 3, 2**30 - 5: 4, 2**30: 6, 2**30 + 3: 2, 1_500_000_000: 3, LIMIT: 2}
MAX_PEAK_BYTES = 32 << 20
"""Python-visible memory (numpy arrays included) a run over LONG_COUNTS may peak at: a table sized
by the longest length would take 2-16 GiB."""


def _invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, [str(arg) for arg in args])


def _one_error_line(result: Any) -> str:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def _tree(root: Path) -> list[str]:
    return sorted(path.as_posix() for path in root.rglob("*"))


def _long_dataset(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """Rows with LONG_COUNTS' lengths, shuffled, ids spread over 2**40 (the scatter path)."""
    lengths = np.repeat(np.array(list(LONG_COUNTS), dtype=np.int64), list(LONG_COUNTS.values()))
    rng = np.random.default_rng(1)
    lengths = rng.permutation(lengths)
    ids = rng.permutation(lengths.size).astype(np.int64) << 40
    path = tmp_path / "data" / "long.parquet"
    path.parent.mkdir()
    pq.write_table(pa.table({"n": lengths, "id": ids}), path)
    return path, lengths, ids


def _peak_bytes(run: Callable[[], Any]) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        result = run()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ---- the bound on max_seq_len ---------------------------------------------------------------


def test_the_bound_is_int32() -> None:
    assert MAX_SEQ_LEN_LIMIT == LIMIT == np.iinfo(np.int32).max
    assert check_max_seq_len(LIMIT) == LIMIT


@pytest.mark.parametrize("value", OVER_LIMIT, ids=OVER_LIMIT_IDS)
def test_library_refuses_max_seq_len_over_the_bound(value: int) -> None:
    calls = [
        lambda: check_max_seq_len(value),
        lambda: histogram.pack_length_histogram_batched({5: 1}, value),
        lambda: histogram.pack_length_histogram({5: 1}, value),
        lambda: histogram.lower_bound_bins({5: 1}, value),
        lambda: packing.greedy_pack_sequences([5, 6], value),
        lambda: sweep.sweep_max_seq_len({5: 1}, [1024, value]),
        lambda: baselines.no_packing_stats({5: 1}, value),
    ]
    for call in calls:
        with pytest.raises(ConfigError) as error:
            call()
        message = str(error.value)
        assert f"max_seq_len {value} is over seqpack's limit of {LIMIT}" in message
        assert "--" not in message, "library messages name arguments, not flags"
        assert f"--max-seq-len {value}" in error.value.cli_message()


@pytest.mark.parametrize("value", OVER_LIMIT, ids=OVER_LIMIT_IDS)
def test_prepare_refuses_max_seq_len_over_the_bound(tmp_path: Path, value: int) -> None:
    data, _, _ = _long_dataset(tmp_path)
    before = _tree(tmp_path)
    result = _invoke(
        "prepare", data, "--length-column", "n", "--max-seq-len", value, "-o", tmp_path / "out"
    )
    line = _one_error_line(result)
    assert f"--max-seq-len {value} is over seqpack's limit of {LIMIT}" in line
    assert _tree(tmp_path) == before, "nothing written"


@pytest.mark.parametrize("value", OVER_LIMIT, ids=OVER_LIMIT_IDS)
def test_stats_refuses_max_seq_len_over_the_bound(tmp_path: Path, value: int) -> None:
    data, _, _ = _long_dataset(tmp_path)
    for given in (str(value), f"1024,{value}"):
        result = _invoke("stats", data, "--length-column", "n", "--max-seq-len", given)
        line = _one_error_line(result)
        assert f"--max-seq-len {value} is over seqpack's limit of {LIMIT}" in line


def test_stats_refuses_digits_int_cannot_read(tmp_path: Path) -> None:
    data, _, _ = _long_dataset(tmp_path)
    result = _invoke("stats", data, "--length-column", "n", "--max-seq-len", "2²")
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "is not a positive integer" in result.output


# ---- memory independent of the longest length ---------------------------------------------


@pytest.mark.parametrize("ids", ["row index", "sparse id column"])
def test_prepare_long_lengths_in_bounded_memory(tmp_path: Path, ids: str) -> None:
    data, lengths, id_values = _long_dataset(tmp_path)
    id_column = "id" if ids == "sparse id column" else None
    output = tmp_path / "out"
    config = PrepareConfig(
        inputs=[data],
        length_column="n",
        max_seq_len=LIMIT,
        output=output,
        id_column=id_column,
        # The duplicate-id bitmap has a fixed size (128 MiB), whatever the lengths: shrink it.
        tuning=PoolTuning(check_bits_log2=16),
    )
    _, peak = _peak_bytes(lambda: prepare_dataset(config))
    assert peak < MAX_PEAK_BYTES, f"peak {peak / 2**20:.0f} MiB"
    prepared = load_prepared(output)
    assert dict(prepared.counts) == LONG_COUNTS
    keys = id_values if id_column else np.arange(lengths.size)
    for length in LONG_COUNTS:
        np.testing.assert_array_equal(prepared.pools[length], np.sort(keys[lengths == length]))
    assert all(sum(template) <= LIMIT for template in prepared.templates)


def test_stats_sweep_long_lengths_in_bounded_memory(tmp_path: Path) -> None:
    data, _, _ = _long_dataset(tmp_path)
    candidates = f"{2**30},{LIMIT}"
    result, peak = _peak_bytes(
        lambda: _invoke(
            "stats", data, "--length-column", "n", "--max-seq-len", candidates, "--json"
        )
    )
    assert result.exit_code == 0, result.output
    assert peak < MAX_PEAK_BYTES, f"peak {peak / 2**20:.0f} MiB"
    document = json.loads(result.stdout)
    assert document["lengths"]["max_length"] == LIMIT
    at_limit = document["rows"][-1]
    assert at_limit["max_seq_len"] == LIMIT and at_limit["num_over_cap"] == 0
    assert at_limit["seqpack"]["num_sequences"] == sum(LONG_COUNTS.values())


def test_library_packers_long_lengths_in_bounded_memory() -> None:
    lengths = np.repeat(np.array(list(LONG_COUNTS)), list(LONG_COUNTS.values()))
    calls = {
        "batched": lambda: histogram.pack_length_histogram_batched(LONG_COUNTS, LIMIT),
        "capped": lambda: histogram.pack_length_histogram_batched(
            LONG_COUNTS, LIMIT, max_seqs_per_bin=2
        ),
        "per-item": lambda: histogram.pack_length_histogram(LONG_COUNTS, LIMIT),
        "mffd": lambda: histogram.pack_length_histogram_mffd(LONG_COUNTS, LIMIT),
        "greedy": lambda: packing.greedy_pack_sequences(lengths, LIMIT),
        "heap, seeded": lambda: packing.heap_pack_sequences(lengths, LIMIT, seed=3),
        "sweep": lambda: sweep.sweep_max_seq_len(LONG_COUNTS, [2**30, LIMIT]),
        "profile": lambda: profile.profile_packing(
            LONG_COUNTS, histogram.pack_length_histogram_batched(LONG_COUNTS, LIMIT), LIMIT
        ),
    }
    for name, call in calls.items():
        _, peak = _peak_bytes(call)
        assert peak < MAX_PEAK_BYTES, f"{name}: peak {peak / 2**20:.0f} MiB"
    bins = packing.greedy_pack_sequences(lengths, LIMIT)
    assert sorted(i for b in bins for i in b) == list(range(lengths.size))
    assert all(int(lengths[b].sum()) <= LIMIT for b in bins)


def _prepare_tuned(
    parquet_dataset: ParquetDataset, output: Path, tuning: PoolTuning, max_seq_len: int = 512
) -> Any:
    """`prepare` of the shared dataset (ids from its doc_id column) through the library, the
    pools pass's sizes set to `tuning` (not a CLI option)."""
    return prepare_dataset(
        PrepareConfig(
            inputs=[parquet_dataset.root],
            length_column="num_tokens",
            id_column="doc_id",
            max_seq_len=max_seq_len,
            output=output,
            tuning=tuning,
        )
    )


@pytest.mark.parametrize("table_end", [0, 100], ids=["all searched", "long ones searched"])
@pytest.mark.parametrize("path", ["id map", "scatter"])
def test_long_and_short_length_lookups_give_the_same_pools(
    parquet_dataset: ParquetDataset, tmp_path: Path, path: str, table_end: int
) -> None:
    # Lengths (1..300 here) past max_table_length take the search that lengths past 2**20 take.
    tuning = PoolTuning(
        max_map_ids=0 if path == "scatter" else PoolTuning.max_map_ids,
        max_table_length=table_end,
    )
    output = tmp_path / "out"
    # At 10**6, lengths are indexed codes in the id map, not the lengths themselves.
    _prepare_tuned(parquet_dataset, output, tuning, max_seq_len=10**6)
    prepared = load_prepared(output)
    expected = parquet_dataset.pools()
    assert sorted(prepared.pools) == sorted(expected)
    for length, ids in expected.items():
        np.testing.assert_array_equal(prepared.pools[length], ids)


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint32, np.int64, np.uint64])
def test_layout_positions_by_table_and_by_search_agree(dtype: Any) -> None:
    layout_lengths = {1: 1, 3: 1, 7: 1, 100: 1, 127: 1}
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 128, 1000).astype(dtype)
    where = {length: position for position, length in enumerate(sorted(layout_lengths))}
    expected = [where.get(length, 5) for length in lengths.tolist()]
    layouts = {}
    # The table alone, the search alone, and both (lengths up to 50 in the table).
    for table_end in (PoolTuning.max_table_length, 0, 50):
        tuning = PoolTuning(max_table_length=table_end)
        layouts[table_end] = pool_layout.Layout(layout_lengths, tuning)
        assert layouts[table_end].table.size == min(table_end, 127) + 2
    for layout in layouts.values():
        positions = layout.positions(lengths)
        assert positions.dtype == np.uint16
        np.testing.assert_array_equal(positions, expected)
        huge = np.array([2**64 - 1, 2**63, 3, 2**31, 127], dtype=np.uint64)
        np.testing.assert_array_equal(layout.positions(huge), [5, 5, 1, 5, 4])
    long_layout = pool_layout.Layout({2**30: 5, 2**31 - 1: 1, 9: 2})
    assert long_layout.table.size == PoolTuning.max_table_length + 2, "not sized by 2**31"
    keys = np.array([9, 2**30, 2**31 - 1, 2**30 + 1, 8], dtype=np.int64)
    np.testing.assert_array_equal(long_layout.positions(keys), [0, 1, 2, 3, 3])


# ---- lengths past int32 ---------------------------------------------------------------------


def _wide_lengths(tmp_path: Path, values: list[int], kind: pa.DataType) -> Path:
    path = tmp_path / "data" / "wide.parquet"
    path.parent.mkdir(exist_ok=True)
    ids = [i << 40 for i in range(len(values))]
    pq.write_table(pa.table({"n": pa.array(values, kind), "id": pa.array(ids, pa.int64())}), path)
    return path


WIDE = {
    "int64": ([5, 2**31, 7, 2**40, 2**62, 2**62, 5], pa.int64()),
    "uint64": ([5, 2**31, 7, 2**64 - 1, 2**63, 2**62, 5], pa.uint64()),
}


@pytest.mark.parametrize("ids", [[], ["--id-column", "id"]], ids=["row index", "id column"])
@pytest.mark.parametrize("kind", list(WIDE))
def test_prepare_lengths_past_int32(tmp_path: Path, kind: str, ids: list[str]) -> None:
    values, arrow_type = WIDE[kind]
    data = _wide_lengths(tmp_path, values, arrow_type)
    output = tmp_path / "out"
    before = _tree(tmp_path)
    common = ["prepare", data, "--length-column", "n", "-o", output, *ids]
    # Without --filter-over-cap: one line.
    line = _one_error_line(_invoke(*common, "--max-seq-len", LIMIT))
    assert "4 sequences" in line and "--over-cap drop" in line
    # A cap past the bound, which used to size tables by the longest length: one line.
    line = _one_error_line(_invoke(*common, "--max-seq-len", 2**40, "--filter-over-cap"))
    assert f"--max-seq-len {2**40} is over seqpack's limit of {LIMIT}" in line
    assert _tree(tmp_path) == before, "nothing written"
    # With --filter-over-cap: the long ones are dropped and counted.
    result = _invoke(*common, "--max-seq-len", LIMIT, "--filter-over-cap", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["num_dropped"] == 4 and summary["num_sequences"] == 3
    prepared = load_prepared(output)
    assert dict(prepared.counts) == {5: 2, 7: 1}
    keys = [i << 40 for i in range(len(values))] if ids else list(range(len(values)))
    np.testing.assert_array_equal(prepared.pools[5], [keys[0], keys[6]])


@pytest.mark.parametrize("kind", list(WIDE))
def test_stats_counts_lengths_past_int64_exactly(tmp_path: Path, kind: str) -> None:
    values, arrow_type = WIDE[kind]
    data = _wide_lengths(tmp_path, values, arrow_type)
    result = _invoke("stats", data, "--length-column", "n", "--max-seq-len", f"8,{LIMIT}", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    # Exact Python integers: 2**62 twice (or 2**64 - 1) overflows int64.
    assert document["lengths"]["num_tokens"] == sum(values)
    assert document["lengths"]["max_length"] == max(values)
    for row in document["rows"]:
        over = [x for x in values if x > row["max_seq_len"]]
        assert (row["num_over_cap"], row["num_tokens_over_cap"]) == (len(over), sum(over))
        assert row["seqpack"]["num_tokens"] == 17
    assert sum(bucket["count"] for bucket in document["length_histogram"]) == len(values)
    text = _invoke("stats", data, "--length-column", "n", "--max-seq-len", f"8,{LIMIT}")
    assert text.exit_code == 0 and "Traceback" not in text.output


def test_sweep_library_counts_lengths_past_the_bound() -> None:
    counts = {5: 2, 2**62: 2, 2**64 - 1: 1}
    result = sweep.sweep_max_seq_len(counts, [8])
    assert result.lengths.num_tokens == 10 + 2**63 + 2**64 - 1
    assert result.rows[0].num_tokens_over_cap == 2**63 + 2**64 - 1
    assert result.rows[0].sequential.num_sequences == 2
    with pytest.raises(InputError, match="exceeds max_seq_len 8"):
        histogram.pack_length_histogram_batched({9: 1}, 8)


# ---- a full disk on the sparse-id path ------------------------------------------------------


def _raise(code: int) -> Callable[..., Any]:
    def fail(*args: Any) -> Any:
        raise OSError(code, os.strerror(code))

    return fail


def _wide_id_dataset(root: Path) -> tuple[Path, dict[int, np.ndarray]]:
    """A dataset whose ids span far more than the id map takes (the scatter path, as a user's
    hashed ids would), and its expected pools."""
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 40, 300)
    ids = rng.permutation(300).astype(np.int64) * 2**40 - 7
    data = root / "wide" / "a.parquet"
    data.parent.mkdir(parents=True)
    pq.write_table(pa.table({"n": lengths, "id": ids}), data)
    return data, {int(x): np.sort(ids[lengths == x]) for x in np.unique(lengths)}


def _prepare_wide(data: Path, output: Path) -> Any:
    args = ("--length-column", "n", "--id-column", "id", "--max-seq-len", 64, "-o", output)
    return _invoke("prepare", data, *args)


def test_full_disk_on_the_sparse_path_is_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The work file used to be sparse (truncate) and filled through a memory map: a full disk
    # then killed the process with SIGBUS, silently, leaving its temporary directory behind.
    data, _ = _wide_id_dataset(tmp_path)
    monkeypatch.setattr(os, "posix_fallocate", _raise(errno.ENOSPC))
    work = tmp_path / "work"
    work.mkdir()
    line = _one_error_line(_prepare_wide(data, work / "out"))
    assert "No space left on device" in line and "work file" in line
    assert "free some space or choose another --output" in line
    assert _tree(work) == [], "no output, no temporary directory"


def test_sparse_path_without_fallocate_writes_zeros(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data, expected = _wide_id_dataset(tmp_path)
    monkeypatch.setattr(os, "posix_fallocate", _raise(errno.EOPNOTSUPP))
    result = _prepare_wide(data, tmp_path / "out")
    assert result.exit_code == 0, result.output
    prepared = load_prepared(tmp_path / "out")
    assert sorted(prepared.pools) == sorted(expected)
    for length, ids in expected.items():
        np.testing.assert_array_equal(prepared.pools[length], ids)
    # ... and a full disk while writing them is the same one line.
    monkeypatch.setattr(os, "pwrite", _raise(errno.ENOSPC))
    work = tmp_path / "work"
    work.mkdir()
    line = _one_error_line(_prepare_wide(data, work / "out"))
    assert "No space left on device" in line
    assert _tree(work) == []


@pytest.mark.parametrize("fallocate", ["posix_fallocate", "zeros"])
def test_reserve_work_file_allocates_every_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fallocate: str
) -> None:
    if fallocate == "zeros":
        monkeypatch.delattr(os, "posix_fallocate", raising=False)
    path = tmp_path / "ids.bin"
    num_bytes = (3 << 20) + 8
    path.write_bytes(b"x" * 100)  # an old file is replaced, not reused
    reserve_work_file(path, num_bytes)
    assert path.stat().st_size == num_bytes
    assert path.stat().st_blocks * 512 >= num_bytes, "allocated, not sparse"
    assert path.read_bytes() == bytes(num_bytes)
    monkeypatch.setattr(os, "posix_fallocate", _raise(errno.EDQUOT), raising=False)
    with pytest.raises(ConfigError) as error:
        reserve_work_file(path, num_bytes)
    assert "Disk quota exceeded" in str(error.value) and "another output" in str(error.value)
    assert not path.exists()


def test_full_disk_writing_duplicate_candidates_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Wide ids with a duplicate: the bitmap check writes its candidates for DuckDB to confirm.
    data = tmp_path / "data" / "dup.parquet"
    data.parent.mkdir()
    ids = [0, 2**40, 2**40, 5, 2**41]
    pq.write_table(pa.table({"n": [3, 4, 3, 4, 3], "id": pa.array(ids, pa.int64())}), data)
    monkeypatch.setattr(id_checks.pq, "write_table", _raise(errno.ENOSPC))
    work = tmp_path / "work"
    work.mkdir()
    result = _invoke(
        "prepare",
        data,
        "--length-column",
        "n",
        "--id-column",
        "id",
        "--max-seq-len",
        8,
        "-o",
        work / "out",
    )
    line = _one_error_line(result)
    assert "duplicate-id candidates" in line and "No space left on device" in line
    assert _tree(work) == []

"""`--over-cap error|drop|truncate` (`PrepareConfig(over_cap=...)`): what `prepare` does with
sequences longer than `--max-seq-len`, and how the manifest counts it.

Every pool holds every kept id exactly once with its (clamped) length, and the token counts add
up exactly: `num_input_tokens` = `num_tokens` + `num_tokens_dropped` + `num_tokens_truncated`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from conftest import small_config, write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.collate import CollateOptions
from seqpack_cli.errors import ConfigError, InputError, PreparedFormatError
from seqpack_cli.over_cap import OVER_CAP, OverCap
from seqpack_cli.prepare import load_prepared, prepare_dataset
from seqpack_cli.prepare.job import prepare_summary
from seqpack_cli.prepare.pools.tuning import PoolTuning
from seqpack_cli.prepared.integrity import seal_manifest

OVER_CAP_FIELDS = (
    "num_input_tokens",
    "num_over_cap",
    "num_tokens_over_cap",
    "num_tokens_dropped",
    "num_truncated",
    "num_tokens_truncated",
)


def _write(tmp_path: Path, lengths, ids=None, kind: pa.DataType | None = None) -> Path:
    columns = {"n": pa.array(lengths, kind or pa.int64())}
    if ids is not None:
        columns["id"] = pa.array(ids, pa.int64())
    return write_parquet(tmp_path / "in" / "a.parquet", columns)


def _invoke(*args):
    return CliRunner().invoke(app, ["prepare", *map(str, args)])


def _one_line(result) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def _expected(lengths, ids, cap: int, policy: str) -> dict[int, list[int]]:
    """The oracle: {length kept (clamped): ascending ids}."""
    pools: dict[int, list[int]] = {}
    for length, seq_id in zip(lengths, ids, strict=True):
        if length > cap and policy == "drop":
            continue
        pools.setdefault(min(length, cap), []).append(seq_id)
    return {length: sorted(pools[length]) for length in sorted(pools)}


# ---- the option -------------------------------------------------------------------------------


def test_over_cap_defaults_to_error_and_filter_over_cap_is_drop(tmp_path: Path) -> None:
    assert OVER_CAP == ("error", "drop", "truncate", "split")
    config = small_config(tmp_path)
    assert (config.over_cap, config.filter_over_cap) == ("error", False)
    config = small_config(tmp_path, filter_over_cap=True)
    assert (config.over_cap, config.filter_over_cap) == ("drop", True)
    config = small_config(tmp_path, over_cap="drop")
    assert (config.over_cap, config.filter_over_cap) == ("drop", True)
    config = small_config(tmp_path, over_cap="drop", filter_over_cap=True)
    assert (config.over_cap, config.filter_over_cap) == ("drop", True)
    config = small_config(tmp_path, over_cap="truncate")
    assert (config.over_cap, config.filter_over_cap) == ("truncate", False)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"over_cap": "wrap"}, "over_cap is 'wrap'; expected one of error, drop, truncate, split"),
        ({"over_cap": "Drop"}, "over_cap is 'Drop'; expected one of error, drop, truncate, split"),
        ({"over_cap": 1}, "over_cap is 1; expected one of error, drop, truncate, split"),
        (
            {"over_cap": "split"},
            "over_cap='split' cuts the tokens of longer sequences into pieces, so it needs the "
            "token store: pass tokens_column",
        ),
        (
            {"over_cap": "truncate", "filter_over_cap": True},
            "filter_over_cap=True is over_cap='drop', but over_cap is 'truncate'; pass only one",
        ),
        (
            {"over_cap": "error", "filter_over_cap": True},
            "filter_over_cap=True is over_cap='drop', but over_cap is 'error'",
        ),
    ],
)
def test_bad_over_cap_is_one_config_error(tmp_path: Path, changes, message) -> None:
    with pytest.raises(ConfigError) as raised:
        small_config(tmp_path, **changes)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--over-cap", "wrap"],
            "error: --over-cap is 'wrap'; expected one of error, drop, truncate, split",
        ),
        (
            ["--over-cap", "split"],
            "error: --over-cap split cuts the tokens of longer sequences into pieces, so it needs "
            "the token store: pass --tokens-column (the column of token ids, e.g. input_ids), or "
            "--over-cap drop or --over-cap truncate",
        ),
        (
            ["--over-cap", "truncate", "--filter-over-cap"],
            "--filter-over-cap is --over-cap drop, but --over-cap is 'truncate'",
        ),
    ],
)
def test_cli_bad_over_cap_is_one_line(tmp_path: Path, extra, message) -> None:
    _write(tmp_path, [5, 20])
    line = _one_line(
        _invoke(
            tmp_path / "in",
            "--length-column",
            "n",
            "--max-seq-len",
            10,
            "-o",
            tmp_path / "out",
            *extra,
        )
    )
    assert message in line
    assert not (tmp_path / "out").exists()


def test_help_shows_over_cap() -> None:
    result = CliRunner().invoke(app, ["prepare", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "--over-cap" in result.output and "error|drop|truncate|split" in result.output
    assert "--filter-over-cap" in result.output


# ---- error ------------------------------------------------------------------------------------


def test_error_names_both_ways_out(tmp_path: Path) -> None:
    _write(tmp_path, [5, 20, 30])
    with pytest.raises(InputError) as raised:
        prepare_dataset(small_config(tmp_path))
    message = str(raised.value)
    assert "2 sequences in length column 'n' are longer than max_seq_len 10" in message
    assert (
        "(the longest has 30); pass over_cap='drop' to drop them or over_cap='truncate' to "
        "keep their first 10 tokens, or raise max_seq_len to 30" in message
    )
    line = _one_line(
        _invoke(tmp_path / "in", "--length-column", "n", "--max-seq-len", 10, "-o", tmp_path / "o")
    )
    assert (
        "(the longest has 30); pass --over-cap drop to drop them or --over-cap truncate to "
        "keep their first 10 tokens, or raise --max-seq-len to 30" in line
    )


def test_drop_of_everything_points_at_truncate(tmp_path: Path) -> None:
    _write(tmp_path, [20, 30])
    with pytest.raises(
        InputError,
        match=r"nothing is left to pack; raise max_seq_len, or pass "
        r"over_cap='truncate' to keep their first 10 tokens",
    ):
        prepare_dataset(small_config(tmp_path, over_cap="drop"))
    prepared = prepare_dataset(small_config(tmp_path, over_cap="truncate"))
    assert prepared.counts == {10: 2}
    assert prepared.pools[10].tolist() == [0, 1]


# ---- drop and truncate: counts, pools, manifest -----------------------------------------------


@pytest.mark.parametrize("policy", ["drop", "truncate"])
def test_counts_in_the_manifest_and_json(tmp_path: Path, policy: str) -> None:
    lengths = [3, 10, 11, 25, 7, 40]
    _write(tmp_path, lengths)
    prepared = prepare_dataset(small_config(tmp_path, over_cap=policy))
    summary = prepared.manifest["summary"]
    over = [x for x in lengths if x > 10]
    expected = {
        "num_input_tokens": sum(lengths),
        "num_over_cap": 3,
        "num_tokens_over_cap": sum(over),
        "num_dropped": 3 if policy == "drop" else 0,
        "num_tokens_dropped": sum(over) if policy == "drop" else 0,
        "num_truncated": 3 if policy == "truncate" else 0,
        "num_tokens_truncated": sum(x - 10 for x in over) if policy == "truncate" else 0,
    }
    assert {key: summary[key] for key in expected} == expected
    assert summary["dropped"] == {"over_max_seq_len": expected["num_dropped"]}
    assert prepared.manifest["config"]["over_cap"] == policy
    assert prepared.manifest["config"]["filter_over_cap"] is (policy == "drop")
    if policy == "drop":
        assert prepared.counts == {3: 1, 7: 1, 10: 1}
        assert summary["num_tokens"] == 20 and summary["max_length"] == 10
    else:
        assert prepared.counts == {3: 1, 7: 1, 10: 4}
        assert prepared.pools[10].tolist() == [1, 2, 3, 5]
        assert summary["num_tokens"] == 3 + 7 + 4 * 10 and summary["num_sequences"] == 6
    assert summary["num_input_tokens"] == (
        summary["num_tokens"] + summary["num_tokens_dropped"] + summary["num_tokens_truncated"]
    )
    # load_prepared reads it back; the --json document shows the counts.
    loaded = load_prepared(tmp_path / "out")
    assert loaded.manifest["summary"] == summary
    document = prepare_summary(loaded, seconds=0.0)
    assert {key: document[key] for key in expected} == expected
    assert document["config"]["over_cap"] == policy


def test_cli_json_and_table(tmp_path: Path) -> None:
    _write(tmp_path, [3, 10, 11, 25])
    common = [tmp_path / "in", "--length-column", "n", "--max-seq-len", 10]
    result = _invoke(*common, "-o", tmp_path / "t", "--over-cap", "truncate", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["config"]["over_cap"] == "truncate"
    assert (summary["num_truncated"], summary["num_tokens_truncated"]) == (2, 1 + 15)
    assert (summary["num_input_tokens"], summary["num_tokens"]) == (49, 33)
    result = _invoke(*common, "-o", tmp_path / "d", "--over-cap", "drop")
    assert result.exit_code == 0, result.output
    assert "2 over --max-seq-len dropped" in result.stdout
    assert "36 of the inputs' 49 left out" in result.stdout
    result = _invoke(*common, "-o", tmp_path / "t2", "--over-cap", "truncate")
    assert result.exit_code == 0, result.output
    assert "2 over --max-seq-len truncated" in result.stdout
    assert "16 of the inputs' 49 left out" in result.stdout


def test_filter_over_cap_is_the_same_as_drop(tmp_path: Path) -> None:
    _write(tmp_path, [3, 10, 11, 25, 7], ids=[50, 40, 30, 20, 10])
    common = [tmp_path / "in", "--length-column", "n", "--max-seq-len", 10, "--id-column", "id"]
    for name, flags in (("a", ["--filter-over-cap"]), ("b", ["--over-cap", "drop"])):
        result = _invoke(*common, "-o", tmp_path / name, *flags, "--quiet")
        assert result.exit_code == 0, result.output
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.*"))
    for path in files:
        assert (tmp_path / "a" / path).read_bytes() == (tmp_path / "b" / path).read_bytes(), path


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    lengths=st.lists(st.integers(1, 40), min_size=1, max_size=80),
    cap=st.integers(1, 30),
    policy=st.sampled_from(["drop", "truncate"]),
    ids=st.sampled_from(["row index", "dense", "sparse"]),
    scatter=st.booleans(),
)
def test_pools_hold_every_kept_id_once_with_its_clamped_length(
    tmp_path_factory, lengths, cap, policy, ids, scatter
) -> None:
    tmp_path = tmp_path_factory.mktemp("over_cap")
    rng = np.random.default_rng(len(lengths) * 31 + cap)
    if ids == "row index":
        seq_ids = list(range(len(lengths)))
        id_column = None
    else:
        step = 1 if ids == "dense" else 1 << 33
        seq_ids = (rng.permutation(len(lengths)) * step - 5).tolist()
        id_column = "id"
    if policy == "drop" and all(x > cap for x in lengths):
        lengths = [*lengths, 1]
        seq_ids = [*seq_ids, max(seq_ids) + 1]
    _write(tmp_path, lengths, None if id_column is None else seq_ids)
    tuning = PoolTuning(max_map_ids=0 if scatter else 1 << 27, batch_rows=7)
    prepared = prepare_dataset(
        small_config(tmp_path, max_seq_len=cap, over_cap=policy, id_column=id_column, tuning=tuning)
    )
    expected = _expected(lengths, seq_ids, cap, policy)
    got = {length: prepared.pools[length].tolist() for length in prepared.counts}
    assert got == expected
    placed = [seq_id for pool in got.values() for seq_id in pool]
    assert len(placed) == len(set(placed)), "every id once"
    summary = prepared.manifest["summary"]
    over = [x for x in lengths if x > cap]
    assert summary["num_input_tokens"] == sum(lengths)
    assert summary["num_tokens"] == sum(
        min(x, cap) for x in lengths if policy == "truncate" or x <= cap
    )
    assert summary["num_over_cap"] == len(over)
    assert summary["num_tokens_over_cap"] == sum(over)
    assert summary["num_tokens_truncated"] == (
        sum(over) - cap * len(over) if policy == "truncate" else 0
    )
    assert summary["num_tokens_dropped"] == (sum(over) if policy == "drop" else 0)
    assert summary["num_input_tokens"] == (
        summary["num_tokens"] + summary["num_tokens_dropped"] + summary["num_tokens_truncated"]
    )
    assert summary["num_sequences"] == sum(len(pool) for pool in expected.values())


# ---- lengths past int64, and manifests without the new fields ---------------------------------


def test_truncate_lengths_past_int64(tmp_path: Path) -> None:
    lengths = [5, 2**64 - 1, 2**63, 7]
    _write(tmp_path, lengths, kind=pa.uint64())
    prepared = prepare_dataset(small_config(tmp_path, over_cap="truncate"))
    assert prepared.counts == {5: 1, 7: 1, 10: 2}
    assert prepared.pools[10].tolist() == [1, 2]
    summary = load_prepared(tmp_path / "out").manifest["summary"]
    assert summary["num_input_tokens"] == sum(lengths)  # past int64, exact
    assert summary["num_tokens_truncated"] == 2**64 - 1 + 2**63 - 20


def _rewrite_manifest(path: Path, change) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    change(manifest)
    (path / "manifest.json").write_text(json.dumps(seal_manifest(manifest)))


def test_load_prepared_reads_manifests_without_the_new_fields(tmp_path: Path) -> None:
    _write(tmp_path, [3, 10, 11])
    prepare_dataset(small_config(tmp_path, filter_over_cap=True))

    def old(manifest: dict) -> None:
        del manifest["config"]["over_cap"]
        for key in OVER_CAP_FIELDS:
            del manifest["summary"][key]

    _rewrite_manifest(tmp_path / "out", old)
    loaded = load_prepared(tmp_path / "out")
    assert loaded.counts == {3: 1, 10: 1}
    assert loaded.manifest["summary"]["num_dropped"] == 1
    assert loaded.manifest["config"]["filter_over_cap"] is True
    result = CliRunner().invoke(app, ["stats", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ("config.over_cap", "wrap", r"config\.over_cap is \"wrap\" \(string\); expected \"error\""),
        ("summary.num_truncated", -1, r"summary\.num_truncated is -1 \(integer\)"),
        ("summary.num_tokens_truncated", 1.5, r"summary\.num_tokens_truncated is 1\.5"),
        ("summary.num_input_tokens", 2**128, r"summary\.num_input_tokens is"),
    ],
)
def test_load_prepared_checks_the_new_fields(tmp_path: Path, where, value, message) -> None:
    _write(tmp_path, [3, 10, 11])
    prepare_dataset(small_config(tmp_path, over_cap="truncate"))
    section, key = where.split(".")
    _rewrite_manifest(tmp_path / "out", lambda manifest: manifest[section].__setitem__(key, value))
    with pytest.raises(PreparedFormatError, match=message):
        load_prepared(tmp_path / "out")


def test_a_truncated_prepare_trains_on_each_sequences_first_tokens(tmp_path: Path) -> None:
    # From a token column to training rows: prepare counts the list lengths, truncates the long
    # ones, and the dataset over the prepared directory (which knows it was truncated) keeps the
    # first max_seq_len tokens of each, and every token of the others.
    pytest.importorskip("torch")
    from seqpack_cli.collate import FlatTokenSource
    from seqpack_cli.data import PackedDataset

    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 25, 40)
    sequences = [list(range(1000 * i, 1000 * i + n)) for i, n in enumerate(lengths.tolist())]
    data = write_parquet(
        tmp_path / "in" / "a.parquet",
        {"input_ids": pa.array(sequences, pa.list_(pa.int32()))},
    )
    prepare_dataset(small_config(tmp_path, length_column="input_ids", over_cap="truncate"))
    prepared = load_prepared(tmp_path / "out")
    assert prepared.manifest["summary"]["num_truncated"] == int((lengths > 10).sum())
    flat = np.concatenate([np.array(s, dtype=np.int64) for s in sequences])
    tokens = FlatTokenSource(flat, np.concatenate([[0], np.cumsum(lengths)]))
    dataset = PackedDataset(
        prepared, tokens, collate=CollateOptions(pad_token_id=-1, format="padding_free"), seed=0
    )
    seen = []
    for k in range(len(dataset)):
        row = dataset[k]["input_ids"][0].tolist()
        assert len(row) <= 10
        bins = dataset.plan[k]
        expected = [t for seq_id in bins for t in sequences[seq_id][:10]]
        assert row == expected
        seen += bins
    assert sorted(seen) == list(range(len(sequences))), "every sequence once"
    assert data.exists()


# ---- OverCap: the one rule every path asks ----------------------------------------------------

_POLICY_HISTOGRAMS = st.dictionaries(st.integers(1, 60), st.integers(1, 9), min_size=1, max_size=12)


@given(_POLICY_HISTOGRAMS, st.integers(1, 30), st.sampled_from(["drop", "truncate", "split"]))
def test_over_cap_kept_histogram_conserves_sequences_and_tokens(histogram, cap, policy) -> None:
    rule = OverCap(policy, cap)
    kept = rule.kept_histogram(histogram)
    summary = rule.summary(histogram)
    num_input = sum(histogram.values())
    assert all(length <= cap for length in kept), "no kept length is over max_seq_len"
    assert list(kept) == sorted(kept)
    num_kept, kept_tokens = sum(kept.values()), sum(n * c for n, c in kept.items())
    # every sequence is kept whole, kept cut (truncate), split into pieces, or dropped
    over = sum(c for n, c in histogram.items() if n > cap)
    assert summary["num_over_cap"] == over
    assert (
        num_kept
        == num_input - summary["num_dropped"] - summary["num_split"] + summary["num_pieces"]
    )
    assert summary["num_dropped"] + summary["num_truncated"] + summary["num_split"] == over
    assert (
        kept_tokens + summary["num_tokens_dropped"] + summary["num_tokens_truncated"]
        == summary["num_input_tokens"]
        == sum(n * c for n, c in histogram.items())
    )
    if any(n <= cap for n in histogram) or policy != "drop":
        rule.check(histogram, "n")  # something is left to pack: no error


@given(_POLICY_HISTOGRAMS, st.integers(1, 30), st.sampled_from(OVER_CAP))
def test_over_cap_on_arrays_and_one_sequence_at_a_time_agrees_with_the_histogram(
    histogram, cap, policy
) -> None:
    rule = OverCap(policy, cap)
    lengths = np.array(sorted(histogram), dtype=np.int64)
    counts = np.array([histogram[n] for n in sorted(histogram)], dtype=np.int64)
    got_lengths, got_counts = rule.kept_arrays(lengths, counts)
    expected = rule.kept_histogram(histogram) if policy != "error" else {}
    if policy == "error":  # error keeps what fits (the rest it refuses in check)
        expected = {n: c for n, c in histogram.items() if n <= cap}
    assert dict(zip(got_lengths.tolist(), got_counts.tolist(), strict=True)) == expected
    # the same lengths as rows: keep (drop, truncate) or pieces (split) give that histogram
    rows = np.repeat(lengths, counts)
    if policy == "split":
        pieces, per_row = rule.pieces(rows)
        assert int(per_row.sum()) == pieces.size and int(pieces.sum()) == int(rows.sum())
        stored = pieces
    elif policy == "error":
        stored = rows[rows <= cap]
    else:
        stored, ids = rule.keep(rows.copy(), np.arange(rows.size, dtype=np.int64))
        assert ids.size == stored.size
    assert dict(Counter(stored.tolist())) == expected


def _kept_oracle(histogram: dict[int, int], cap: int, policy: str) -> dict[int, int]:
    """What is packed, sequence group by sequence group in Python ints: each length up to `cap`
    kept; a longer one kept at `cap` (truncate), cut into full pieces of `cap` and its remainder
    (split), or left out (drop, error)."""
    kept: Counter[int] = Counter()
    for length, count in histogram.items():
        if length <= cap:
            kept[length] += count
        elif policy == "truncate":
            kept[cap] += count
        elif policy == "split":
            kept[cap] += (length // cap) * count
            if length % cap:
                kept[length % cap] += count
    return dict(sorted(kept.items()))


# Lengths small, near 2**63 (past int64) and near 2**64 (a uint64 column's largest); counts
# small and large enough that the pieces' counts overflow int64.
_WIDE_LENGTHS = st.one_of(
    st.integers(1, 60),
    st.integers(2**63 - 3, 2**63 + 3),
    st.integers(2**64 - 5, 2**64 - 1),
    st.integers(1, 2**64 - 1),
)
_WIDE_COUNTS = st.one_of(st.integers(0, 9), st.integers(2**61, 2**63 - 1))
_WIDE_HISTOGRAMS = st.dictionaries(_WIDE_LENGTHS, _WIDE_COUNTS, max_size=10)


@settings(max_examples=300, deadline=None)
@given(
    _WIDE_HISTOGRAMS,
    st.one_of(st.integers(1, 30), st.integers(1, 2**31 - 1)),
    st.sampled_from(OVER_CAP),
)
def test_kept_histogram_and_kept_arrays_are_one_exact_rule(histogram, cap, policy) -> None:
    rule = OverCap(policy, cap)
    expected = _kept_oracle(histogram, cap, policy)
    kept = rule.kept_histogram(histogram)
    assert kept == expected and list(kept) == sorted(kept)
    assert all(type(n) is int and type(c) is int for n, c in kept.items())
    # The arrays the engines hold: Python ints always; uint64 or int64 where the lengths fit.
    lengths, counts = list(histogram), [histogram[n] for n in histogram]
    inputs = [(np.array(lengths, dtype=object), np.array(counts, dtype=object))]
    if all(c < 2**63 for c in counts):
        if all(n < 2**64 for n in lengths):
            inputs.append((np.array(lengths, dtype=np.uint64), np.array(counts, dtype=np.int64)))
        if all(n < 2**63 for n in lengths):
            inputs.append((np.array(lengths, dtype=np.int64), np.array(counts, dtype=np.int64)))
    for array_lengths, array_counts in inputs:
        got_lengths, got_counts = rule.kept_arrays(array_lengths, array_counts)
        got = dict(zip(got_lengths.tolist(), got_counts.tolist(), strict=True))
        assert got == expected, (array_lengths.dtype, got)
        if max(expected.values(), default=0) >= 2**63:  # int64 could not hold them
            assert got_counts.dtype == object
    # Tokens: split keeps every one, truncate the first `cap` of each, drop and error none of
    # the longer sequences'.
    kept_tokens = sum(n * c for n, c in kept.items())
    if policy == "split":
        assert kept_tokens == sum(n * c for n, c in histogram.items())
        assert sum(kept.values()) == sum(-(-n // cap) * c for n, c in histogram.items())
    elif policy == "truncate":
        assert kept_tokens == sum(min(n, cap) * c for n, c in histogram.items())
        assert sum(kept.values()) == sum(histogram.values())
    else:
        assert kept_tokens == sum(n * c for n, c in histogram.items() if n <= cap)


def test_kept_arrays_stays_int64_where_it_fits() -> None:
    # The Dask driver holds one kept histogram per group: no object arrays for ordinary data.
    lengths, counts = np.array([3, 12, 25], dtype=np.int64), np.array([2, 1, 4], dtype=np.int64)
    for policy in OVER_CAP:
        got_lengths, got_counts = OverCap(policy, 10).kept_arrays(lengths, counts)
        assert got_lengths.dtype == np.int64 and got_counts.dtype == np.int64
    got_lengths, got_counts = OverCap("split", 10).kept_arrays(lengths, counts)
    assert (got_lengths.tolist(), got_counts.tolist()) == ([2, 3, 5, 10], [1, 2, 4, 9])


@given(_POLICY_HISTOGRAMS, st.integers(1, 30))
def test_over_cap_error_names_the_count_and_the_option(histogram, cap) -> None:
    over = {n: c for n, c in histogram.items() if n > cap}
    rule = OverCap("error", cap)
    if not over:
        rule.check(histogram, "n")
        return
    with pytest.raises(InputError) as raised:
        rule.check(histogram, "n")
    count = sum(over.values())
    assert str(raised.value).startswith(
        f"{count} sequences in length column 'n' are longer than max_seq_len {cap} "
        f"(the longest has {max(over)}); pass over_cap='drop'"
    )
    assert "pass --over-cap drop to drop them or --over-cap truncate" in (
        raised.value.cli_message()
    )


def test_over_cap_supplies_the_pool_queries_parameters_and_the_cut() -> None:
    assert OverCap("truncate", 8).sql_params() == {"max_seq_len": 8, "truncate": True}
    for policy in ("error", "drop", "split"):
        assert OverCap(policy, 8).sql_params() == {"max_seq_len": 8, "truncate": False}
    assert [OverCap(p, 8).cut_to for p in OVER_CAP] == [None, None, 8, None]
    assert [OverCap(p, 8).checked_policy for p in OVER_CAP] == [
        "error",
        "drop",
        "truncate",
        "truncate",
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        OverCap("drop", 8).policy = "truncate"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("policy", "max_seq_len", "message"),
    [
        ("wrap", 8, "over_cap is 'wrap'; expected one of error, drop, truncate, split"),
        (None, 8, "over_cap is None; expected one of error, drop, truncate, split"),
        ("drop", 0, "max_seq_len is 0; expected a positive integer"),
    ],
)
def test_bad_over_cap_rule_is_one_config_error(policy, max_seq_len, message) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        OverCap(policy, max_seq_len)


def test_the_prepare_config_hands_out_its_rule(tmp_path: Path) -> None:
    config = small_config(tmp_path, over_cap="truncate")
    assert config.over_cap_rule == OverCap("truncate", config.max_seq_len)


@pytest.mark.parametrize("policy", ["error", "drop", "truncate"])
def test_load_prepared_exposes_the_rule_it_was_prepared_with(tmp_path: Path, policy) -> None:
    # Training code asks `prepared.over_cap` (from the schema-checked manifest), never the raw
    # config: cut_to is what the collator cuts a stored sequence to.
    _write(tmp_path, [3, 10] if policy == "error" else [3, 10, 11])
    prepare_dataset(small_config(tmp_path, over_cap=policy))
    loaded = load_prepared(tmp_path / "out")
    assert loaded.over_cap == OverCap(policy, 10)
    assert loaded.over_cap.cut_to == (10 if policy == "truncate" else None)
    # a repack to a smaller max_seq_len that cuts records truncate at the new cap
    assert loaded.repack(max_seq_len=9, over_cap="truncate").over_cap == OverCap("truncate", 9)


def test_prepared_over_cap_of_a_manifest_without_it_follows_filter_over_cap(
    tmp_path: Path,
) -> None:
    _write(tmp_path, [3, 10, 11])
    prepare_dataset(small_config(tmp_path, filter_over_cap=True))
    _rewrite_manifest(tmp_path / "out", lambda manifest: manifest["config"].pop("over_cap"))
    assert load_prepared(tmp_path / "out").over_cap == OverCap("drop", 10)
    assert OverCap.from_config({"max_seq_len": 10}) == OverCap("error", 10)


def test_training_reads_the_cut_from_prepared_over_cap(tmp_path: Path) -> None:
    # The datasets ask `prepared.over_cap`, not manifest["config"]: an object that carries only
    # the rule is enough, and a raw config saying truncate without the rule is not read.
    from types import SimpleNamespace

    from seqpack_cli.data.epochs import truncated_by_prepare

    assert truncated_by_prepare(SimpleNamespace(over_cap=OverCap("truncate", 8)))
    assert not truncated_by_prepare(SimpleNamespace(over_cap=OverCap("drop", 8)))
    raw = {"config": {"over_cap": "truncate", "max_seq_len": 8}}
    assert not truncated_by_prepare(SimpleNamespace(manifest=raw))
    _write(tmp_path, [3, 10, 11])
    assert truncated_by_prepare(prepare_dataset(small_config(tmp_path, over_cap="truncate")))


@given(st.lists(st.integers(0, 50), max_size=20), st.integers(1, 30), st.sampled_from(OVER_CAP))
def test_over_cap_cut_is_what_the_collator_reads(lengths, cap, policy) -> None:
    array = np.array(lengths, dtype=np.int64)
    cut = OverCap(policy, cap).cut(array)
    assert cut is not array and array.tolist() == lengths, "a new array; the input is unchanged"
    expected = [min(n, cap) for n in lengths] if policy == "truncate" else lengths
    assert cut.tolist() == expected


# Where a module may still compare a value with a policy's name. Everything else asks an OverCap.
_DECIDES_BY_NAME = {
    "over_cap.py": "the rule itself",
    "prepare/config.py": "the option's own checks: filter_over_cap is drop, split needs a store",
    "prepared/repack.py": "a repack's policy options and the manifest fields it records",
    "packing/online.py": "the online packer's own `overlong` option (a stream, no prepare)",
}


def _policy_comparisons(source: str) -> list[int]:
    """Lines of `source` that compare something with "drop", "truncate" or "split"."""
    import ast

    names = {"drop", "truncate", "split"}
    lines = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        for side in [node.left, *node.comparators]:
            values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            if any(isinstance(v, ast.Constant) and v.value in names for v in values):
                lines.append(node.lineno)
    return lines


def test_only_over_cap_decides_by_the_policys_name() -> None:
    package = Path(__file__).resolve().parents[1] / "seqpack_cli"
    deciding = {
        path.relative_to(package).as_posix(): lines
        for path in sorted(package.rglob("*.py"))
        if (lines := _policy_comparisons(path.read_text(encoding="utf-8")))
    }
    assert {name: lines for name, lines in deciding.items() if name not in _DECIDES_BY_NAME} == {}


def test_the_policy_scan_finds_a_decision() -> None:
    found = _policy_comparisons('if config.over_cap == "truncate":\n    pass\nx = p in ("drop",)\n')
    assert found == [1, 3]

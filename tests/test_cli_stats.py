"""`seqpack stats` end to end through typer's CliRunner: every option, both modes, the errors."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_parquet
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.packing.histogram import pack_length_histogram_batched
from seqpack_cli.prepare import PrepareConfig, prepare_dataset
from seqpack_cli.prepared import load_prepared
from seqpack_cli.stats import PackingStats
from seqpack_cli.stats.baselines import DEFAULT_SAMPLE_SIZE

runner = CliRunner()
MAX_SEQ_LEN = 512

PROFILE_KEYS = {
    "kind",
    "path",
    "verified",
    "sample_size",
    "seed",
    "max_seq_len",
    "max_seqs_per_bin",
    "stats",
    "lower_bound_by",
    "lengths",
    "no_packing",
    "sequential",
    "left_out",
    "length_histogram",
    "bin_fullness",
    "seqs_per_bin",
    "num_templates",
    "top_templates",
    "prepare",
}
SWEEP_KEYS = {
    "kind",
    "source",
    "inputs",
    "length_column",
    "lengths",
    "length_histogram",
    "sample_size",
    "seed",
    "max_seqs_per_bin",
    "packer",
    "left_out",
    "rows",
}
ROW_KEYS = {
    "max_seq_len",
    "max_seqs_per_bin",
    "num_over_cap",
    "num_tokens_over_cap",
    "share_over_cap",
    "share_tokens_over_cap",
    "num_tokens_truncated",
    "share_tokens_truncated",
    "num_pieces_if_split",
    "attention",
    "seqpack",
    "uncapped_bins",
    "bins_vs_uncapped",
    "seqs_per_bin",
    "lower_bound_by",
    "no_packing",
    "sequential",
    "bins_saved_vs_sequential",
}
BASELINE_KEYS = {
    "method",
    "num_bins",
    "num_sequences",
    "num_tokens",
    "capacity",
    "efficiency",
    "padding",
    "padding_ratio",
    "avg_seqs_per_bin",
    "num_simulated",
    "estimated",
    "max_seqs_per_bin",
}


# ---- fixtures: a small parquet dataset and a prepared directory made from it ----------------


@pytest.fixture(scope="module")
def lengths() -> np.ndarray:
    # 3,000 sequences, mostly short, 60 of them over MAX_SEQ_LEN (513..900)
    rng = np.random.default_rng(11)
    short = np.minimum(rng.lognormal(4.5, 0.7, 2_940).astype(np.int64) + 1, MAX_SEQ_LEN)
    return np.concatenate([short, rng.integers(MAX_SEQ_LEN + 1, 901, 60)])


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory, lengths: np.ndarray) -> Path:
    directory = tmp_path_factory.mktemp("data")
    for part, chunk in enumerate(np.array_split(lengths, 2)):
        table = pa.table({"num_tokens": pa.array(chunk, pa.int64()), "text": ["x"] * chunk.size})
        pq.write_table(table, directory / f"part-{part}.parquet")
    return directory


@pytest.fixture(scope="module")
def prepared_dir(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    output = tmp_path_factory.mktemp("prep") / "prepared"
    config = PrepareConfig(
        inputs=[str(data_dir)],
        length_column="num_tokens",
        max_seq_len=MAX_SEQ_LEN,
        output=output,
        filter_over_cap=True,
    )
    prepare_dataset(config)
    return output


def _histogram(lengths: np.ndarray) -> dict[int, int]:
    values, counts = np.unique(lengths, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist(), strict=True))


def _invoke(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args), env={"COLUMNS": "150"})


def _invoke_sweep(source: Path, *args: str):  # type: ignore[no-untyped-def]
    """`seqpack stats SOURCE --length-column num_tokens ARGS...`: a sweep of parquet lengths."""
    return _invoke("stats", str(source), "--length-column", "num_tokens", *args)


def _one_line_error(result, exit_code: int = 1) -> str:  # type: ignore[no-untyped-def]
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


def _assert_standalone_html(document: str) -> None:
    assert document.startswith("<!DOCTYPE html>") and document.rstrip().endswith("</html>")
    assert "<svg" in document
    assert "http" not in document.lower()  # nothing fetched from anywhere
    assert not re.search(r"<script|<link|<img|\bsrc=|\bhref=|url\(|@import", document)


# ---- help ---------------------------------------------------------------------------------


def test_every_command_has_help() -> None:
    result = _invoke("--help")
    assert result.exit_code == 0 and "stats" in result.stdout
    for command in app.registered_commands:
        name = command.name or command.callback.__name__  # type: ignore[union-attr]
        help_result = _invoke(name, "--help")
        assert help_result.exit_code == 0, name
        assert len(help_result.stdout) > 200, name


def test_stats_help_documents_the_options_baselines_and_json_keys() -> None:
    text = " ".join(_invoke("stats", "--help").stdout.split())
    text = re.sub(r"[│╭╮╰╯─]", "", text)
    for phrase in (
        "--max-seq-len 1024 --max-seq-len 2048",  # repeated
        "--max-seq-len 1024,2048,4096",  # comma list
        "next-fit",
        "padded to max_seq_len",
        "an estimate",
        "bins_saved_vs_sequential",
        "share_tokens_truncated",
        "top_templates",
        "lower_bound_by",
    ):
        assert phrase in " ".join(text.split()), phrase
    assert str(DEFAULT_SAMPLE_SIZE) in text  # the CLI default is the library's


# ---- a prepared directory ---------------------------------------------------------------------


def test_prepared_terminal_report(prepared_dir: Path) -> None:
    result = _invoke("stats", str(prepared_dir))
    assert result.exit_code == 0, result.output
    out = result.stdout
    stats = PackingStats.from_templates(load_prepared(prepared_dir).templates, MAX_SEQ_LEN)
    assert f"{stats.num_bins:,}" in out and f"{stats.num_sequences:,}" in out
    for heading in ("Sequence lengths", "Bin fullness", "Sequences per bin", "Most common"):
        assert heading in out
    assert "no packing" in out and "sequential" in out
    # dropped by prepare, from the manifest: sequences and tokens, with their shares
    summary = load_prepared(prepared_dir).manifest["summary"]
    line = next(line for line in out.splitlines() if "dropped by prepare" in line)
    text = " ".join(line.split())
    assert text.startswith("dropped by prepare 60 sequences (")
    share = summary["num_tokens_dropped"] / summary["num_input_tokens"]
    assert f"{summary['num_tokens_dropped']:,} tokens lost ({share:.2%} of the inputs')" in text


def test_prepared_json_agrees_with_packing_stats(prepared_dir: Path) -> None:
    result = _invoke("stats", str(prepared_dir), "--json", "--top", "3", "--seed", "5")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document) == PROFILE_KEYS
    prepared = load_prepared(prepared_dir)
    direct = PackingStats.from_templates(prepared.templates, MAX_SEQ_LEN)
    assert document["stats"] == direct.to_dict()
    assert max(document["lower_bound_by"].values()) == direct.lower_bound_bins
    assert set(document["lower_bound_by"]) == {"volume", "size", "number"}
    assert document["kind"] == "prepared" and document["verified"] is False
    assert document["seed"] == 5 and document["max_seq_len"] == MAX_SEQ_LEN
    assert set(document["no_packing"]) == set(document["sequential"]) == BASELINE_KEYS
    # no packing: one row per sequence
    assert document["no_packing"]["num_bins"] == sum(prepared.counts.values())
    # top 3 templates, most common first, as in templates.json
    top = document["top_templates"]
    assert len(top) == 3
    assert [entry["num_bins"] for entry in top] == sorted(prepared.templates.values())[::-1][:3]
    for entry in top:
        assert prepared.templates[tuple(entry["template"])] == entry["num_bins"]
    assert sum(b["count"] for b in document["bin_fullness"]) == direct.num_bins
    assert sum(b["count"] for b in document["length_histogram"]) == direct.num_sequences
    assert document["prepare"]["summary"]["num_dropped"] == 60


def test_prepared_html_and_verify(prepared_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    result = _invoke("stats", str(prepared_dir), "--verify", "--html", str(target), "--quiet")
    assert result.exit_code == 0, result.output
    _assert_standalone_html(target.read_text(encoding="utf-8"))
    assert "sha256 of every file" in result.stdout
    assert json.loads(_invoke("stats", str(prepared_dir), "--verify", "--json").stdout)["verified"]


def test_verify_catches_a_tampered_prepared_dir(prepared_dir: Path, tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "tampered"
    shutil.copytree(prepared_dir, copy)
    pool = sorted((copy / "pools").glob("*.npy"))[0]
    data = bytearray(pool.read_bytes())
    data[-1] ^= 0xFF  # same size, different bytes: only the sha256 can tell
    pool.write_bytes(bytes(data))
    assert _invoke("stats", str(copy)).exit_code == 0  # sizes alone look fine
    line = _one_line_error(_invoke("stats", str(copy), "--verify"))
    assert line.startswith("error:") and "sha256" in line and pool.name in line


def test_missing_prepared_dir(tmp_path: Path) -> None:
    line = _one_line_error(_invoke("stats", str(tmp_path / "nope")))
    assert "does not exist" in line and "seqpack prepare" in line


def test_directory_without_manifest(data_dir: Path) -> None:
    line = _one_line_error(_invoke("stats", str(data_dir)))
    assert "not a prepared directory" in line and "--length-column" in line


# ---- a max_seq_len sweep ----------------------------------------------------------------------


def test_sweep_json_agrees_with_numpy(data_dir: Path, lengths: np.ndarray) -> None:
    result = _invoke_sweep(
        data_dir,
        "--max-seq-len",
        "1024",
        "--max-seq-len",
        "256,512",
        "--json",
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert set(document) == SWEEP_KEYS
    assert document["kind"] == "sweep" and document["source"] == "parquet"
    assert len(document["inputs"]) == 2 and document["length_column"] == "num_tokens"
    assert document["lengths"]["num_sequences"] == lengths.size
    assert document["lengths"]["num_tokens"] == int(lengths.sum())
    assert [row["max_seq_len"] for row in document["rows"]] == [256, 512, 1024]
    for row in document["rows"]:
        assert set(row) == ROW_KEYS
        cap = row["max_seq_len"]
        kept = lengths[lengths <= cap]
        # sequences over the cap: counted, then left out of every figure
        assert row["num_over_cap"] == int((lengths > cap).sum())
        assert row["num_tokens_over_cap"] == int(lengths[lengths > cap].sum())
        # the trade-off: dropped or truncated, as counts and shares; attention vs padded rows
        over = lengths[lengths > cap]
        assert row["share_over_cap"] == pytest.approx(over.size / lengths.size)
        assert row["share_tokens_over_cap"] == pytest.approx(over.sum() / lengths.sum())
        assert row["num_tokens_truncated"] == int((over - cap).sum())
        assert row["share_tokens_truncated"] == pytest.approx((over - cap).sum() / lengths.sum())
        assert row["num_pieces_if_split"] == int(np.ceil(over / cap).sum())
        squares = int((kept.astype(object) ** 2).sum())
        attention = row["attention"]
        assert (attention["packed"], attention["padded"]) == (squares, kept.size * cap * cap)
        assert attention["packed_vs_padded"] == pytest.approx(squares / (kept.size * cap * cap))
        assert attention["per_bin_mean"] == pytest.approx(squares / row["seqpack"]["num_bins"])
        direct = PackingStats.from_templates(
            pack_length_histogram_batched(_histogram(kept), cap), cap
        )
        assert row["seqpack"] == direct.to_dict()
        assert max(row["lower_bound_by"].values()) == direct.lower_bound_bins
        # no packing: one row per kept sequence, padded to the cap
        assert row["no_packing"]["num_bins"] == kept.size
        assert row["no_packing"]["efficiency"] == pytest.approx(kept.sum() / (kept.size * cap))
        # 3,000 sequences < the default sample: the whole dataset is simulated, not scaled
        assert row["sequential"]["num_simulated"] == kept.size
        assert not row["sequential"]["estimated"]
        assert direct.num_bins <= row["sequential"]["num_bins"] <= kept.size


def test_max_seq_len_forms_agree(data_dir: Path) -> None:
    repeated = _invoke_sweep(data_dir, "--json", "--max-seq-len", "512", "--max-seq-len", "256")
    comma = _invoke_sweep(data_dir, "--json", "--max-seq-len", "256,512")
    assert repeated.exit_code == comma.exit_code == 0
    assert json.loads(repeated.stdout) == json.loads(comma.stdout)


def test_sweep_terminal_report_and_html(data_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "sweep.html"
    result = _invoke_sweep(
        data_dir / "*.parquet",
        "--max-seq-len",
        "256,512",
        "--html",
        str(target),
    )
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "2 parquet files" in out and "'num_tokens'" in out
    assert "Per max_seq_len" in out and "Efficiency" in out and "next-fit" in out
    assert "What each max_seq_len costs" in out and "tokens cut" in out
    assert "HTML report written" in result.stderr
    _assert_standalone_html(target.read_text(encoding="utf-8"))


def test_sweep_every_option(data_dir: Path, tmp_path: Path) -> None:
    result = _invoke_sweep(
        data_dir,
        "--max-seq-len",
        "64",
        "--max-seqs-per-bin",
        "2",
        "--sample-size",
        "500",
        "--seed",
        "3",
        "--threads",
        "1",
        "--memory-limit",
        "1GB",
        "--temp-dir",
        str(tmp_path),
        "--quiet",
        "--json",
    )
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    row = document["rows"][0]
    assert document["max_seqs_per_bin"] == [2] and row["seqpack"]["max_seqs_in_bin"] <= 2
    assert row["max_seqs_per_bin"] == 2 == row["sequential"]["max_seqs_per_bin"]
    assert (document["sample_size"], document["seed"]) == (500, 3)
    # more kept sequences than the sample: simulated on 500 and scaled up
    assert row["sequential"]["num_simulated"] == 500 and row["sequential"]["estimated"]


def test_sweep_over_a_prepared_dir_uses_its_counts(prepared_dir: Path) -> None:
    result = _invoke("stats", str(prepared_dir), "--max-seq-len", "128,512", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["source"] == "prepared"
    counts = Counter(load_prepared(prepared_dir).counts)
    assert document["lengths"]["num_sequences"] == sum(counts.values())
    assert document["rows"][1]["num_over_cap"] == 0  # prepare dropped those already


def test_bound_counts_sequences_that_cannot_share_a_bin(tmp_path: Path) -> None:
    # {600: 10, 10: 1} at 1000: 7 bins by volume, but no two 600s share a bin, so the engine's
    # 10 bins are optimal; `seqpack stats` used to report "lower bound 7".
    write_parquet(tmp_path / "data" / "a.parquet", {"num_tokens": [600] * 10 + [10]})
    result = _invoke_sweep(tmp_path / "data", "--max-seq-len", "1000", "--json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["rows"][0]
    assert (row["seqpack"]["num_bins"], row["seqpack"]["lower_bound_bins"]) == (10, 10)
    assert row["lower_bound_by"] == {"volume": 7, "size": 10, "number": 10}


def test_stats_of_a_capped_prepared_dir_use_its_cap(tmp_path: Path) -> None:
    # 40 sequences of 10 tokens, at most 4 a bin: 400 tokens fit one bin of 512, but the cap
    # needs ceil(40 / 4) = 10 bins. `seqpack stats` reads the cap from the manifest's config.
    write_parquet(tmp_path / "data" / "a.parquet", {"num_tokens": [10] * 40})
    output = tmp_path / "prepared"
    prepare_dataset(
        PrepareConfig(
            inputs=[str(tmp_path / "data")],
            length_column="num_tokens",
            max_seq_len=MAX_SEQ_LEN,
            output=output,
            max_seqs_per_bin=4,
        )
    )
    document = json.loads(_invoke("stats", str(output), "--json").stdout)
    assert (document["stats"]["num_bins"], document["stats"]["lower_bound_bins"]) == (10, 10)
    assert document["lower_bound_by"] == {"volume": 1, "size": 1, "number": 10}
    out = _invoke("stats", str(output)).stdout
    assert "10 (lower bound 10, +0.00%)" in out


def test_caps_are_swept_from_the_command_line(data_dir: Path, lengths: np.ndarray) -> None:
    # `--max-seqs-per-bin 8,16` was a usage error: caps are compared like max_seq_len values,
    # every pair, each row under its own cap for seqpack and both baselines.
    result = _invoke_sweep(
        data_dir,
        "--max-seq-len", "128,512",
        "--max-seqs-per-bin", "2,4",
        "--max-seqs-per-bin", "none",
        "--sample-size", "500",
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["max_seqs_per_bin"] == [2, 4, None]
    keys = [(row["max_seq_len"], row["max_seqs_per_bin"]) for row in document["rows"]]
    assert keys == [(128, 2), (128, 4), (128, None), (512, 2), (512, 4), (512, None)]
    for row in document["rows"]:
        cap = row["max_seqs_per_bin"]
        assert row["sequential"]["max_seqs_per_bin"] == cap
        if cap is not None:
            assert row["seqpack"]["max_seqs_in_bin"] <= cap
            kept = int((lengths <= row["max_seq_len"]).sum())
            assert row["seqpack"]["num_bins"] >= -(-kept // cap)
            assert row["sequential"]["num_bins"] >= -(-kept // cap)
        assert sum(bucket["count"] for bucket in row["seqs_per_bin"]) == row["seqpack"]["num_bins"]
    out = _invoke_sweep(data_dir, "--max-seq-len", "512", "--max-seqs-per-bin", "2,none").stdout
    assert "cap (max sequences per bin): 2, none" in out and "Per cap" in out


def test_prepared_report_shows_the_tokens_prepare_left_out(prepared_dir: Path) -> None:
    summary = load_prepared(prepared_dir).manifest["summary"]
    assert summary["num_tokens_dropped"] > 0  # the fixture drops the sequences over 512
    document = json.loads(_invoke("stats", str(prepared_dir), "--json").stdout)
    left_out = document["left_out"]
    assert left_out["num_dropped"] == summary["num_dropped"] == 60
    assert left_out["num_tokens_dropped"] == summary["num_tokens_dropped"]
    assert left_out["num_input_tokens"] == summary["num_input_tokens"]
    assert left_out["share_tokens_dropped"] == pytest.approx(
        summary["num_tokens_dropped"] / summary["num_input_tokens"]
    )
    assert left_out["num_truncated"] == 0 == left_out["num_tokens_truncated"]
    # the sweep of its lengths says it too: counts.json no longer holds them
    sweep = _invoke("stats", str(prepared_dir), "--max-seq-len", "256", "--json")
    assert json.loads(sweep.stdout)["left_out"] == left_out
    text = " ".join(_invoke("stats", str(prepared_dir), "--max-seq-len", "256").stdout.split())
    assert f"{summary['num_tokens_dropped']:,} tokens lost" in text
    html = prepared_dir.parent / "report.html"
    assert _invoke("stats", str(prepared_dir), "--html", str(html), "--quiet").exit_code == 0
    assert f"{summary['num_tokens_dropped']:,} tokens lost" in html.read_text()


# ---- errors ---------------------------------------------------------------------------------


def test_usage_errors_exit_2(data_dir: Path) -> None:
    result = _invoke_sweep(data_dir, "--max-seq-len", "abc")
    assert result.exit_code == 2 and "1024,2048" in result.output
    result = _invoke_sweep(data_dir, "--max-seq-len", "0")
    assert result.exit_code == 2
    # the issue's `--max-seq-len 1024 2048` form: 2048 lands among the inputs; say what to do
    result = _invoke(
        "stats", "--max-seq-len", "1024", "2048", str(data_dir), "--length-column", "n"
    )
    assert result.exit_code == 2 and "--max-seq-len 1024,2048" in " ".join(result.output.split())
    result = _invoke_sweep(data_dir, "--max-seq-len", "512", "--max-seqs-per-bin", "8,x")
    assert result.exit_code == 2
    assert "'x' is not a positive integer or none (no cap)" in " ".join(result.output.split())


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (("--max-seq-len", "512"), "--length-column is required"),
        (("--length-column", "num_tokens"), "without --max-seq-len"),
        (("--length-column", "num_tokens", "--max-seq-len", "512", "--verify"), "--verify"),
        (("--length-column", "no_such_column", "--max-seq-len", "512"), "no_such_column"),
    ],
)
def test_one_line_errors(data_dir: Path, extra: tuple[str, ...], expected: str) -> None:
    line = _one_line_error(_invoke("stats", str(data_dir), *extra))
    assert line.startswith("error:") and expected in line


def test_bad_inputs_and_paths(data_dir: Path, prepared_dir: Path, tmp_path: Path) -> None:
    line = _one_line_error(_invoke("stats", str(data_dir), str(prepared_dir)))
    assert "--max-seq-len" in line
    line = _one_line_error(
        _invoke("stats", str(prepared_dir), "--length-column", "x", "--max-seq-len", "512")
    )
    assert "does not apply" in line
    missing = tmp_path / "no" / "such" / "dir" / "r.html"
    line = _one_line_error(_invoke("stats", str(prepared_dir), "--html", str(missing)))
    assert "--html" in line
    line = _one_line_error(
        _invoke("stats", str(tmp_path / "*.parquet"), "--length-column", "n", "--max-seq-len", "8")
    )
    assert "matches no files" in line


def test_stats_reads_json_lines_as_it_reads_the_same_rows_as_parquet(tmp_path: Path) -> None:
    # The sweep of a JSON Lines file equals the sweep of its rows written as parquet; a bad
    # value is one line naming the file, the line and the column.
    lengths = [5, 9, 9, 30, 2, 17, 64, 1, 33]
    pq.write_table(pa.table({"n": pa.array(lengths, pa.int64())}), tmp_path / "rows.parquet")
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps({"n": n, "x": "a"}) + "\n" for n in lengths))
    reports = []
    for path in (tmp_path / "rows.parquet", jsonl):
        args = ["stats", str(path), "--length-column", "n", "--max-seq-len", "32,64", "--json"]
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        report.pop("inputs")
        reports.append(report)
    assert reports[0] == reports[1]
    jsonl.write_text('{"n": 3}\n{"n": 4.5}\n')
    args = ["stats", str(jsonl), "--length-column", "n", "--max-seq-len", "32"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert "rows.jsonl" in lines[0] and "'n' (--length-column)" in lines[0], lines[0]

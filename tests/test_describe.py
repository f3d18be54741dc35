"""`seqpack_cli.stats.describe`: the library call behind `seqpack stats` and the `--json` document.

The CLI only parses, calls `describe` and renders; these tests call the library directly and check
that the CLI prints exactly `StatsReport.to_json()`.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import write_parquet
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.errors import ConfigError, PreparedFormatError
from seqpack_cli.prepare import PrepareConfig, prepare_dataset
from seqpack_cli.prepared import load_prepared
from seqpack_cli.stats import PackingStats, baselines
from seqpack_cli.stats.describe import (
    DEFAULT_SAMPLE_SIZE,
    JSON_SCHEMA,
    StatsReport,
    StatsRequest,
    describe,
)

MAX_SEQ_LEN = 256


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # 500 sequences in two files, 20 of them over MAX_SEQ_LEN
    rng = np.random.default_rng(3)
    lengths = np.concatenate([rng.integers(1, MAX_SEQ_LEN + 1, 480), rng.integers(257, 400, 20)])
    directory = tmp_path_factory.mktemp("data")
    for part, chunk in enumerate(np.array_split(lengths, 2)):
        write_parquet(directory / f"part-{part}.parquet", {"num_tokens": chunk})
    return directory


def _prepare(data_dir: Path, output: Path, **changes: Any) -> Path:
    options: dict[str, Any] = {
        "inputs": [str(data_dir)],
        "length_column": "num_tokens",
        "max_seq_len": MAX_SEQ_LEN,
        "output": output,
        "filter_over_cap": True,
    }
    prepare_dataset(PrepareConfig(**{**options, **changes}))
    return output


@pytest.fixture(scope="module")
def prepared_dir(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Path:
    return _prepare(data_dir, tmp_path_factory.mktemp("prep") / "prepared")


def _cli_json(*args: str) -> str:
    result = CliRunner().invoke(app, ["stats", *args, "--json"])
    assert result.exit_code == 0, result.output
    return result.stdout


# ---- the two modes -------------------------------------------------------------------------


def test_prepared_mode_describes_the_directory(prepared_dir: Path) -> None:
    report = describe(StatsRequest([prepared_dir], top=3, seed=5))
    assert report.kind == "prepared" and report.profile is not None and report.sweep is None
    document = report.to_dict()
    assert tuple(document) == JSON_SCHEMA["prepared"]
    assert document["kind"] == "prepared" and document["path"] == str(prepared_dir)
    assert document["verified"] is False and document["seed"] == 5
    assert len(document["top_templates"]) == 3
    assert "files" not in document["prepare"]["inputs"]
    assert document["prepare"]["summary"]["num_dropped"] == 20


def test_prepared_mode_json_is_what_the_cli_prints(prepared_dir: Path) -> None:
    report = describe(StatsRequest([str(prepared_dir)], verify=True, top=2, sample_size=100))
    printed = _cli_json(str(prepared_dir), "--verify", "--top", "2", "--sample-size", "100")
    assert printed == report.to_json() + "\n"  # byte for byte
    assert json.loads(printed) == report.to_dict()
    assert report.to_dict()["verified"] is True


def test_sweep_of_parquet_inputs(data_dir: Path) -> None:
    request = StatsRequest(
        [data_dir], max_seq_lens=[512, 128], length_column="num_tokens", max_seqs_per_bin=4
    )
    assert request.prepared_dir is None and request.is_sweep
    report = describe(request)
    document = report.to_dict()
    assert report.kind == "sweep" and tuple(document) == JSON_SCHEMA["sweep"]
    assert document["source"] == "parquet" and document["length_column"] == "num_tokens"
    assert document["inputs"] == sorted(str(path) for path in data_dir.glob("*.parquet"))
    assert [row["max_seq_len"] for row in document["rows"]] == [128, 512]  # ascending
    assert all(tuple(row) == JSON_SCHEMA["sweep row"] for row in document["rows"])
    assert document["max_seqs_per_bin"] == [4]
    assert all(row["max_seqs_per_bin"] == 4 for row in document["rows"])
    assert document["rows"][1]["num_over_cap"] == 0 and document["lengths"]["num_sequences"] == 500
    printed = _cli_json(
        str(data_dir), "--length-column", "num_tokens", "--max-seq-len", "128,512",
        "--max-seqs-per-bin", "4",
    )  # fmt: skip
    assert printed == report.to_json() + "\n"


def test_sweep_of_a_prepared_directory_reads_counts_json(prepared_dir: Path) -> None:
    report = describe(StatsRequest([prepared_dir], max_seq_lens=[MAX_SEQ_LEN]))
    document = report.to_dict()
    assert report.kind == "sweep" and report.source == "prepared"
    assert document["inputs"] == [str(prepared_dir)] and document["length_column"] is None
    # the lengths prepare kept: none over the cap, and seqpack's packing of them is the directory's
    row = document["rows"][0]
    assert row["num_over_cap"] == 0
    packed = describe(StatsRequest([prepared_dir])).to_dict()["stats"]
    assert row["seqpack"]["num_sequences"] == packed["num_sequences"]
    assert (
        _cli_json(str(prepared_dir), "--max-seq-len", str(MAX_SEQ_LEN)) == report.to_json() + "\n"
    )


def test_prepared_mode_uses_the_directory_cap(tmp_path: Path, data_dir: Path) -> None:
    output = _prepare(data_dir, tmp_path / "capped", max_seqs_per_bin=2)
    report = describe(StatsRequest([output], max_seqs_per_bin=None))
    assert report.profile is not None
    direct = PackingStats.from_templates(
        load_prepared(output).templates, MAX_SEQ_LEN, max_seqs_per_bin=2
    )
    assert report.profile.stats == direct
    assert report.profile.lower_bound.to_dict()["number"] == 240  # ceil(480 kept / 2 per bin)


# ---- the request validates itself ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"inputs": []}, "no inputs"),
        ({"inputs": ["a", "b"]}, "2 inputs but no max_seq_lens"),
        ({"inputs": ["DATA"]}, "is not a prepared directory"),
        ({"inputs": ["DATA"], "length_column": "n"}, "length_column without max_seq_lens"),
        ({"inputs": ["DATA"], "max_seq_lens": [64]}, "length_column is required with parquet"),
        (
            {"inputs": ["DATA"], "max_seq_lens": [64], "length_column": "n", "verify": True},
            "verify checks a prepared directory's files",
        ),
        (
            {"inputs": ["PREP"], "max_seq_lens": [64], "length_column": "n"},
            "length_column does not apply to the prepared directory",
        ),
        ({"inputs": ["PREP"], "max_seq_lens": [2**31]}, "over seqpack's limit"),
        ({"inputs": ["PREP"], "max_seq_lens": [64], "max_seqs_per_bin": 0}, "max_seqs_per_bin"),
        ({"inputs": ["PREP"], "top": -1}, "top is -1; expected a non-negative integer"),
        ({"inputs": ["PREP"], "sample_size": 0}, "sample_size is 0; expected a positive integer"),
        ({"inputs": ["PREP"], "seed": True}, "seed is the bool True; expected an integer in"),
    ],
)
def test_bad_combinations_are_config_errors(
    kwargs: dict[str, Any], expected: str, data_dir: Path, prepared_dir: Path
) -> None:
    names = {"DATA": str(data_dir), "PREP": str(prepared_dir)}
    kwargs = {**kwargs, "inputs": [names.get(text, text) for text in kwargs["inputs"]]}
    with pytest.raises(ConfigError) as caught:
        StatsRequest(**kwargs)
    message = str(caught.value)
    assert expected in message
    assert "--" not in message  # Python names the arguments, not the flags


def test_the_cli_shows_the_same_errors_with_flags(data_dir: Path) -> None:
    result = CliRunner().invoke(app, ["stats", str(data_dir), "--length-column", "n"])
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "error: --length-column without --max-seq-len: name the context length(s) to compare, "
        "e.g. --max-seq-len 2048 or --max-seq-len 1024,2048,4096"
    )


def test_a_missing_prepared_directory_is_left_to_load_prepared(tmp_path: Path) -> None:
    request = StatsRequest([tmp_path / "missing"])
    assert request.prepared_dir == str(tmp_path / "missing") and not request.is_sweep
    with pytest.raises(PreparedFormatError, match="does not exist"):
        describe(request)


def test_request_and_report_are_frozen(prepared_dir: Path) -> None:
    request = StatsRequest(str(prepared_dir), max_seq_lens=128)  # type: ignore[arg-type]
    assert request.inputs == (str(prepared_dir),) and request.max_seq_lens == (128,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.top = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="profile or a sweep"):
        StatsReport(request, "prepared", (str(prepared_dir),))


def test_default_sample_size_is_the_sweeps() -> None:
    assert DEFAULT_SAMPLE_SIZE == baselines.DEFAULT_SAMPLE_SIZE


def test_importing_describe_is_cheap() -> None:
    # The CLI imports it at start-up: no numpy, duckdb, polars, rich, typer or torch.
    code = (
        "import sys, seqpack_cli.stats.describe; "
        "print(sorted(m for m in ('numpy', 'duckdb', 'polars', 'rich', 'typer', 'torch') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_cap_given_for_a_prepared_directory_is_refused_not_ignored(prepared_dir: Path) -> None:
    # It used to be ignored silently: the figures were those of the directory's own cap.
    with pytest.raises(ConfigError, match=r"max_seqs_per_bin 3 applies when comparing"):
        StatsRequest([prepared_dir], max_seqs_per_bin=3)
    result = CliRunner().invoke(app, ["stats", str(prepared_dir), "--max-seqs-per-bin", "3"])
    assert result.exit_code == 1
    assert result.stderr.strip().startswith("error: --max-seqs-per-bin 3 applies when comparing")
    assert "--max-seq-len N[,N...]" in result.stderr and len(result.stderr.splitlines()) == 1
    # With max_seq_len values it is the cap of the packings compared, as before.
    assert StatsRequest([prepared_dir], max_seq_lens=[MAX_SEQ_LEN], max_seqs_per_bin=3).is_sweep


def test_the_docstring_documents_every_json_key() -> None:
    import seqpack_cli.stats.describe as module

    documented = module.__doc__ or ""
    for mode, keys in JSON_SCHEMA.items():
        for key in keys:
            assert re.search(rf"\b{key}\b", documented), (mode, key)
    # the attention figures' keys, nested under "attention"
    for key in ("packed", "padded", "packed_vs_padded"):
        assert f"{key}:" in documented, key

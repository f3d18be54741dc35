"""`seqpack prepare` end to end: CliRunner, the installed command, `python -m`, a built wheel.

Every bad input gives one line on stderr naming the file, column or option and the fix, exit
code 1, no traceback, and no output directory (nor a temporary one).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import ParquetDataset, write_parquet
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.prepare import load_prepared

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _invoke(*args: str):
    return CliRunner().invoke(app, ["prepare", *map(str, args)])


def _args(inputs, output, *extra: str, length: str = "n", max_seq_len: int = 100) -> list[str]:
    return [
        *inputs,
        "--length-column",
        length,
        "--max-seq-len",
        str(max_seq_len),
        "--output",
        output,
        *extra,
    ]


# ---- success ----------------------------------------------------------------------------------


def test_help_names_every_option() -> None:
    result = CliRunner().invoke(app, ["prepare", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for option in (
        "--length-column",
        "--max-seq-len",
        "--output",
        "--id-column",
        "--filter-over-cap",
        "--packer",
        "--max-seqs-per-bin",
        "--threads",
        "--memory-limit",
        "--temp-dir",
        "--overwrite",
        "--quiet",
        "--json",
    ):
        assert option in result.stdout


def test_prepare_prints_a_summary(parquet_dataset: ParquetDataset, tmp_path: Path) -> None:
    output = tmp_path / "out"
    result = _invoke(
        parquet_dataset.root,
        "--length-column",
        "num_tokens",
        "--id-column",
        "doc_id",
        "--max-seq-len",
        "512",
        "--output",
        output,
    )
    assert result.exit_code == 0, result.stderr
    assert "efficiency" in result.stdout and f"{len(parquet_dataset.lengths):,}" in result.stdout
    assert result.stderr == ""  # not a terminal: no progress bars
    assert load_prepared(output).counts == parquet_dataset.counts()


def test_json_and_quiet(parquet_dataset: ParquetDataset, tmp_path: Path) -> None:
    base = [parquet_dataset.root, "--length-column", "num_tokens", "--max-seq-len", "512"]
    result = _invoke(*base, "--output", tmp_path / "a", "--json", "--threads", "1")
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["output"] == str(tmp_path / "a")
    assert summary["num_sequences"] == len(parquet_dataset.lengths)
    assert summary["config"]["ids"] == "row_index"
    assert {"num_bins", "efficiency", "lower_bound_bins", "num_dropped", "seconds"} <= set(summary)
    quiet = _invoke(*base, "--output", tmp_path / "b", "--quiet")
    assert quiet.exit_code == 0 and quiet.stdout == "" and quiet.stderr == ""


def test_the_installed_command_and_the_reference_module_form(
    parquet_dataset: ParquetDataset, tmp_path: Path
) -> None:
    common = ["--length-column", "num_tokens", "--id-column", "doc_id", "--max-seq-len", "512"]
    installed = subprocess.run(
        [BIN / "seqpack", "prepare", parquet_dataset.root, *common, "--output", tmp_path / "a"],
        capture_output=True,
        text=True,
    )
    assert installed.returncode == 0, installed.stderr
    # The reference spelling: python -m seqpack.prepare --input FILE ...
    module = subprocess.run(
        [
            sys.executable,
            "-m",
            "seqpack_cli.prepare",
            "--input",
            *map(str, parquet_dataset.files),
            *common,
            "--output",
            tmp_path / "b",
        ],
        capture_output=True,
        text=True,
    )
    assert module.returncode == 0, module.stderr
    assert (tmp_path / "a" / "pools").exists()
    for name in ("counts.json", "templates.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


# ---- bad input: one line, exit 1, nothing written ---------------------------------------------


def _dataset(tmp_path: Path, **columns) -> Path:
    columns = columns or {"n": [5, 7, 9], "id": [1, 2, 3]}
    write_parquet(tmp_path / "in" / "a.parquet", columns)
    return tmp_path / "in"


def _unwritable(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o555)
        return locked / "out"
    return Path("/sys/seqpack-test-output")  # root may write anywhere but here


def _write_text(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _truncated(t: Path) -> Path:
    cut = t / "cut.parquet"
    cut.write_bytes((_dataset(t) / "a.parquet").read_bytes()[:-30])
    return cut


def _existing_output(t: Path) -> Path:
    (t / "out").mkdir()
    (t / "out" / "keep").write_text("x")
    return t / "out"


def _mismatched(t: Path) -> Path:
    write_parquet(t / "in" / "b.parquet", {"n": [1], "other": [1]})
    return _dataset(t)


Case = Callable[[Path], list]
# name: (arguments for a fresh tmp_path, fragments the one error line must contain)
CASES: dict[str, tuple[Case, list[str]]] = {
    "glob matches nothing": (
        lambda t: _args([str(t / "*.parquet")], t / "out"),
        ["*.parquet' matches no files", "quote it"],
    ),
    "path does not exist": (
        lambda t: _args([t / "missing.parquet"], t / "out"),
        ["missing.parquet does not exist"],
    ),
    "not parquet": (
        lambda t: _args([_write_text(t / "x.parquet", "hello")], t / "out"),
        ["x.parquet is not a readable parquet file", "leave it out"],
    ),
    "truncated parquet": (
        lambda t: _args([_truncated(t)], t / "out"),
        ["cut.parquet is not a readable parquet file"],
    ),
    "missing length column": (
        lambda t: _args([_dataset(t)], t / "out", length="len"),
        ["'len' (--length-column) is not in", "columns are: n, id", "pass one of them"],
    ),
    "missing id column": (
        lambda t: _args([_dataset(t)], t / "out", "--id-column", "uid"),
        ["'uid' (--id-column) is not in", "columns are: n, id"],
    ),
    "float lengths": (
        lambda t: _args([_dataset(t, n=[1.5, 2.0])], t / "out"),
        ["'n' (--length-column)", "holds double values", "cast the column to an integer"],
    ),
    "string lengths": (
        lambda t: _args([_dataset(t, n=["1", "2"])], t / "out"),
        ["holds string values"],
    ),
    "null lengths": (
        lambda t: _args([_dataset(t, n=[4, None, None])], t / "out"),
        ["2 NULL, zero or negative lengths, the first (NULL)", "a.parquet at row 1", "fix or drop"],
    ),
    "zero lengths": (
        lambda t: _args([_dataset(t, n=[4, 0])], t / "out"),
        ["1 NULL, zero or negative lengths, the first (0)", "at row 1"],
    ),
    "negative lengths": (
        lambda t: _args([_dataset(t, n=[-3, 4])], t / "out"),
        ["the first (-3)", "at row 0"],
    ),
    "lengths over the cap": (
        lambda t: _args([_dataset(t, n=[50, 150, 300])], t / "out"),
        [
            "2 sequences",
            "longer than --max-seq-len 100",
            "the longest has 300",
            "--over-cap drop",
        ],
    ),
    "null ids": (
        lambda t: _args(
            [_dataset(t, n=[1, 2, 3], id=[1, None, 3])], t / "out", "--id-column", "id"
        ),
        ["'id' (--id-column) has 1 NULL ids", "a.parquet at row 1", "drop --id-column"],
    ),
    "duplicate ids": (
        lambda t: _args([_dataset(t, n=[1, 2, 3], id=[7, 8, 7])], t / "out", "--id-column", "id"),
        ["1 duplicated ids (1 extra rows), e.g. id 7", "row 0", "row 2", "must be unique"],
    ),
    "ids beyond int64": (
        lambda t: _args(
            [_dataset(t, n=[1, 2], id=np.array([1, 2**64 - 1], np.uint64))],
            t / "out",
            "--id-column",
            "id",
        ),
        ["18446744073709551615", "source column id", "must fit in a signed 64-bit integer"],
    ),
    "schemas disagree": (
        lambda t: _args([_mismatched(t)], t / "out"),
        ["b.parquet has a different schema", "no column 'id', which"],
    ),
    "no rows": (
        lambda t: _args([_dataset(t, n=np.array([], np.int64))], t / "out"),
        ["hold no rows"],
    ),
    "none left after filtering": (
        lambda t: _args([_dataset(t, n=[500, 600])], t / "out", "--filter-over-cap"),
        ["all 2 sequences are longer than --max-seq-len 100", "raise --max-seq-len"],
    ),
    "output exists": (
        lambda t: _args([_dataset(t)], _existing_output(t)),
        ["already exists; pass --overwrite"],
    ),
    "output is a file": (
        lambda t: _args([_dataset(t)], _write_text(t / "out", "x")),
        ["out exists and is not a directory"],
    ),
    "output not writable": (
        lambda t: _args([_dataset(t)], _unwritable(t)),
        ["cannot create output directory", "choose a writable --output"],
    ),
    "max-seq-len zero": (
        lambda t: _args([_dataset(t)], t / "out", max_seq_len=0),
        ["--max-seq-len is 0; expected a positive integer", "pass --max-seq-len 1 or more"],
    ),
    "max-seqs-per-bin zero": (
        lambda t: _args([_dataset(t)], t / "out", "--max-seqs-per-bin", "0"),
        ["--max-seqs-per-bin is 0; expected a positive integer", "pass --max-seqs-per-bin 1"],
    ),
    "malformed memory limit": (
        lambda t: _args([_dataset(t)], t / "out", "--memory-limit", "lots"),
        ["--memory-limit", "'lots'", "4GB"],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, name: str) -> None:
    make, fragments = CASES[name]
    args = make(tmp_path)
    before = sorted(p.as_posix() for p in tmp_path.rglob("*"))
    result = _invoke(*args)
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert "None" not in lines[0], "no Python spelling on the command line"
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert sorted(p.as_posix() for p in tmp_path.rglob("*")) == before, "nothing written"


# ---- the wheel --------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_non_editable_install_runs_prepare(
    parquet_dataset: ParquetDataset, tmp_path: Path
) -> None:
    # Build the wheel from a copy of the sources (the checkout stays untouched), check it ships
    # the SQL, install it into a fresh venv that borrows only the dependencies, and run the job
    # from a folder where no checkout's sql/ can be found.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(REPO / "seqpack_cli", source / "seqpack_cli", ignore=ignore)
    shutil.copytree(REPO / "sql", source / "sql")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            tmp_path / "dist",
            source,
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("seqpack_cli-*.whl")  # the distribution seqpack-cli
    names = zipfile.ZipFile(wheel).namelist()
    for sql in (REPO / "sql").glob("*.sql"):
        assert f"seqpack_cli/sql/{sql.name}" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv], check=True)
    (site,) = (venv / "lib").glob("python3*/site-packages")
    deps = Path(sysconfig.get_paths()["purelib"])  # this venv's packages
    (site / "_seqpack_test_deps.pth").write_text(f"{deps}\n")  # numpy, duckdb, ...: borrowed
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            venv / "bin" / "python",
            "install",
            "--no-deps",
            "-q",
            wheel,
        ],
        check=True,
        capture_output=True,
    )
    where = subprocess.run(
        [venv / "bin" / "python", "-c", "import seqpack_cli; print(seqpack_cli.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert where.stdout.startswith(str(site))
    result = subprocess.run(
        [
            venv / "bin" / "seqpack",
            "prepare",
            parquet_dataset.root,
            "--length-column",
            "num_tokens",
            "--max-seq-len",
            "512",
            "--output",
            tmp_path / "out",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert load_prepared(tmp_path / "out").counts == parquet_dataset.counts()

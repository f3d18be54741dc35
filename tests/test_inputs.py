"""Inputs read exactly as named: paths, globs, directories, column names, DuckDB's own names.

Issue 10's "silently wrong input" cases, each reproduced as reported and checked against a numpy
oracle over the same parquet data: glob characters in literal paths, column names DuckDB matches
ignoring case, user columns named like DuckDB's virtual columns, files left out or read twice,
the output directory inside an input directory, FIFOs and remote URLs; then DuckDB failures worded
by their cause. A hypothesis fuzz test ends the file: any mix of awkward file and column names
either succeeds with exactly the oracle's rows or fails with one `SeqpackError` line.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import write_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.errors import ConfigError, InputError, SeqpackError
from seqpack_cli.prepare import PrepareConfig, prepare_dataset, scan
from seqpack_cli.prepare.db import (
    check_memory_limit,
    check_temp_dir,
    close_connection,
    connect,
    read_error,
)
from seqpack_cli.prepare.footers import inspect_inputs
from seqpack_cli.prepare.inputs import resolve_inputs


def _histogram(paths, column: str = "n") -> dict[int, int]:
    return scan.scan_length_histogram(resolve_inputs(paths), column, threads=2)


def _counts(*arrays) -> dict[int, int]:
    values, counts = np.unique(np.concatenate([np.asarray(a) for a in arrays]), return_counts=True)
    return dict(zip(values.tolist(), counts.tolist(), strict=True))


def _one_line(result) -> str:  # type: ignore[no-untyped-def]
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    return lines[0]


# ---- 7: glob characters in literal paths ------------------------------------------------------


def test_a_bracketed_directory_is_read_not_its_glob_twin(tmp_path: Path) -> None:
    # Reported: naming data[1]/x.parquet next to data1/x.parquet read data1's rows, exit 0.
    write_parquet(tmp_path / "data1" / "x.parquet", {"n": [1, 2, 3]})
    named = write_parquet(tmp_path / "data[1]" / "x.parquet", {"n": [9, 9]})
    assert _histogram([named]) == {9: 2}
    assert _histogram([tmp_path / "data[1]"]) == {9: 2}


def test_file_names_with_glob_characters_are_read_once_each(tmp_path: Path) -> None:
    # Reported: part-[1] beside part-1 read part-1 twice; a*.parquet and a?.parquet crashed with
    # an IndexError traceback. A backslash with a glob character has no DuckDB escape at all.
    names = ["part-1", "part-[1]", "a*", "a?", "aa", "back\\slash[2]", "[!x]", "{a,b}", "it's ü"]
    columns = {name: np.full(i + 1, 10 + i) for i, name in enumerate(names)}
    paths = [write_parquet(tmp_path / f"{name}.parquet", {"n": v}) for name, v in columns.items()]
    assert _histogram(paths) == _counts(*columns.values())
    assert _histogram([tmp_path]) == _counts(*columns.values())
    # A path that exists is literal (a?.parquet is that file, not also aa.parquet); one that
    # does not, written with glob characters, is a glob (a[a].parquet matches aa.parquet).
    assert _histogram([tmp_path / "a?.parquet"]) == {13: 4}
    assert _histogram([str(tmp_path / "a[a].parquet")]) == {14: 5}


@pytest.mark.skipif(sys.platform != "linux", reason="file names as raw bytes")
def test_a_file_name_that_is_not_utf8_is_read(tmp_path: Path) -> None:
    name = (os.fsencode(tmp_path) + b"/caf\xe9[1].parquet").decode(errors="surrogateescape")
    with open(name, "wb") as handle:  # pyarrow takes only UTF-8 paths
        pq.write_table(pa.table({"n": [5, 5, 6], "doc": [30, 10, 20]}), handle)
    assert _histogram([tmp_path]) == {5: 2, 6: 1}
    for id_column, pool in ((None, [0, 1]), ("doc", [10, 30])):
        prepared = prepare_dataset(
            PrepareConfig(
                inputs=[name],
                length_column="n",
                id_column=id_column,
                max_seq_len=8,
                output=tmp_path / "out",
                overwrite=True,
            )
        )
        assert prepared.pools[5].tolist() == pool


def test_awkward_paths_give_the_oracles_pools_through_prepare(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    names = ["x[1]", "x1", "y*", "y?z", "q\\[w]"]
    lengths = [rng.integers(1, 40, 50 + 10 * i) for i in range(len(names))]
    paths = [
        write_parquet(tmp_path / "in" / f"{n}.parquet", {"n": v})
        for n, v in zip(names, lengths, strict=True)
    ]
    prepared = prepare_dataset(
        PrepareConfig(inputs=paths, length_column="n", max_seq_len=64, output=tmp_path / "out")
    )
    order = sorted(range(len(paths)), key=lambda i: paths[i].as_posix())
    all_lengths = np.concatenate([lengths[i] for i in order])
    for length, ids in prepared.pools.items():
        np.testing.assert_array_equal(ids, np.flatnonzero(all_lengths == length))
    files = prepared.manifest["inputs"]["files"]
    assert [entry["path"] for entry in files] == [paths[i].as_posix() for i in order]


def test_rows_read_are_checked_against_the_footers(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "a.parquet", {"n": [1, 2, 3]})
    files = inspect_inputs([path], "n")
    write_parquet(path, {"n": [1, 2, 3, 4, 5]})  # replaced after its footer was read
    con = connect()
    try:
        with pytest.raises(InputError, match=r"DuckDB read 5 rows .* footers count 3"):
            scan.length_histogram(con, files, "n")
    finally:
        close_connection(con)


# ---- 8: column names matched exactly ----------------------------------------------------------


def _case_twins(tmp_path: Path) -> Path:
    table = pa.table({"LEN": [100, 100, 100], "len": [1, 2, 3]})
    path = tmp_path / "twins.parquet"
    pq.write_table(table, path)
    return path


def test_columns_equal_ignoring_case_are_refused_when_one_is_read(tmp_path: Path) -> None:
    # Reported: with columns LEN and len, --length-column len read LEN (exit 0, wrong counts).
    path = _case_twins(tmp_path)
    with pytest.raises(
        InputError, match=r"twins\.parquet has 2 columns .*'LEN' and 'len'"
    ) as error:
        inspect_inputs([path], "len")
    assert "\n" not in str(error.value) and "length_column" in str(error.value)
    result = CliRunner().invoke(
        app, ["stats", str(path), "--length-column", "len", "--max-seq-len", "10"]
    )
    line = _one_line(result)
    assert "'LEN' and 'len'" in line and "--length-column" in line
    result = CliRunner().invoke(
        app,
        [
            "prepare",
            str(path),
            "--length-column",
            "len",
            "--max-seq-len",
            "200",
            "--output",
            str(tmp_path / "out"),
        ],
    )
    assert "'LEN' and 'len'" in _one_line(result)
    assert not (tmp_path / "out").exists()


def test_two_columns_of_the_same_name_are_refused(tmp_path: Path) -> None:
    table = pa.Table.from_arrays([pa.array([1, 2]), pa.array([7, 8])], names=["n", "n"])
    pq.write_table(table, tmp_path / "dup.parquet")
    with pytest.raises(InputError, match=r"2 columns with the same name \('n' and 'n'\)"):
        inspect_inputs([tmp_path / "dup.parquet"], "n")
    # A later file with the duplicate (the first one clean) is caught too.
    write_parquet(tmp_path / "a.parquet", {"n": [1]})
    with pytest.raises(InputError, match=r"same name"):
        inspect_inputs([tmp_path / "a.parquet", tmp_path / "dup.parquet"], "n")


def test_names_are_matched_exactly_and_case_twins_elsewhere_are_fine(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "a.parquet", {"LEN": [3, 4], "A": [0, 0], "a": [1, 1]})
    with pytest.raises(InputError, match=r"'len' .* not in .*did you mean 'LEN'"):
        inspect_inputs([path], "len")
    assert _histogram([path], "LEN") == {3: 1, 4: 1}
    # DuckDB folds ASCII case only: "Ä" and "ä" are two columns to it, and to seqpack.
    path = write_parquet(tmp_path / "b.parquet", {"Ä": [7, 7], "ä": [1, 2]})
    assert _histogram([path], "ä") == {1: 1, 2: 1}
    assert _histogram([path], "Ä") == {7: 2}


def test_id_column_equal_to_the_length_column_is_refused(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "a.parquet", {"n": [1, 2]})
    with pytest.raises(InputError, match="is also the length column"):
        inspect_inputs([path], "n", "n")


# ---- 9: user columns named like DuckDB's virtual columns --------------------------------------

VIRTUAL = ["file_index", "file_row_number", "filename", "FILE_INDEX", "File_Row_Number"]


def _virtual_dataset(
    root: Path, length: str, ids: str, extra: str
) -> tuple[list[Path], np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    sizes = [40, 25, 35]
    lengths = rng.integers(1, 30, sum(sizes))
    id_values = rng.permutation(sum(sizes)) * 3 + 5
    paths, start = [], 0
    for i, size in enumerate(sizes):
        part = slice(start, start + size)
        columns = {length: lengths[part], ids: id_values[part], extra: rng.integers(0, 9, size)}
        paths.append(write_parquet(root / f"{i}.parquet", columns))
        start += size
    return paths, lengths, id_values


@pytest.mark.parametrize("role", ["length", "id", "extra"])
@pytest.mark.parametrize("name", VIRTUAL)
def test_user_columns_named_like_virtual_columns(tmp_path: Path, role: str, name: str) -> None:
    # Reported: a column file_index gave wrong row-index ids with exit 0, or tracebacks, or a
    # misleading "inputs changed"; file_row_number failed too.
    cols = {"length": "n", "id": "doc", "extra": "x"} | {role: name}
    _, lengths, ids = _virtual_dataset(tmp_path / "in", cols["length"], cols["id"], cols["extra"])
    for id_column in (None, cols["id"]):
        prepared = prepare_dataset(
            PrepareConfig(
                inputs=[tmp_path / "in"],
                length_column=cols["length"],
                id_column=id_column,
                max_seq_len=32,
                output=tmp_path / "out",
                overwrite=True,
            )
        )
        expected_ids = np.arange(len(lengths)) if id_column is None else ids
        for length in np.unique(lengths):
            want = np.sort(expected_ids[lengths == length])
            np.testing.assert_array_equal(prepared.pools[int(length)], want)


def test_bad_length_is_located_despite_a_file_row_number_column(tmp_path: Path) -> None:
    write_parquet(tmp_path / "a.parquet", {"n": [3, 4], "file_row_number": [70, 71]})
    write_parquet(tmp_path / "b.parquet", {"n": [3, 0, 5], "file_row_number": [80, 81, 82]})
    with pytest.raises(InputError, match=r"the first \(0\) in .*b\.parquet at row 1 "):
        _histogram([tmp_path])


# ---- 10: files left out or counted twice ------------------------------------------------------


def test_case_varied_extensions_and_symlinked_directories_are_all_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Reported: *.PARQUET, *.parq and a symlinked subdirectory were skipped without a word
    # (2,000 of 3,000 rows dropped).
    data = tmp_path / "data"
    a = write_parquet(data / "a.parquet", {"n": np.full(1000, 1)})
    write_parquet(data / "B.PARQUET", {"n": np.full(1000, 2)})
    write_parquet(tmp_path / "elsewhere" / "c.parq", {"n": np.full(600, 3)})
    write_parquet(tmp_path / "elsewhere" / "d.Pq", {"n": np.full(400, 4)})
    (data / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (data / "loop").symlink_to(data, target_is_directory=True)  # a cycle: cut, not followed
    (data / "again.parquet").symlink_to(a)  # the same file under a second name: read once
    os.link(a, data / "hard.parquet")  # a hard link too
    (data / "notes.json").write_text("{}")
    (data / "_SUCCESS").write_text("")
    with caplog.at_level(logging.WARNING, logger="seqpack_cli.prepare.inputs"):
        files = resolve_inputs([data])
    assert [f.name for f in files] == ["B.PARQUET", "a.parquet", "c.parq", "d.Pq"]
    assert scan.scan_length_histogram(files, "n") == {1: 1000, 2: 1000, 3: 600, 4: 400}
    text = caplog.text
    assert "left out 1 file(s) not parquet by their extension" in text and "notes.json" in text
    assert "left out 2 path(s) to a file already read" in text
    assert "left out 1 symlinked director(ies) looping back" in text
    assert "_SUCCESS" not in text  # writers' markers are not worth a warning


def test_globs_take_parquet_matches_and_report_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_parquet(tmp_path / "d" / "a.parquet", {"n": [1]})
    write_parquet(tmp_path / "d" / "sub" / "b.PQ", {"n": [2]})
    write_parquet(tmp_path / "d" / "raw.dat", {"n": [3]})
    (tmp_path / "d" / "sub" / "manifest.json").write_text("{}")
    with caplog.at_level(logging.WARNING, logger="seqpack_cli.prepare.inputs"):
        assert _histogram([str(tmp_path / "d" / "**")]) == {1: 1, 2: 1}
        assert _histogram([str(tmp_path / "d" / "*")]) == {1: 1, 2: 1}
    assert "not parquet" in caplog.text and "manifest.json" in caplog.text
    # A pattern that spells the extension reads those files; one that matches only other
    # files says so.
    assert _histogram([str(tmp_path / "d" / "*.dat")]) == {3: 1}
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "part-0").write_text("x")
    with pytest.raises(InputError, match=r"matches 1 files, none parquet .* e\.g\. .*part-0"):
        resolve_inputs([str(tmp_path / "e" / "part-*")])


def test_a_glob_through_a_symlink_loop_ends(tmp_path: Path) -> None:
    write_parquet(tmp_path / "d" / "x" / "a.parquet", {"n": [1]})
    (tmp_path / "d" / "x" / "up").symlink_to(tmp_path / "d", target_is_directory=True)
    assert _histogram([str(tmp_path / "d" / "**" / "*.parquet")]) == {1: 1}


# ---- 3: the output inside an input directory --------------------------------------------------


def test_the_output_and_its_temporaries_are_never_inputs(tmp_path: Path) -> None:
    # Reported: the second run over the input directory read the first run's output (and a glob
    # like data/** read its json and npy files as parquet).
    data = tmp_path / "data"
    write_parquet(data / "a.parquet", {"n": [1, 2]})
    prepare_dataset(
        PrepareConfig(inputs=[data], length_column="n", max_seq_len=8, output=data / "prepared")
    )
    # What a writer could leave there: a parquet inside the output, a killed run's temporaries.
    write_parquet(data / "prepared" / "stray.parquet", {"n": [99]})
    write_parquet(data / ".prepared.seqpack-tmp-123-x" / "w.parquet", {"n": [98]})
    write_parquet(data / ".prepared.seqpack-old-123-x" / "w.parquet", {"n": [97]})
    out = [data / "prepared"]
    expected = [data / "a.parquet"]
    assert resolve_inputs([data], exclude=out) == expected
    assert resolve_inputs([str(data / "**")], exclude=out) == expected
    with pytest.raises(InputError, match="matches only the output directory"):
        resolve_inputs([str(data / ".*" / "*.parquet")], exclude=out)
    with pytest.raises(InputError, match="lies inside the output directory"):
        resolve_inputs([data / "prepared" / "stray.parquet"], exclude=out)
    with pytest.raises(InputError, match="matches only the output directory"):
        resolve_inputs([str(data / "prep*")], exclude=out)
    # Without the exclusion the output is still skipped: it holds seqpack's manifest.
    assert resolve_inputs([data]) == expected


def test_prepared_directories_in_the_data_are_skipped_silently(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Reported: with the output inside the data directory (which the README allows), every later
    # `seqpack stats data/` warned about ~2,000 non-parquet files, the prepared directory's own.
    data = tmp_path / "data"
    write_parquet(data / "part-0.parquet", {"n": [1, 2, 2]})
    for name in ("prepared", "sub/older"):
        prepare_dataset(
            PrepareConfig(inputs=[data], length_column="n", max_seq_len=8, output=data / name)
        )
    # Another tool's manifest.json is no reason to skip its directory, nor to stay quiet.
    (data / "other").mkdir()
    (data / "other" / "manifest.json").write_text('{"format": "mosaicml-streaming"}')
    write_parquet(data / "other" / "x.parquet", {"n": [3]})
    expected = [data / "other" / "x.parquet", data / "part-0.parquet"]
    for inputs in ([data], [str(data / "**")], [str(data / "*")]):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="seqpack_cli.prepare.inputs"):
            assert resolve_inputs(inputs) == expected, inputs
        assert caplog.text.count("WARNING") == 1, (inputs, caplog.text)
        assert "left out 1 file(s) not parquet" in caplog.text, (inputs, caplog.text)
        assert "data/prepared" not in caplog.text and "older" not in caplog.text
    # A stray parquet inside a prepared directory is not data either, even for a pattern.
    write_parquet(data / "prepared" / "stray.parquet", {"n": [99]})
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="seqpack_cli.prepare.inputs"):
        assert resolve_inputs([str(data / "**" / "*.parquet")]) == expected
    assert caplog.text == ""
    assert resolve_inputs([data]) == expected
    # Through the command: stats over the data directory warns about nothing seqpack wrote.
    command = ["stats", str(data), "--length-column", "n", "--max-seq-len", "8", "--json"]
    result = subprocess.run(
        [sys.executable, "-m", "seqpack_cli", *command], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert "1 file(s) not parquet" in result.stderr and ".npy" not in result.stderr, result.stderr


def test_a_second_run_over_a_glob_of_its_own_input_directory(tmp_path: Path) -> None:
    # Reported: the next run over the same input read the previous output's json and npy files
    # as parquet and failed. Whatever else data/** matches, only parquet files are inputs.
    data = tmp_path / "data"
    write_parquet(data / "a.parquet", {"n": [1, 2, 2, 5]})
    runs = [
        prepare_dataset(
            PrepareConfig(
                inputs=[str(data / "**")],
                length_column="n",
                max_seq_len=8,
                output=data / "prepared",
                overwrite=True,
            )
        )
        for _ in range(2)
    ]
    assert runs[0].counts == runs[1].counts == {1: 1, 2: 2, 5: 1}


# ---- 18 and remote inputs: what is not a local regular file -----------------------------------


def _without_hanging(call):  # type: ignore[no-untyped-def]
    outcome: list[BaseException | object] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as error:
            outcome.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(300)  # what hangs, hangs forever: a generous bound for a loaded machine
    assert outcome, "hung"
    return outcome[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs")
def test_a_fifo_is_refused_not_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Reported: a FIFO given as input hung forever.
    fifo = tmp_path / "pipe.parquet"
    os.mkfifo(fifo)
    error = _without_hanging(lambda: resolve_inputs([fifo]))
    assert isinstance(error, InputError) and "is a FIFO (named pipe)" in str(error)
    error = _without_hanging(lambda: inspect_inputs([fifo], "n"))
    assert isinstance(error, InputError) and "FIFO" in str(error)
    write_parquet(tmp_path / "a.parquet", {"n": [1]})
    with caplog.at_level(logging.WARNING, logger="seqpack_cli.prepare.inputs"):
        files = _without_hanging(lambda: resolve_inputs([tmp_path]))
    assert files == [tmp_path / "a.parquet"]
    assert "neither regular files nor directories" in caplog.text
    (tmp_path / "dangling.parquet").symlink_to(tmp_path / "gone.parquet")
    with pytest.raises(InputError, match="a symlink that points nowhere"):
        resolve_inputs([tmp_path / "dangling.parquet"])


@pytest.mark.parametrize(
    "url", ["s3://bucket/x.parquet", "gs://b/d/", "hf://datasets/a/b", "https://h/x.parquet"]
)
def test_remote_inputs_are_named_as_unsupported(url: str) -> None:
    # Reported: these read "does not exist; check the path".
    with pytest.raises(InputError, match="remote inputs are not supported yet"):
        resolve_inputs([url])
    with pytest.raises(InputError, match="pass the local path it names"):
        resolve_inputs(["file:///data/x.parquet"])


# ---- 17: DuckDB failures worded by their cause; its options checked up front -------------------


def test_memory_limit_too_small_is_refused_up_front(tmp_path: Path) -> None:
    for value in ("1MB", "0.5GiB%", "lots", 12):
        with pytest.raises(ConfigError, match="memory_limit"):
            check_memory_limit(value)
    assert check_memory_limit("16MiB") == "16MiB"
    assert check_memory_limit(" 2 GB ") == "2 GB"
    assert check_memory_limit("50%") == "50%"
    path = write_parquet(tmp_path / "a.parquet", {"n": [1]})
    result = CliRunner().invoke(
        app,
        [
            "prepare",
            str(path),
            "--length-column",
            "n",
            "--max-seq-len",
            "8",
            "--output",
            str(tmp_path / "out"),
            "--memory-limit",
            "1MB",
        ],
    )
    assert "--memory-limit is '1MB', too little" in _one_line(result)
    assert not (tmp_path / "out").exists()


def test_out_of_memory_is_worded_as_such() -> None:
    # Reported: --memory-limit 1MB read "check that the file it names is an intact parquet file".
    con = duckdb.connect(config={"memory_limit": "1MB", "threads": 1, "temp_directory": ""})
    with pytest.raises(duckdb.Error) as caught:
        con.sql("SELECT list(range) FROM range(3000000)").fetchall()
    error = read_error(caught.value)
    assert isinstance(error, ConfigError) and "ran out of memory" in str(error)
    assert "memory_limit" in str(error) and "intact parquet" not in str(error)
    assert "--memory-limit" in error.cli_message()


def test_temp_dir_is_checked_up_front(tmp_path: Path) -> None:
    # Reported: a --temp-dir whose parent is missing failed only when DuckDB spilled, seconds
    # in, as "intact parquet"; a --temp-dir naming a file was accepted.
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is a file, not a directory"):
        check_temp_dir(tmp_path / "file")
    with pytest.raises(ConfigError, match="does not exist, nor does its parent"):
        check_temp_dir(tmp_path / "missing" / "spill")
    assert check_temp_dir(tmp_path / "spill") == str(tmp_path / "spill")  # DuckDB makes it
    assert check_temp_dir(tmp_path) == str(tmp_path)
    with pytest.raises(ConfigError, match="temp_dir"):
        connect(temp_dir=tmp_path / "missing" / "spill")
    path = write_parquet(tmp_path / "a.parquet", {"n": [1]})
    for temp in (tmp_path / "file", tmp_path / "missing" / "spill"):
        result = CliRunner().invoke(
            app,
            [
                "stats",
                str(path),
                "--length-column",
                "n",
                "--max-seq-len",
                "8",
                "--temp-dir",
                str(temp),
            ],
        )
        assert "--temp-dir" in _one_line(result)


def test_an_old_duckdb_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(duckdb, "__version__", "1.4.1")
    with pytest.raises(ConfigError, match=r"needs duckdb >= 2\.0 .* duckdb 1\.4\.1 is installed"):
        connect()


def test_spill_failures_name_the_temporary_folder(tmp_path: Path) -> None:
    con = duckdb.connect(
        config={"memory_limit": "20MB", "threads": 1, "temp_directory": str(tmp_path / "a" / "b")}
    )
    with pytest.raises(duckdb.Error) as caught:
        con.sql(
            "SELECT count(*) FROM (SELECT i, count(*) FROM range(1000000) t(i) GROUP BY i)"
        ).fetchall()
    error = read_error(caught.value)
    assert isinstance(error, ConfigError) and "could not use its temporary folder" in str(error)
    full = duckdb.IOException(
        'IO Error: Could not write file "/t/duckdb_temp_storage_DEFAULT-0.tmp": No space left on '
        "device"
    )
    assert "out of disk space" in str(read_error(full))
    corrupt = duckdb.InvalidInputException('Invalid Input Error: File "/x.parquet" is corrupt')
    assert "intact parquet file" in str(read_error(corrupt))


# ---- fuzz: paths and column names -------------------------------------------------------------

_NAME_CHARS = "ab*?[]{}\\ 'é\"ü!-_.~"
_COLUMNS = [
    "n",
    "N",
    "len",
    "LEN",
    "file_index",
    "FILE_INDEX",
    "file_row_number",
    "filename",
    "ü",
    "Ü",
    "it's",
    'q"t',
    "a.b",
    "$paths",
    "length",
    "id",
]
_EXTENSIONS = [".parquet", ".PARQUET", ".parq", ".Pq", ".pq"]


def _fold(name: str) -> str:
    return "".join(char.lower() if char.isascii() else char for char in name)


def _ambiguous(names: list[str], read: list[str]) -> bool:
    """Whether DuckDB (which folds ASCII case) could bind a column read to another column."""
    folded = [_fold(name) for name in names]
    return any(folded.count(_fold(column)) > 1 for column in read)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    stems=st.lists(st.text(_NAME_CHARS, min_size=1, max_size=8), min_size=1, max_size=4),
    extensions=st.lists(st.sampled_from(_EXTENSIONS), min_size=4, max_size=4),
    columns=st.lists(st.sampled_from(_COLUMNS), min_size=2, max_size=4, unique=True),
    twin=st.integers(0, 4),
    use_id=st.booleans(),
    named=st.sampled_from(["directory", "files", "link"]),
    seed=st.integers(0, 2**16),
)
def test_fuzz_paths_and_column_names(stems, extensions, columns, twin, use_id, named, seed) -> None:
    rng = np.random.default_rng(seed)
    if twin < len(columns):  # now and then a column twice, as pyarrow can write it
        columns = [*columns, columns[twin]]
    root = Path(tempfile.mkdtemp(prefix="seqpack-fuzz-"))
    try:
        data = root / "in[put]"
        data.mkdir()
        length_column, id_column = columns[0], (columns[1] if use_id else None)
        if id_column == length_column:
            id_column = None
        read = [length_column] if id_column is None else [length_column, id_column]
        paths, lengths, ids = [], [], []
        stems = [stem for stem in dict.fromkeys(stems) if stem not in (".", "..")]
        next_id = 0
        for stem, extension in zip(stems, extensions, strict=False):
            path = data / f"{stem.replace('/', '_')}{extension}"
            if path.name.startswith((".", "_")) or path.exists():
                continue  # hidden or _-prefixed: not data in a directory
            size = int(rng.integers(1, 20))
            values = rng.integers(1, 50, size)
            id_values = np.arange(next_id, next_id + size) * 2 + 1
            next_id += size
            arrays = [pa.array(values)] + [pa.array(id_values)] * (len(columns) - 1)
            pq.write_table(pa.Table.from_arrays(arrays, names=columns), path)
            paths.append(path)
            lengths.append(values)
            ids.append(id_values)
        if not paths:
            return
        if named == "link":
            (root / "via[link]").symlink_to(data, target_is_directory=True)
            inputs: list = [root / "via[link]"]
        else:
            inputs = [data] if named == "directory" else list(reversed(paths))
        config = PrepareConfig(
            inputs=inputs,
            length_column=length_column,
            id_column=id_column,
            max_seq_len=64,
            output=root / "out",
        )
        expect_error = _ambiguous(columns, read)
        try:
            prepared = prepare_dataset(config)
        except SeqpackError as error:
            assert expect_error, f"unexpected error: {error}"
            assert "\n" not in str(error)
            assert not (root / "out").exists()
            return
        assert not expect_error, "an ambiguous schema was accepted"
        order = sorted(range(len(paths)), key=lambda i: paths[i].name)
        all_lengths = np.concatenate([lengths[i] for i in order])
        all_ids = (
            np.concatenate([ids[i] for i in order]) if id_column else np.arange(len(all_lengths))
        )
        assert prepared.counts == _counts(all_lengths)
        for length, pool in prepared.pools.items():
            np.testing.assert_array_equal(pool, np.sort(all_ids[all_lengths == length]))
        assert Counter(e["num_rows"] for e in prepared.manifest["inputs"]["files"]) == Counter(
            len(v) for v in lengths
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)

"""seqpack_cli.prepare: the whole job, its config, determinism, and interruptions."""

from __future__ import annotations

import random
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import ParquetDataset, small_config, with_default_signals, write_parquet
from typer.testing import CliRunner

from seqpack_cli.checks import MAX_SEQ_LEN_LIMIT
from seqpack_cli.cli.app import app
from seqpack_cli.errors import ConfigError, InputError, PreparedFormatError
from seqpack_cli.packing.histogram import (
    lower_bound_bins,
    pack_length_histogram,
    pack_length_histogram_batched,
)
from seqpack_cli.prepare import PrepareConfig, load_prepared, prepare_dataset
from seqpack_cli.prepare.db import MIN_MEMORY_LIMIT
from seqpack_cli.prepared import FORMAT_VERSION


def _config(dataset: ParquetDataset, output: Path, **changes) -> PrepareConfig:
    options = {
        "inputs": [dataset.root],
        "length_column": "num_tokens",
        "id_column": "doc_id",
        "max_seq_len": 512,
        "output": output,
    }
    options.update(changes)
    return PrepareConfig(**options)


def _tree_bytes(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}


def _nothing_written(output: Path) -> bool:
    return not output.exists() and not [p for p in output.parent.iterdir() if ".seqpack-" in p.name]


# ---- the job ----------------------------------------------------------------------------------


@pytest.mark.parametrize("id_column", ["doc_id", None])
def test_prepare_matches_the_numpy_oracle(
    parquet_dataset: ParquetDataset, tmp_path: Path, id_column
) -> None:
    calls = []
    prepared = prepare_dataset(
        _config(parquet_dataset, tmp_path / "out", id_column=id_column),
        progress=lambda *call: calls.append(call),
    )
    manifest, counts, templates, pools = prepared
    assert counts == parquet_dataset.counts()
    for length, ids in parquet_dataset.pools(by_row_index=id_column is None).items():
        np.testing.assert_array_equal(pools[length], ids)
    assert templates == pack_length_histogram_batched(counts, 512)
    assert {phase for phase, _, _ in calls} == {"histogram", "pools", "write pools"}
    # The manifest: version, config, inputs, summary.
    assert manifest["format_version"] == FORMAT_VERSION
    assert manifest["config"] == {
        "length_column": "num_tokens",
        "id_column": id_column,
        "ids": "id_column" if id_column else "row_index",
        "max_seq_len": 512,
        "packer": "batched",
        "max_seqs_per_bin": None,
        "filter_over_cap": False,
        "over_cap": "error",
    }
    assert [f["path"] for f in manifest["inputs"]["files"]] == [
        p.as_posix() for p in parquet_dataset.files
    ]
    assert manifest["inputs"]["num_rows"] == len(parquet_dataset.lengths)
    summary = manifest["summary"]
    assert summary["num_sequences"] == len(parquet_dataset.lengths)
    assert summary["num_tokens"] == int(parquet_dataset.lengths.sum())
    assert summary["num_bins"] == sum(templates.values()) == manifest["n_bins"]
    assert summary["lower_bound_bins"] == lower_bound_bins(counts, 512)
    assert summary["num_dropped"] == 0
    assert 0.9 < summary["efficiency"] <= 1.0
    assert load_prepared(tmp_path / "out", verify=True).counts == counts


@pytest.mark.parametrize("length_type", [np.uint8, np.int16, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("ids", ["dense", "sparse", "rows"])
@pytest.mark.parametrize("max_seq_len", [250, 70_000])
def test_any_integer_length_type_gives_the_same_pools(
    tmp_path: Path, length_type, ids: str, max_seq_len: int
) -> None:
    # Lengths stream in their own parquet type (never cast): every integer type, through the id
    # map (dense ids, row indexes; lengths as codes or indexed) and the scatter (sparse ids).
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 201, 300)
    doc_ids = rng.permutation(300) * (1 << 40 if ids == "sparse" else 1)
    columns = {"num_tokens": lengths.astype(length_type), "doc_id": doc_ids}
    write_parquet(tmp_path / "in" / "a.parquet", columns, row_group_size=64)
    config = PrepareConfig(
        inputs=[tmp_path / "in"],
        length_column="num_tokens",
        id_column=None if ids == "rows" else "doc_id",
        max_seq_len=max_seq_len,
        output=tmp_path / "out",
    )
    prepared = prepare_dataset(config)
    expected_ids = np.arange(300) if ids == "rows" else doc_ids
    assert prepared.counts == {
        int(n): int(c) for n, c in zip(*np.unique(lengths, return_counts=True), strict=True)
    }
    for length, pool in prepared.pools.items():
        np.testing.assert_array_equal(pool, np.sort(expected_ids[lengths == length]))


def test_identical_bytes_whatever_the_threads_and_input_order(
    parquet_dataset: ParquetDataset, tmp_path: Path
) -> None:
    one = prepare_dataset(_config(parquet_dataset, tmp_path / "one", threads=1)).path
    files = list(reversed(parquet_dataset.files))
    two = prepare_dataset(_config(parquet_dataset, tmp_path / "two", inputs=files, threads=2)).path
    assert _tree_bytes(one) == _tree_bytes(two)


def test_filter_over_cap_drops_and_counts(parquet_dataset: ParquetDataset, tmp_path: Path) -> None:
    num_over = int((parquet_dataset.lengths > 60).sum())
    assert num_over > 0
    prepared = prepare_dataset(
        _config(parquet_dataset, tmp_path / "out", max_seq_len=60, filter_over_cap=True)
    )
    assert prepared.counts == parquet_dataset.counts(max_seq_len=60)
    assert prepared.manifest["summary"]["num_dropped"] == num_over
    assert prepared.manifest["summary"]["dropped"] == {"over_max_seq_len": num_over}
    assert prepared.manifest["config"]["filter_over_cap"] is True


def test_over_cap_without_the_filter_is_an_error(
    parquet_dataset: ParquetDataset, tmp_path: Path
) -> None:
    num_over = int((parquet_dataset.lengths > 60).sum())
    longest = int(parquet_dataset.lengths.max())
    message = (
        rf"{num_over} sequences in length column 'num_tokens' are longer than max_seq_len 60 "
        rf"\(the longest has {longest}\); pass over_cap=.drop."
    )
    with pytest.raises(InputError, match=message):
        prepare_dataset(_config(parquet_dataset, tmp_path / "out", max_seq_len=60))
    assert _nothing_written(tmp_path / "out")


def test_nothing_left_after_filtering(tmp_path: Path) -> None:
    write_parquet(tmp_path / "in" / "a.parquet", {"n": [50, 60]})
    config = small_config(tmp_path, filter_over_cap=True)
    with pytest.raises(InputError, match=r"all 2 sequences are longer than max_seq_len 10"):
        prepare_dataset(config)
    assert _nothing_written(tmp_path / "out")


def test_lengths_over_seqpacks_limit_do_not_ask_for_a_max_seq_len_that_is_refused(
    tmp_path: Path,
) -> None:
    # Lengths beyond 2**31 - 1 used to get "raise max_seq_len to 1099511627776", a value
    # PrepareConfig itself refuses.
    write_parquet(tmp_path / "in" / "a.parquet", {"n": np.array([5, 2**40, 2**33], np.int64)})
    config = small_config(tmp_path)
    with pytest.raises(InputError) as caught:
        prepare_dataset(config)
    message = str(caught.value)
    assert message.startswith("2 sequences in length column 'n' are longer than max_seq_len 10")
    assert f"the longest has {2**40}, over seqpack's limit of 2147483647 tokens" in message
    assert "no max_seq_len can hold it; pass over_cap='drop' to drop them" in message
    assert "raise max_seq_len" not in message and "\n" not in message
    assert _nothing_written(tmp_path / "out")
    # Filtered, they are dropped like any other over-long sequence.
    filtered = prepare_dataset(small_config(tmp_path, filter_over_cap=True))
    assert filtered.counts == {5: 1} and filtered.manifest["summary"]["num_dropped"] == 2


def test_nothing_left_over_seqpacks_limit_says_to_fix_the_data(tmp_path: Path) -> None:
    write_parquet(tmp_path / "in" / "a.parquet", {"n": np.array([2**40, 2**31], np.int64)})
    config = small_config(tmp_path, filter_over_cap=True)
    with pytest.raises(InputError) as caught:
        prepare_dataset(config)
    message = str(caught.value)
    assert f"all 2 sequences are longer than max_seq_len 10 (the shortest has {2**31})" in message
    assert "over seqpack's limit of 2147483647 tokens" in message and "fix the lengths" in message
    assert "raise max_seq_len" not in message
    assert _nothing_written(tmp_path / "out")


def test_lengths_over_seqpacks_limit_on_the_command_line(tmp_path: Path) -> None:
    write_parquet(tmp_path / "in" / "a.parquet", {"n": np.array([5, 2**40, 2**40], np.int64)})
    args = ["prepare", str(tmp_path / "in"), "--length-column", "n", "--max-seq-len", "10"]
    result = CliRunner().invoke(app, [*args, "--output", str(tmp_path / "out")])
    assert result.exit_code == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith("error: 2 sequences in length column 'n' are longer than ")
    assert f"the longest has {2**40}, over seqpack's limit of 2147483647 tokens" in lines[0]
    assert "no --max-seq-len can hold it; pass --over-cap drop to drop them" in lines[0]
    assert "raise --max-seq-len" not in lines[0]
    assert _nothing_written(tmp_path / "out")


@pytest.mark.parametrize("command", ["prepare", "stats"])
def test_help_gives_the_bounds_of_max_seq_len_and_memory_limit(command: str) -> None:
    result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    if command == "prepare":  # stats takes a list, bounded the same way by the library
        assert f"at most {MAX_SEQ_LEN_LIMIT}" in text
    assert "a share of RAM such as 50%" in text
    assert f"at least {MIN_MEMORY_LIMIT // 2**20}MiB" in text


def test_no_rows(tmp_path: Path) -> None:
    write_parquet(tmp_path / "in" / "a.parquet", {"n": np.array([], dtype=np.int64)})
    config = small_config(tmp_path)
    with pytest.raises(InputError, match=r"hold no rows"):
        prepare_dataset(config)
    assert _nothing_written(tmp_path / "out")


def test_per_item_packer_and_max_seqs_per_bin(
    parquet_dataset: ParquetDataset, tmp_path: Path
) -> None:
    prepared = prepare_dataset(
        _config(parquet_dataset, tmp_path / "out", packer="per_item", max_seqs_per_bin=3)
    )
    assert prepared.templates == pack_length_histogram(prepared.counts, 512, max_seqs_per_bin=3)
    assert max(len(t) for t in prepared.templates) <= 3
    assert prepared.manifest["config"]["packer"] == "per-item"
    assert prepared.manifest["config"]["max_seqs_per_bin"] == 3
    # the recorded bound is the capped one: at least ceil(sequences / 3)
    bound = lower_bound_bins(prepared.counts, 512, max_seqs_per_bin=3)
    assert prepared.summary["lower_bound_bins"] == bound >= -(-sum(prepared.counts.values()) // 3)


def test_summary_bound_counts_sequences_that_cannot_share_a_bin(tmp_path: Path) -> None:
    # {600: 10, 10: 1} at 1000: 7 bins by volume, but no two 600s share a bin: the bound is 10,
    # and the 10 bins are optimal (the summary used to say "lower bound 7").
    write_parquet(tmp_path / "in" / "a.parquet", {"n": [600] * 10 + [10]})
    config = PrepareConfig(
        inputs=[tmp_path / "in"], length_column="n", max_seq_len=1000, output=tmp_path / "out"
    )
    summary = prepare_dataset(config).summary
    assert (summary["num_bins"], summary["lower_bound_bins"]) == (10, 10)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"max_seq_len": 0}, r"max_seq_len is 0; expected a positive integer; pass max_seq_len"),
        ({"max_seqs_per_bin": 0}, r"max_seqs_per_bin is 0; expected a positive integer; pass"),
        (
            {"memory_limit": "4 gigs"},
            r"memory_limit is '4 gigs'; expected a size",
        ),
        ({"packer": "fast"}, r"packer is 'fast'; expected one of batched, per-item"),
        ({"threads": 0}, r"threads is 0; expected an integer >= 1"),
        ({"inputs": []}, r"no inputs given"),
        ({"length_column": ""}, r"length_column is ''"),
    ],
)
def test_config_is_validated(tmp_path: Path, changes, message) -> None:
    options = {"inputs": ["x.parquet"], "length_column": "n", "max_seq_len": 8, "output": tmp_path}
    with pytest.raises(ConfigError, match=message):
        PrepareConfig(**{**options, **changes})


def test_memory_limit_and_temp_dir_reach_duckdb(
    parquet_dataset: ParquetDataset, tmp_path: Path
) -> None:
    prepared = prepare_dataset(
        _config(
            parquet_dataset, tmp_path / "out", memory_limit="256MB", temp_dir=tmp_path / "spill"
        )
    )
    assert prepared.counts == parquet_dataset.counts()


# ---- bounded resources and interruptions (subprocesses) ---------------------------------------


def _run_python(script: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, **kwargs
    )


@pytest.mark.parametrize("hard_limit_too", [False, True], ids=["soft", "soft and hard"])
def test_more_distinct_lengths_than_the_open_files_limit(
    tmp_path: Path, hard_limit_too: bool
) -> None:
    # With only the soft limit at 1024, prepare raises it to keep the pool files open; with the
    # hard one at 1024 too, it opens each pool file per write instead.
    lengths = np.repeat(np.arange(1, 1801), 2)  # 1800 distinct lengths, 1800 pool files
    ids = np.random.default_rng(0).permutation(lengths.size)
    write_parquet(tmp_path / "in" / "a.parquet", {"n": lengths, "id": ids})
    result = _run_python(
        f"""
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024 if {hard_limit_too} else hard))
        from seqpack_cli.prepare import PrepareConfig, prepare_dataset
        prepared = prepare_dataset(PrepareConfig(
            inputs=[{str(tmp_path / "in")!r}], length_column="n", id_column="id",
            max_seq_len=4000, output={str(tmp_path / "out")!r}))
        arrays = [prepared.pools[length] for length in prepared.counts]
        print(len(arrays), sum(a.size for a in arrays))
        print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
        """
    )
    assert result.returncode == 0, result.stderr
    # Every pool is whole, and the raised soft limit is put back afterwards.
    assert result.stdout.split() == ["1800", "3600", "1024"]
    assert resource.getrlimit(resource.RLIMIT_NOFILE)  # (this process's limit untouched)


@pytest.mark.parametrize("id_column", ["doc_id", None])
def test_a_full_disk_is_one_clear_error_and_leaves_nothing(
    parquet_dataset: ParquetDataset,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    id_column: str | None,
) -> None:
    import errno

    from seqpack_cli.prepared import pool_files

    real_write_all = pool_files.write_all

    def write_all(fd, buffers):
        if sum(memoryview(b).nbytes for b in buffers) > 200:  # headers pass, ids do not
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write_all(fd, buffers)

    monkeypatch.setattr(pool_files, "write_all", write_all)
    output = tmp_path / "out"
    with pytest.raises(ConfigError, match=r"cannot write the pools of .*out: No space left"):
        prepare_dataset(_config(parquet_dataset, output, id_column=id_column))
    assert _nothing_written(output)


@pytest.fixture(scope="module")
def big_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """About a second of prepare work: 1.5M rows in 3 files, 3000 distinct lengths."""
    root = tmp_path_factory.mktemp("big")
    rng = np.random.default_rng(7)
    num_rows = 1_500_000
    ids = rng.permutation(num_rows)
    lengths = rng.integers(1, 3001, num_rows)
    for i, part in enumerate(np.array_split(np.arange(num_rows), 3)):
        write_parquet(root / f"part-{i}.parquet", {"n": lengths[part], "id": ids[part]})
    return root


def _prepare_command(dataset: Path, output: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "seqpack_cli.prepare",
        "--input",
        str(dataset),
        "--length-column",
        "n",
        "--id-column",
        "id",
        "--max-seq-len",
        "4096",
        "--output",
        str(output),
        "--quiet",
    ]


@pytest.mark.slow
def test_sigkill_at_random_points_leaves_nothing_loadable(
    big_dataset: Path, tmp_path: Path
) -> None:
    output = tmp_path / "out"
    started = time.perf_counter()
    subprocess.run(_prepare_command(big_dataset, tmp_path / "reference"), check=True)
    full_run = time.perf_counter() - started
    reference = _tree_bytes(tmp_path / "reference")
    rng = random.Random(0)
    for _ in range(6):
        process = subprocess.Popen(_prepare_command(big_dataset, output))
        time.sleep(rng.uniform(0.05, 0.95) * full_run)
        process.kill()
        # Finished before the kill, or killed after the rename into place (while loading the
        # result or exiting): a complete output is fine, and must be the reference's bytes.
        if process.wait() == 0 or output.exists():
            assert _tree_bytes(output) == reference
            subprocess.run(["rm", "-rf", str(output)], check=True)
            continue
        with pytest.raises(PreparedFormatError):
            load_prepared(output)
    # The next run succeeds, clears the killed runs' leftovers, and gives the same bytes.
    subprocess.run(_prepare_command(big_dataset, output), check=True)
    assert _tree_bytes(output) == reference
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "reference"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_sigterm_and_sigint_remove_the_temporary_directory(
    big_dataset: Path, tmp_path: Path, signum: int
) -> None:
    output = tmp_path / "out"
    # A run that finished between the check and the signal proves nothing: run again (the
    # temporary directory lives for most of the run, so one of a few tries lands in it).
    for _ in range(5):
        process = subprocess.Popen(  # signalled: see with_default_signals
            with_default_signals(_prepare_command(big_dataset, output)),
            stderr=subprocess.PIPE,
            text=True,
        )
        # Wait until the job has created its temporary directory, then interrupt it.
        deadline = time.monotonic() + 300
        while not [p for p in tmp_path.iterdir() if ".seqpack-tmp-" in p.name]:
            assert time.monotonic() < deadline and process.poll() is None, "the job never started"
            time.sleep(0.01)
        time.sleep(0.05)
        process.send_signal(signum)
        _, stderr = process.communicate(timeout=60)
        if process.returncode == 0:
            subprocess.run(["rm", "-rf", str(output)], check=True)
            continue
        break
    assert process.returncode != 0, "every run finished before the signal"
    assert "Traceback" not in stderr
    assert list(tmp_path.iterdir()) == [], "no output and no temporary directory"

"""seqpack_cli.prepared: the prepared/ format — atomic writes, loading, and every refusal."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import ParquetDataset

from seqpack_cli.errors import ConfigError, InputError, PreparedFormatError
from seqpack_cli.npy_files import npy_header
from seqpack_cli.prepared import (
    FORMAT_VERSION,
    Prepared,
    PreparedWriter,
    load_prepared,
    pool_file_name,
    write_prepared,
)

COUNTS = {3: 2, 5: 3, 7: 1}
POOLS = {3: [40, 10], 5: [2, 99, 50], 7: [8]}
TEMPLATES = Counter({(7, 3): 1, (5, 5): 1, (5, 3): 1})


def _write(path: Path, **kwargs) -> Path:
    return write_prepared(
        path,
        counts=COUNTS,
        templates=TEMPLATES,
        pools=POOLS,
        manifest={"config": {"max_seq_len": 10}},
        **kwargs,
    )


def _copy(prepared_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "copy"
    shutil.copytree(prepared_dir, copy)
    return copy


def _edit_manifest(path: Path, **changes) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.update(changes)
    (path / "manifest.json").write_text(json.dumps(manifest))


# ---- round trip -------------------------------------------------------------------------------


def test_round_trip_unpacks_like_the_reference(tmp_path: Path) -> None:
    path = _write(tmp_path / "prepared")
    manifest, counts, templates, pools = load_prepared(path)
    assert manifest["format_version"] == FORMAT_VERSION
    assert counts == COUNTS
    assert templates == TEMPLATES
    assert sorted(pools) == [3, 5, 7]
    for length, ids in POOLS.items():
        np.testing.assert_array_equal(pools[length], np.sort(ids))  # ascending on disk
        assert pools[length].dtype == np.int64
        assert not pools[length].flags.writeable
        # Plain .npy files: numpy reads them too.
        np.testing.assert_array_equal(np.load(path / pool_file_name(length)), np.sort(ids))


def test_named_attributes_and_in_memory_loading(tmp_path: Path) -> None:
    prepared = load_prepared(_write(tmp_path / "prepared"), mmap=False, verify=True)
    assert isinstance(prepared, Prepared)
    assert prepared.max_seq_len == 10
    assert prepared.counts == COUNTS and prepared.templates == TEMPLATES
    np.testing.assert_array_equal(prepared.pools[5], [2, 50, 99])
    assert prepared.pools[5].flags.owndata or prepared.pools[5].base is not None


def test_canonical_json_bytes(tmp_path: Path) -> None:
    path = _write(tmp_path / "prepared")
    assert (path / "counts.json").read_text() == '{"3": 2, "5": 3, "7": 1}\n'
    # Templates descending, whatever order the packer produced them in.
    assert json.loads((path / "templates.json").read_text()) == [
        [[7, 3], 1],
        [[5, 5], 1],
        [[5, 3], 1],
    ]


def test_manifest_records_every_file_with_size_and_sha256(tmp_path: Path) -> None:
    import hashlib

    path = _write(tmp_path / "prepared")
    files = json.loads((path / "manifest.json").read_text())["files"]
    assert sorted(files) == [
        "counts.json",
        "pools/3.npy",
        "pools/5.npy",
        "pools/7.npy",
        "templates.json",
    ]
    for name, entry in files.items():
        data = (path / name).read_bytes()
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_write_prepared_refuses_pools_that_disagree_with_counts(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"pool for length 5 holds 2 ids but counts says 3"):
        write_prepared(
            tmp_path / "out",
            counts=COUNTS,
            templates=TEMPLATES,
            pools={**POOLS, 5: [1, 2]},
            manifest={"config": {"max_seq_len": 10}},
        )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("count", [0, 1, 9, 10, 12345, 10**15])
def test_npy_header_is_numpys(count: int) -> None:
    buffer = io.BytesIO()
    header = {"descr": "<i8", "fortran_order": False, "shape": (count,)}
    np.lib.format.write_array_header_1_0(buffer, header)
    assert npy_header(np.dtype("<i8"), count) == buffer.getvalue()


def test_pools_pickle_as_their_location(prepared_dir: Path) -> None:
    pools = load_prepared(prepared_dir).pools
    length = next(iter(pools))
    clone = pickle.loads(pickle.dumps(pools))
    assert len(pickle.dumps(pools)) < 200_000  # the location and counts, not the arrays
    np.testing.assert_array_equal(clone[length], pools[length])


def test_prepared_fixture_matches_its_dataset(
    parquet_dataset: ParquetDataset, prepared_dir: Path
) -> None:
    _, counts, templates, pools = load_prepared(prepared_dir, verify=True)
    assert counts == parquet_dataset.counts()
    for length, ids in parquet_dataset.pools().items():
        np.testing.assert_array_equal(pools[length], ids)
    assert sum(len(t) * m for t, m in templates.items()) == len(parquet_dataset.lengths)


# ---- refusals ---------------------------------------------------------------------------------


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(
        PreparedFormatError, match=r"does not exist; create it with `seqpack prepare"
    ):
        load_prepared(tmp_path / "nowhere")
    (tmp_path / "file").write_text("")
    with pytest.raises(PreparedFormatError, match="is a file"):
        load_prepared(tmp_path / "file")


def test_incomplete_directory_without_manifest(prepared_dir: Path, tmp_path: Path) -> None:
    copy = _copy(prepared_dir, tmp_path)
    (copy / "manifest.json").unlink()
    with pytest.raises(PreparedFormatError, match=r"manifest\.json is missing.*--overwrite"):
        load_prepared(copy)


def test_unknown_format_version(prepared_dir: Path, tmp_path: Path) -> None:
    copy = _copy(prepared_dir, tmp_path)
    _edit_manifest(copy, format_version=99)
    with pytest.raises(PreparedFormatError, match=r"format_version 99, but seqpack .* reads only"):
        load_prepared(copy)


def test_missing_or_truncated_pool(prepared_dir: Path, tmp_path: Path) -> None:
    copy = _copy(prepared_dir, tmp_path)
    pool = sorted((copy / "pools").iterdir())[0]
    pool.write_bytes(pool.read_bytes()[:-8])
    with pytest.raises(
        PreparedFormatError, match=rf"pools/{pool.name} has \d+ bytes, the manifest"
    ):
        load_prepared(copy)
    pool.unlink()
    with pytest.raises(PreparedFormatError, match=rf"pools/{pool.name} is missing"):
        load_prepared(copy)


def test_pool_size_disagreeing_with_counts(prepared_dir: Path, tmp_path: Path) -> None:
    copy = _copy(prepared_dir, tmp_path)
    counts = json.loads((copy / "counts.json").read_text())
    length = next(iter(counts))
    counts[length] += 1
    (copy / "counts.json").write_text(json.dumps(counts))
    with pytest.raises(PreparedFormatError, match=rf"but counts\.json says {counts[length]} seq"):
        load_prepared(copy)


def test_pool_header_disagreeing_with_counts_is_caught_on_access(tmp_path: Path) -> None:
    path = _write(tmp_path / "prepared")
    # Same size, different header: only the header read (on first access) can tell.
    pool = path / "pools" / "3.npy"
    pool.write_bytes(pool.read_bytes().replace(b"(2,)", b"(1,)"))
    prepared = load_prepared(path)
    with pytest.raises(PreparedFormatError, match=r"holds 1 ids but counts\.json says 2"):
        prepared.pools[3]


def test_verify_catches_tampered_bytes(prepared_dir: Path, tmp_path: Path) -> None:
    copy = _copy(prepared_dir, tmp_path)
    pool = sorted((copy / "pools").iterdir())[-1]
    data = bytearray(pool.read_bytes())
    data[-1] ^= 0xFF  # same size: only the hash can tell
    pool.write_bytes(bytes(data))
    load_prepared(copy)  # not verified: loads
    with pytest.raises(PreparedFormatError, match=rf"{pool.name} does not match its sha256"):
        load_prepared(copy, verify=True)


# ---- pool files -------------------------------------------------------------------------------


@pytest.mark.parametrize("keep_open", [True, False], ids=["kept open", "reopened per append"])
def test_pool_files_are_npy_files_with_their_sha256(tmp_path: Path, keep_open: bool) -> None:
    from seqpack_cli.prepared import pool_files

    # Reserving more descriptors than any limit allows: as if the hard limit were low.
    reserved_fds = pool_files.RESERVED_FDS if keep_open else 10**9
    (tmp_path / "pools").mkdir()
    pools = pool_files.PoolFiles(tmp_path, {7: 5, 3: 0, 12: 2}, reserved_fds=reserved_fds)
    pools.create()
    pools.append(7, np.array([1, 4]))
    pools.append(12, np.array([2, 3]))
    pools.append(7, np.array([], dtype=np.int64))
    pools.append(7, np.array([9, 10, 11]))
    files = pools.finish()
    assert sorted(files) == ["pools/12.npy", "pools/3.npy", "pools/7.npy"]
    for name, expected in [("7", [1, 4, 9, 10, 11]), ("12", [2, 3]), ("3", [])]:
        data = (tmp_path / "pools" / f"{name}.npy").read_bytes()
        buffer = io.BytesIO()
        np.save(buffer, np.array(expected, dtype="<i8"))
        assert data == buffer.getvalue()
        entry = files[f"pools/{name}.npy"]
        assert entry == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_pool_files_refuse_too_many_ids_and_report_short_pools(tmp_path: Path) -> None:
    from seqpack_cli.prepared.pool_files import PoolFiles

    (tmp_path / "pools").mkdir()
    pools = PoolFiles(tmp_path, {4: 2, 5: 1})
    pools.create()
    with pytest.raises(ValueError, match="pool 4: 3 ids written, its count is 2"):
        pools.append(4, np.array([1, 2, 3]))
    pools.append(4, np.array([1, 2]))
    with pytest.raises(RuntimeError, match=r"1 pools were not filled, e\.g\. pool 5: 0 of 1"):
        pools.finish()


# ---- atomic writing ---------------------------------------------------------------------------


def _siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


def test_a_failed_write_leaves_nothing(tmp_path: Path) -> None:
    output = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"), PreparedWriter(output) as writer:
        writer.create_pool_files({3: 1})
        writer.append_pool(3, np.array([1]))
        raise RuntimeError("boom")
    assert not output.exists()
    assert _siblings(output) == []


def test_sigterm_inside_the_writer_cleans_up(tmp_path: Path) -> None:
    output = tmp_path / "out"
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exit_info, PreparedWriter(output):
        os.kill(os.getpid(), signal.SIGTERM)
    assert exit_info.value.code == 128 + signal.SIGTERM
    assert not output.exists() and _siblings(output) == []
    assert signal.getsignal(signal.SIGTERM) is before


def test_leftovers_of_dead_runs_are_cleaned_and_never_loaded(tmp_path: Path) -> None:
    output = tmp_path / "out"
    # Left by killed runs: one whose pid is gone, one whose pid the system has given to another
    # process since (here, this one); neither holds its lock any more.
    dead = tmp_path / ".out.seqpack-tmp-999999999-deadbeef"
    reused = tmp_path / f".out.seqpack-tmp-{os.getpid()}-cafe0000"
    model = _write(tmp_path / "model")
    for leftover in (dead, reused):
        shutil.copytree(model, leftover)  # even a complete-looking one
    shutil.rmtree(model)
    with pytest.raises(PreparedFormatError):
        load_prepared(output)
    with PreparedWriter(output) as running:  # a run still going holds its lock
        _write(output)
        assert running.tmp_path.exists()
    assert not dead.exists() and not reused.exists()
    assert load_prepared(output).counts == COUNTS


def test_overwrite_rules(tmp_path: Path) -> None:
    output = _write(tmp_path / "out")
    with pytest.raises(ConfigError, match=r"already exists; pass overwrite=True"):
        _write(output)
    _write(output, overwrite=True)
    assert load_prepared(output).counts == COUNTS and _siblings(output) == []
    other = tmp_path / "precious"
    other.mkdir()
    (other / "thesis.tex").write_text("...")
    with pytest.raises(ConfigError, match="is not a seqpack prepared directory"):
        _write(other, overwrite=True)
    assert (other / "thesis.tex").exists()
    (tmp_path / "a_file").write_text("")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        _write(tmp_path / "a_file", overwrite=True)
    with pytest.raises(ConfigError, match="is a file, not a directory"):
        _write(tmp_path / "a_file" / "below")


def test_an_output_created_meanwhile_is_not_replaced_without_overwrite(tmp_path: Path) -> None:
    output = tmp_path / "out"
    with pytest.raises(ConfigError, match="already exists"), PreparedWriter(output) as writer:
        _write(output)  # another run finished first
        writer.commit({"format_version": FORMAT_VERSION, "config": {"max_seq_len": 10}})
    assert load_prepared(output).counts == COUNTS  # the other run's output is intact
    assert _siblings(output) == []


def test_loading_imports_no_heavy_module() -> None:
    # Training code pays only for what it uses: the reference's import path stays light.
    script = (
        "import sys\n"
        "from seqpack_cli.prepare import load_prepared\n"
        "print(sorted(m for m in ('duckdb', 'pyarrow', 'polars', 'typer', 'rich', 'torch')"
        " if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_thousands_of_pools_load_under_a_1024_open_files_limit(tmp_path: Path) -> None:
    # Each pool is memory-mapped; none may keep a file descriptor open.
    script = textwrap.dedent(
        f"""
        import resource
        import numpy as np
        from seqpack_cli.prepared import load_prepared, write_prepared

        counts = {{length: 2 for length in range(1, 1501)}}
        pools = {{length: [length, -length] for length in counts}}
        templates = {{(length,): 2 for length in counts}}  # every id in one bin
        write_prepared({str(tmp_path / "many")!r}, counts=counts, templates=templates,
                       pools=pools, manifest={{"config": {{"max_seq_len": 4000}}}})
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))
        prepared = load_prepared({str(tmp_path / "many")!r})
        arrays = [prepared.pools[length] for length in counts]  # all mapped at once
        assert sum(int(a.sum()) for a in arrays) == 0
        print("ok", len(arrays))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", "1500"]


@pytest.mark.parametrize(
    ("manifest", "templates", "problem"),
    [
        ({"config": {"max_seq_len": "10"}}, TEMPLATES, "config.max_seq_len"),
        ({"config": {"max_seq_len": 6}}, TEMPLATES, "more than config.max_seq_len 6"),
        ({"config": {"max_seq_len": 10}}, Counter({(7, 3): 1, (5, 5): 1}), "every sequence"),
        ({"config": {"max_seq_len": 10}, "n_bins": 4}, TEMPLATES, "n_bins"),
    ],
)
def test_write_prepared_refuses_what_load_prepared_would_refuse(
    tmp_path: Path, manifest: dict, templates: Counter, problem: str
) -> None:
    # The writer checks with the reader's own rules before creating anything.
    with pytest.raises(ConfigError, match="load_prepared refuses") as caught:
        write_prepared(
            tmp_path / "out", counts=COUNTS, templates=templates, pools=POOLS, manifest=manifest
        )
    assert problem in str(caught.value)
    assert list(tmp_path.iterdir()) == []

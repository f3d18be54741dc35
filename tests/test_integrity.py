"""What a loader serves is what was prepared: the manifest's self-digest, the cheap structural
checks every load runs on the token store (dtype and byte order, offsets, ids, each pooled id's
stored length), .npy headers that do not parse, and one consistent copy of the directory for
every file opened (a `prepare --overwrite` meanwhile, spawned DataLoader workers)."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from token_datasets import store_config, write_token_files
from typer.testing import CliRunner

from seqpack_cli.cli.app import app
from seqpack_cli.collate import CollateOptions
from seqpack_cli.errors import PreparedFormatError
from seqpack_cli.prepare import prepare_dataset
from seqpack_cli.prepared import load_prepared, write_prepared
from seqpack_cli.prepared import reader as reader_module
from seqpack_cli.prepared.integrity import (
    DIGEST_KEY,
    edge_digest,
    file_digest,
    manifest_digest,
    seal_manifest,
)
from seqpack_cli.token_sources import FlatTokenSource

runner = CliRunner()

COUNTS = {3: 2, 5: 3, 7: 1}
TEMPLATES = Counter({(7, 3): 1, (5, 5): 1, (5, 3): 1})


def _write(path: Path, pools: dict[int, list[int]] | None = None, **kwargs: Any) -> Path:
    return write_prepared(
        path,
        counts=COUNTS,
        templates=TEMPLATES,
        pools=pools or {3: [40, 10], 5: [2, 99, 50], 7: [8]},
        manifest={"config": {"max_seq_len": 10}},
        **kwargs,
    )


def _sequences(n: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 60_000, rng.integers(1, 17)).tolist() for _ in range(n)]


def _store(root: Path, n: int = 30, seed: int = 0, **options: Any) -> Path:
    """A prepared directory with a token store (uint16 tokens) of `n` sequences."""
    write_token_files(root, _sequences(n, seed), **options.pop("files", {}))
    prepare_dataset(store_config(root, **options))
    return root / "out"


def _manifest(path: Path) -> dict[str, Any]:
    return json.loads((path / "manifest.json").read_text())


def _reseal(path: Path, *names: str) -> None:
    """Record the new size, sha256 and edge digest of the files `names` and seal the manifest
    again: every digest agrees, so only the structural checks can tell."""
    manifest = _manifest(path)
    for name in names:
        data = (path / name).read_bytes()
        entry = manifest["files"][name]
        entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        if "edges_sha256" in entry:
            entry["edges_sha256"] = edge_digest(path / name)
    (path / "manifest.json").write_text(json.dumps(seal_manifest(manifest)))


def _one_line(error: pytest.ExceptionInfo[BaseException]) -> str:
    text = str(error.value)
    assert "\n" not in text, text
    return text


def _refused(path: Path, **kwargs: Any) -> str:
    with pytest.raises(PreparedFormatError) as error:
        load_prepared(path, **kwargs)
    return _one_line(error)


# ---- the manifest's self-digest -----------------------------------------------------------------


def test_the_manifest_carries_its_own_digest(tmp_path: Path) -> None:
    path = _write(tmp_path / "p")
    manifest = _manifest(path)
    assert manifest[DIGEST_KEY] == manifest_digest(manifest)
    assert load_prepared(path).manifest_sha256 == manifest[DIGEST_KEY]
    # The digest is of the content, not the text: re-indenting the file changes nothing.
    (path / "manifest.json").write_text(json.dumps(manifest, indent=4))
    assert load_prepared(path).counts == COUNTS


def test_an_edited_max_seq_len_is_refused_at_every_load(tmp_path: Path) -> None:
    # Used to load and serve rows of the edited length: the files table does not cover the
    # manifest itself, so even verify=True let it through.
    path = _write(tmp_path / "p")
    manifest = _manifest(path)
    manifest["config"]["max_seq_len"] = 128
    (path / "manifest.json").write_text(json.dumps(manifest))
    for verify in (False, True):
        text = _refused(path, verify=verify)
        assert "manifest.json" in text and DIGEST_KEY in text and "edited" in text


def test_a_manifest_without_its_digest_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "p")
    manifest = _manifest(path)
    del manifest[DIGEST_KEY]
    (path / "manifest.json").write_text(json.dumps(manifest))
    assert f"has no {DIGEST_KEY}" in _refused(path)


def test_format_version_1_loads_without_the_digest_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # What the release before the digest wrote: still loadable, with a warning (once).
    path = _write(tmp_path / "p")
    manifest = _manifest(path)
    del manifest[DIGEST_KEY]
    for entry in manifest["files"].values():
        entry.pop("edges_sha256", None)
    manifest["format_version"] = 1
    (path / "manifest.json").write_text(json.dumps(manifest))
    with caplog.at_level(logging.WARNING, logger="seqpack_cli.prepared.integrity"):
        assert load_prepared(path).counts == COUNTS
        assert load_prepared(path).counts == COUNTS
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "format_version 1" in warnings[0]


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(
        st.text(max_size=5),
        st.one_of(
            st.integers(-(2**127), 2**127), st.floats(allow_nan=False), st.text(), st.booleans()
        ),
        max_size=6,
    )
)
def test_the_digest_is_that_of_the_parsed_content(extra: dict[str, Any]) -> None:
    manifest = {"config": {"max_seq_len": 10}, "extra": extra}
    sealed = seal_manifest(manifest)
    reparsed = json.loads(json.dumps(sealed, indent=2))
    assert manifest_digest(reparsed) == sealed[DIGEST_KEY]
    changed = {**reparsed, "extra": {**extra, "new key": 1}}
    assert manifest_digest(changed) != sealed[DIGEST_KEY]


# ---- the token store at every load --------------------------------------------------------------


def test_a_flipped_token_is_caught_by_default_near_the_edges_and_by_verify_anywhere(
    tmp_path: Path,
) -> None:
    path = _store(tmp_path)
    tokens = path / "tokens" / "tokens.npy"
    data = bytearray(tokens.read_bytes())
    data[-3] ^= 0x40  # a token value: within the last MiB the default load reads
    tokens.write_bytes(bytes(data))
    text = _refused(path)
    assert "tokens/tokens.npy" in text and "verify" not in text
    # Past the edges only verify=True can tell (a sha256 of every byte): recorded again.
    _reseal(path, "tokens/tokens.npy")
    manifest = _manifest(path)
    manifest["files"]["tokens/tokens.npy"]["sha256"] = "0" * 64
    (path / "manifest.json").write_text(json.dumps(seal_manifest(manifest)))
    assert load_prepared(path).tokens is not None
    assert "tokens/tokens.npy does not match its sha256" in _refused(path, verify=True)


def test_a_same_size_store_of_another_prepare_is_refused(tmp_path: Path) -> None:
    # Used to be served without a word: same sizes, other tokens.
    path = _store(tmp_path / "a", seed=0)
    other = _store(tmp_path / "b", seed=1)
    for name in ("tokens.npy", "offsets.npy"):
        if (path / "tokens" / name).stat().st_size == (other / "tokens" / name).stat().st_size:
            (path / "tokens" / name).write_bytes((other / "tokens" / name).read_bytes())
    text = _refused(path)
    assert "tokens/" in text and "another prepare" in text


def _swap_two_boundaries(path: Path) -> None:
    """A size-preserving edit of offsets.npy: one boundary moved by one token."""
    offsets = np.load(path / "tokens" / "offsets.npy")
    k = int(np.flatnonzero(np.diff(offsets) > 1)[0]) + 1
    offsets[k] -= 1
    np.save(path / "tokens" / "offsets.npy", offsets)


def test_a_moved_offset_is_refused_at_load_not_mid_epoch(tmp_path: Path) -> None:
    # Used to be caught only by the collator, blaming max_seq_len, after rows were served.
    path = _store(tmp_path)
    _swap_two_boundaries(path)
    assert "tokens/offsets.npy" in _refused(path)
    _reseal(path, "tokens/offsets.npy")  # digests agree: the pooled lengths must tell
    text = _refused(path)
    assert "tokens/" in text and "sequence id" in text and "pool" in text


@pytest.mark.parametrize(
    ("name", "old", "new"),
    [
        ("tokens/tokens.npy", b"'<u2'", b"'>u2'"),  # one bit of the header
        ("tokens/offsets.npy", b"'<i8'", b"'>i8'"),
        ("tokens/ids.npy", b"'<i8'", b"'>i8'"),
    ],
)
def test_a_byte_swapped_header_is_refused(tmp_path: Path, name: str, old: str, new: str) -> None:
    path = _store(tmp_path, files={"ids": [10 * k for k in range(30)]}, id_column="doc")
    data = (path / name).read_bytes()
    assert old in data[:128]
    (path / name).write_bytes(data.replace(old, new, 1))
    _reseal(path, name)
    text = _refused(path)
    assert name in text and new.decode().strip("'") in text


def test_offsets_and_ids_are_compared_as_neighbours_not_subtracted(tmp_path: Path) -> None:
    # np.diff of int64 wraps around: ids -5e18 < 5e18 < -5e18 (!) looked increasing.
    tokens = np.arange(6, dtype=np.uint16)
    offsets = np.array([0, 2, 4, 6])
    with pytest.raises(Exception, match="strictly increasing"):
        FlatTokenSource(tokens, offsets, ids=[-(5 * 10**18), 5 * 10**18, -(5 * 10**18)])
    far = FlatTokenSource(tokens, offsets, ids=[-(5 * 10**18), 0, 5 * 10**18])
    assert far.sequence_lengths(np.array([5 * 10**18])).tolist() == [2]
    with pytest.raises(Exception, match="non-decreasing"):
        FlatTokenSource(tokens, [0, 2**62, -(2**62), 6])


# ---- .npy headers that do not parse -------------------------------------------------------------


def _break_header(file: Path) -> None:
    data = bytearray(file.read_bytes())
    at = data.index(b"'descr'")
    data[at] = ord("(")  # a flipped byte: numpy's header parser raises tokenize.TokenError
    file.write_bytes(bytes(data))


@pytest.mark.parametrize("name", ["tokens/tokens.npy", "tokens/offsets.npy", "pools/{}.npy"])
def test_a_broken_npy_header_is_one_line_in_python_and_in_stats(tmp_path: Path, name: str) -> None:
    path = _store(tmp_path)
    if "{}" in name:
        name = name.format(min(load_prepared(path).counts))
    _break_header(path / name)
    _reseal(path, name)
    text = _refused(path)
    assert name in text and "not a valid .npy file" in text
    result = runner.invoke(app, ["stats", str(path)])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and name in lines[0], result.output


@settings(max_examples=40, deadline=None)
@given(position=st.integers(0, 63), value=st.integers(0, 255))  # the 64-byte header
def test_any_corrupt_header_byte_is_a_prepared_format_error(
    tmp_path_factory: pytest.TempPathFactory, position: int, value: int
) -> None:
    root = tmp_path_factory.mktemp("header")
    write_prepared(
        root / "p",
        counts={3: 1},
        templates=Counter({(3,): 1}),
        pools={3: [7]},
        manifest={"config": {"max_seq_len": 4}},
    )
    pool = root / "p" / "pools" / "3.npy"
    data = bytearray(pool.read_bytes())
    data[position] = value
    pool.write_bytes(bytes(data))
    _reseal(root / "p", "pools/3.npy")
    try:
        assert load_prepared(root / "p").pools[3].tolist() == [7]
    except PreparedFormatError as error:
        assert "\n" not in str(error) and "pools/3.npy" in str(error)


# ---- one consistent copy: prepare --overwrite meanwhile -----------------------------------------


def test_a_swap_while_loading_gives_one_whole_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The swap comes after the manifest and counts were read, before any pool is opened: the
    # pools used to be opened by path, from the new copy, under the old one's counts.
    path = _write(tmp_path / "p")
    read_contents = reader_module._read_contents
    swapped = []

    def swap_then_read(*args: Any, **kwargs: Any) -> Any:
        result = read_contents(*args, **kwargs)
        if not swapped:
            swapped.append(True)
            _write(path, pools={3: [1, 2], 5: [3, 4, 5], 7: [6]}, overwrite=True)
        return result

    monkeypatch.setattr(reader_module, "_read_contents", swap_then_read)
    loaded = load_prepared(path)
    # The copy first opened was deleted while loading: the load started again on the new one.
    assert swapped and loaded.manifest_sha256 == _manifest(path)[DIGEST_KEY]
    assert {length: loaded.pools[length].tolist() for length in COUNTS} == {
        3: [1, 2],
        5: [3, 4, 5],
        7: [6],
    }


def test_a_pool_first_used_after_a_swap_is_refused_not_taken_from_the_new_copy(
    tmp_path: Path,
) -> None:
    path = _write(tmp_path / "p")
    loaded = load_prepared(path)
    assert loaded.pools[5].tolist() == [2, 50, 99]
    _write(path, pools={3: [1, 2], 5: [3, 4, 5], 7: [6]}, overwrite=True)
    assert loaded.pools[5].tolist() == [2, 50, 99]  # opened before: still the copy loaded
    with pytest.raises(PreparedFormatError) as error:
        loaded.pools[3]  # used to come from the new copy, under the old one's counts
    text = _one_line(error)
    assert "pools/3.npy" in text and "replaced" in text


def test_a_swap_while_loading_a_store_retries_on_the_new_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _store(tmp_path, seed=0)
    write_token_files(tmp_path / "b", _sequences(30, seed=1))
    read_contents = reader_module._read_contents
    swaps: list[str] = []

    def swap_then_read(root: Path, *args: Any, **kwargs: Any) -> Any:
        result = read_contents(root, *args, **kwargs)
        if not swaps:
            swaps.append("done")
            prepare_dataset(store_config(tmp_path / "b", output=path, overwrite=True))
        return result

    monkeypatch.setattr(reader_module, "_read_contents", swap_then_read)
    loaded = load_prepared(path)
    assert swaps and loaded.manifest_sha256 == _manifest(path)[DIGEST_KEY]
    expected = _sequences(30, seed=1)
    for length, ids in loaded.pools.items():
        for seq_id in ids.tolist():
            assert loaded.tokens[seq_id].tolist() == expected[seq_id]
            assert len(expected[seq_id]) == length


# ---- DataLoader workers started with spawn ------------------------------------------------------


@pytest.mark.slow
def test_spawned_workers_refuse_a_directory_replaced_since_it_was_opened(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from seqpack_cli.data import PackedDataset

    path = _store(tmp_path, seed=0)
    dataset = PackedDataset(load_prepared(path), collate=CollateOptions(pad_token_id=0), seed=1)
    first = dataset[0]["input_ids"]
    write_token_files(tmp_path / "b", _sequences(50, seed=2))
    prepare_dataset(store_config(tmp_path / "b", output=path, overwrite=True))
    assert torch.equal(dataset[0]["input_ids"], first)  # this process still serves its copy
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=None,
        num_workers=1,
        multiprocessing_context=multiprocessing.get_context("spawn"),
    )
    with pytest.raises(Exception, match="now holds another prepare") as error:
        next(iter(loader))
    assert "restart the run" in str(error.value)


# ---- the datasets ask for verify ----------------------------------------------------------------


def test_the_datasets_take_a_path_and_verify(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from seqpack_cli.collate import CollateOptions
    from seqpack_cli.data import PackedDataset, PackedIterableDataset

    path = _store(tmp_path)
    manifest = _manifest(path)
    manifest["files"]["tokens/tokens.npy"]["sha256"] = "0" * 64  # what only verify reads
    (path / "manifest.json").write_text(json.dumps(seal_manifest(manifest)))
    for dataset in (PackedDataset, PackedIterableDataset):
        collate = CollateOptions(pad_token_id=0)
        assert len(dataset(path, collate=collate, seed=0)) > 0  # a path loads
        for source in (path, load_prepared(path)):
            with pytest.raises(PreparedFormatError, match=r"tokens/tokens\.npy does not match"):
                dataset(source, collate=collate, seed=0, verify=True)


@pytest.mark.parametrize("size", [0, 1, (1 << 22) - 1, 1 << 22, (1 << 22) + 7])
def test_file_digest_is_the_sha256_and_size_of_every_byte(tmp_path: Path, size: int) -> None:
    """The one whole-file digest (the writer's files table, the engines, `verify=True`),
    across the 4 MiB block edges, by path and relative to a directory descriptor."""
    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8).tobytes()
    (tmp_path / "f.bin").write_bytes(data)
    expected = (size, hashlib.sha256(data).hexdigest())
    assert file_digest(tmp_path / "f.bin") == expected
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        assert file_digest("f.bin", dir_fd=fd) == expected
    finally:
        os.close(fd)

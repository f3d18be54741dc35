"""JSON Lines inputs (`*.jsonl`, `*.jsonl.gz`, `*.json`) beside parquet: the same prepared bytes.

The property: any rows, cut into any files, each written as JSON Lines (plain, gzipped, `.json`)
or parquet, give `counts.json`, `templates.json` and every pool byte for byte as the same rows
written as parquet files of the same names, and a manifest that differs only where it names the
input files (their paths, bytes and row counts). Then where things are found (a directory holding
both kinds, globs, `.json` files) and how JSON Lines reads (`input_batches`).
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dask_datasets import tree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqpack_cli.errors import InputError
from seqpack_cli.prepare import PrepareConfig, load_prepared, prepare_dataset
from seqpack_cli.prepare.footers import arrow_type, inspect_inputs
from seqpack_cli.prepare.input_batches import describe_input, input_kind, read_batches
from seqpack_cli.prepare.inputs import resolve_inputs
from seqpack_cli.prepare.jsonl_staging import staged_parquet

KINDS = ("parquet", "jsonl", "jsonl.gz", "json")


def write_jsonl(path: Path, rows: list[dict[str, Any]], *, tail: str = "\n") -> Path:
    """Rows as JSON Lines (gzipped for `*.gz`), unicode kept as is; `tail` ends the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows) + tail[1:]
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.lower().endswith(".gz") else data)
    return path


def write_parquet_rows(path: Path, rows: list[dict[str, Any]], schema: pa.Schema) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def _manifest(path: Path) -> dict[str, Any]:
    manifest = json.loads((path / "manifest.json").read_text())
    manifest.pop("manifest_sha256", None)  # covers the inputs' names too
    return manifest


def _prepare(inputs: list[Path], output: Path, **options: Any) -> Path:
    base: dict[str, Any] = {"length_column": "n", "max_seq_len": 64}
    prepare_dataset(PrepareConfig(inputs=inputs, output=output, **{**base, **options}))
    return output


# ---- the property -----------------------------------------------------------------------------

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@st.composite
def datasets(draw: st.DrawFn) -> tuple[list[list[dict[str, Any]]], list[str], dict[str, Any]]:
    """Rows (lengths 1..80, unique ids, unicode text) cut into 1-4 files, each file's kind,
    and the options (ids or row indexes; the over-cap policy)."""
    num_rows = draw(st.integers(1, 60))
    lengths = draw(st.lists(st.integers(1, 80), min_size=num_rows, max_size=num_rows))
    ids = draw(st.lists(st.integers(-(2**40), 2**40), min_size=num_rows, max_size=num_rows,
                        unique=True))  # fmt: skip
    texts = draw(st.lists(TEXT, min_size=num_rows, max_size=num_rows))
    rows = [
        {"n": length, "doc_id": id_, "text": text}
        for length, id_, text in zip(lengths, ids, texts, strict=True)
    ]
    cuts = sorted(draw(st.lists(st.integers(0, num_rows), max_size=3)))
    bounds = [0, *cuts, num_rows]
    files = [rows[a:b] for a, b in itertools.pairwise(bounds)]
    files = [part for part in files if part] or [rows]
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=len(files), max_size=len(files)))
    options: dict[str, Any] = {}
    if draw(st.booleans()):
        options["id_column"] = "doc_id"
    if max(lengths) > 64:  # drop only where something is left to pack
        options["over_cap"] = draw(st.sampled_from(["drop", "truncate"][min(lengths) > 64 :]))
    return files, kinds, options


SCHEMA = pa.schema([("n", pa.int64()), ("doc_id", pa.int64()), ("text", pa.string())])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datasets())
def test_jsonl_inputs_give_the_bytes_of_the_same_rows_as_parquet(dataset) -> None:
    files, kinds, options = dataset
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        mixed: list[Path] = []
        for i, (rows, kind) in enumerate(zip(files, kinds, strict=True)):
            name = f"part-{i}.{kind}"
            if kind == "parquet":
                mixed.append(write_parquet_rows(root / "mixed" / name, rows, SCHEMA))
            else:
                mixed.append(write_jsonl(root / "mixed" / name, rows))
            write_parquet_rows(root / "parquet" / f"part-{i}.parquet", rows, SCHEMA)
        # Named one by one, in reverse: the sorted order is kept whatever the naming order.
        got = _prepare(list(reversed(mixed)), root / "got", **options)
        want = _prepare([root / "parquet"], root / "want", **options)
        assert tree(got) == tree(want)
        got_manifest, want_manifest = _manifest(got), _manifest(want)
        listed = got_manifest.pop("inputs")
        want_manifest.pop("inputs")
        assert got_manifest == want_manifest
        assert listed["files"] == [
            {"path": path.as_posix(), "bytes": path.stat().st_size, "num_rows": len(rows)}
            for path, rows in zip(mixed, files, strict=True)
        ]
        load_prepared(got, verify=True)


# ---- finding the inputs -----------------------------------------------------------------------


def test_a_directory_holding_both_kinds_reads_both_in_one_sorted_order(tmp_path: Path) -> None:
    rows = [{"n": i % 9 + 1} for i in range(30)]
    write_jsonl(tmp_path / "data" / "a.jsonl", rows[:10])
    write_parquet_rows(tmp_path / "data" / "b.parquet", rows[10:20], pa.schema([("n", pa.int64())]))
    write_jsonl(tmp_path / "data" / "sub" / "c.JSONL.GZ", rows[20:])
    write_jsonl(tmp_path / "data" / "dataset_info.json", [{"n": 100}])  # metadata, not data
    found = resolve_inputs([tmp_path / "data"])
    assert [p.name for p in found] == ["a.jsonl", "b.parquet", "c.JSONL.GZ"]
    # A .json file is read when named, or matched by a glob that spells .json.
    assert resolve_inputs([str(tmp_path / "data" / "*.json")])[0].name == "dataset_info.json"
    prepared = load_prepared(_prepare([tmp_path / "data"], tmp_path / "out"))
    assert prepared.manifest["summary"]["num_input_rows"] == 30
    # Row-index ids follow the sorted files: row 5 of c.JSONL.GZ is id 25.
    by_id = {int(i): length for length, pool in prepared.pools.items() for i in pool}
    assert by_id == {i: rows[i]["n"] for i in range(30)}


def test_blank_lines_and_a_missing_key_read_as_no_row_and_null(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_text('{"n": 3}\n\n{"n": 4, "x": 1}\n{"x": 2}\n\n\n', encoding="utf-8")
    assert describe_input(path).num_rows == 3
    with pytest.raises(InputError, match=r"the first \(NULL\) in .*a\.jsonl at row 2 .*line 4"):
        _prepare([path], tmp_path / "out")


# ---- input_batches ----------------------------------------------------------------------------

MESSAGES = [
    [{"role": "system", "content": ""}, {"role": "user", "content": "héllo 👋"}],
    [],
    [{"role": "user", "content": "q"}, {"role": "assistant", "content": "日本語"}],
]


@pytest.mark.parametrize("kind", KINDS)
def test_read_batches_gives_rows_in_order_of_either_kind(tmp_path: Path, kind: str) -> None:
    rows = [
        {"text": f"row {i} ✓", "messages": MESSAGES[i % 3], "n": i + 1, "other": [i]}
        for i in range(25)
    ]
    path = tmp_path / f"data.{kind}"
    if kind == "parquet":
        pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=7)
    else:
        write_jsonl(path, rows, tail="\n\n\n")  # empty lines at the end
    assert input_kind(path) == ("parquet" if kind == "parquet" else "jsonl")
    described = describe_input(path)
    assert (described.kind, described.num_rows) == (input_kind(path), 25)
    assert described.num_bytes == path.stat().st_size
    batches = list(read_batches(path, ["messages", "text"], batch_rows=10))
    assert [batch.num_rows for batch in batches] == [10, 10, 5]
    assert all(batch.schema.names == ["messages", "text"] for batch in batches)
    table = pa.Table.from_batches(batches)
    assert table.column("text").to_pylist() == [row["text"] for row in rows]
    assert table.column("messages").to_pylist() == [row["messages"] for row in rows]
    message_type = table.schema.field("messages").type
    assert pa.types.is_list(message_type) and pa.types.is_struct(message_type.value_type)


def test_read_batches_streams_a_large_jsonl_file_in_bounded_batches(tmp_path: Path) -> None:
    # 40,000 rows of ~300 bytes (12 MB): parsed in 4 MiB blocks, handed out 1,000 rows a time.
    path = write_jsonl(
        tmp_path / "big.jsonl.gz", [{"text": "x" * 300, "n": i} for i in range(40_000)]
    )
    seen = 0
    for batch in read_batches(path, ["n"], batch_rows=1000):
        assert batch.num_rows <= 1000
        assert batch.column(0).to_pylist() == list(range(seen, seen + batch.num_rows))
        seen += batch.num_rows
    assert seen == 40_000


def test_read_batches_names_a_missing_column_and_a_bad_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [{"text": "a"}, {"text": "b"}])
    with pytest.raises(InputError, match=r"column 'messages' is not in .*a\.jsonl; its columns"):
        list(read_batches(path, ["messages"], batch_rows=4))
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"text": "a"}\n{"text": 7}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"mixed\.jsonl line 2 holds 7 in column 'text'"):
        list(read_batches(mixed, ["text"], batch_rows=4))
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "a"}\n{"text": "b"\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"broken\.jsonl line 2 is not valid JSON"):
        list(read_batches(broken, ["text"], batch_rows=4))


def test_a_key_of_mixed_types_troubles_no_other_column(tmp_path: Path) -> None:
    # `meta` is a number, then a string: only a read of `meta` itself stops, at its line.
    path = tmp_path / "a.jsonl"
    path.write_text('{"n": 2, "meta": 1}\n{"n": 3, "meta": "x"}\n', encoding="utf-8")
    assert load_prepared(_prepare([path], tmp_path / "out")).counts == {2: 1, 3: 1}
    with pytest.raises(InputError, match=r"line 2 holds \"x\" in column 'meta'"):
        list(read_batches(path, ["meta"], batch_rows=2))


def test_files_are_opened_by_python_whatever_their_names(tmp_path: Path) -> None:
    # pyarrow takes only UTF-8 path names; DuckDB would expand the [1] of a copy's name.
    name = os.fsdecode(b"caf\xe9 [1].jsonl")
    path = write_jsonl(tmp_path / name, [{"n": 5}, {"n": 6}])
    assert describe_input(path).num_rows == 2
    assert load_prepared(_prepare([path], tmp_path / "out")).counts == {5: 1, 6: 1}


def test_the_dask_driver_fingerprints_a_jsonl_file_by_its_head_and_tail(tmp_path: Path) -> None:
    # A JSON Lines file has no parquet footer: a worker's stale copy of the same size differs
    # in its first or last MiB (the whole file when it is small).
    from seqpack_cli.prepare.engines.dask.fingerprints import difference, fingerprint

    path = write_jsonl(tmp_path / "a.jsonl", [{"n": i % 9 + 1} for i in range(200)])
    driver = fingerprint(path)
    assert driver is not None
    data = path.read_bytes()
    for offset in (2, len(data) // 2, len(data) - 3):  # '{"n": 1}': a digit, same size
        changed = bytearray(data)
        changed[offset : offset + 1] = b"7" if data[offset : offset + 1] != b"7" else b"8"
        path.write_bytes(bytes(changed))
        seen = fingerprint(path)
        assert difference(seen, driver) == "its first or last MiB differs from the driver's " + (
            f"(both {len(data)} bytes)"
        )
    path.write_bytes(data)
    assert difference(fingerprint(path), driver) is None


def test_a_byte_order_mark_and_windows_line_ends_are_read(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"n": 3}\r\n{"n": 4, "text": "caf\xc3\xa9"}\r\n\r\n')
    assert describe_input(path).num_rows == 2
    assert load_prepared(_prepare([path], tmp_path / "out")).counts == {3: 1, 4: 1}


def test_read_batches_holds_a_few_blocks_of_a_jsonl_file_not_the_file(tmp_path: Path) -> None:
    # 48 MB of JSON Lines, 45 MB of it text: read in 4 MiB blocks and 1,000-row batches, Arrow's
    # memory peaks at a few blocks (18 MiB measured); a whole read holds the strings at once
    # (pyarrow.json.read_json of the text column: 53 MiB).
    import subprocess
    import sys

    line = json.dumps({"n": 7, "text": "y" * 150}) + "\n"
    path = tmp_path / "big.jsonl"
    path.write_text(line * 300_000, encoding="utf-8")
    assert path.stat().st_size > 45 * 2**20
    script = (
        "import sys, pyarrow as pa; from pathlib import Path; "
        "pa.set_cpu_count(2); pa.set_io_thread_count(2); "  # blocks parsed at once: as here
        "from seqpack_cli.prepare.input_batches import read_batches; "
        "batches = read_batches(Path(sys.argv[1]), ['text'], batch_rows=1000); "
        "n = sum(len(b.column(0)) for b in batches); "
        "print(n, pa.default_memory_pool().max_memory())"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, check=True
    )
    num_rows, peak = map(int, done.stdout.split())
    assert num_rows == 300_000
    assert peak < 32 * 2**20, f"Arrow held {peak / 2**20:.1f} MiB"


def test_staging_words_a_malformed_line_as_a_line_and_a_bad_value_by_its_column(
    tmp_path: Path,
) -> None:
    # The footer pass catches a malformed line first; staging words one too (a file rewritten
    # between the passes), as the line it is, never as a column named after its message.
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"n": 2, "i": 1}\n{"n": 3, "i": \n', encoding="utf-8")
    with pytest.raises(InputError) as caught:
        staged_parquet(broken, [("n", "BIGINT"), ("i", "BIGINT")])
    message = str(caught.value)
    assert "broken.jsonl line 2 is not valid JSON" in message
    assert "column" not in message
    ids = write_jsonl(
        tmp_path / "ids.jsonl", [{"n": 2, "i": 1}, {"n": 3, "i": 2}, {"n": 1, "i": "x"}]
    )
    with pytest.raises(
        InputError, match=r"id column 'i' \(id_column\) in .*ids\.jsonl line 3 holds"
    ):
        staged_parquet(ids, [("n", "BIGINT"), ("i", "BIGINT")])
    lists = write_jsonl(tmp_path / "lists.jsonl", [{"t": [1, 2]}, {"t": [3, 4.5]}])
    with pytest.raises(
        InputError,
        match=r"length column 't' .* line 2 holds \[3, 4\.5\]; expected "
        r"lists of integer token ids",
    ):
        staged_parquet(lists, [("t", "BIGINT[]")])


INTEGER_TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
INTEGER_TYPES += [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


@pytest.mark.parametrize("element", INTEGER_TYPES, ids=str)
def test_staging_types_are_the_types_the_footers_bind(tmp_path: Path, element: pa.DataType) -> None:
    # footers.arrow_type inverts the binding check_footers gives a column (one table for both
    # directions), so a staged copy holds the very types DuckDB is told to read.
    path = tmp_path / "a.parquet"
    lengths = pa.array([1, 2], element)
    ids = pa.array([[1], [2, 3]], pa.list_(element))
    pq.write_table(pa.table({"n": lengths, "t": ids}), path)
    for column, expected in (("n", element), ("t", pa.list_(element))):
        [file] = inspect_inputs([path], column)
        [(_, bound)] = file.column_types
        assert arrow_type(bound) == expected


def test_a_reader_error_without_text_is_still_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pyarrow or the OS may raise with no message: the error names its type, never an IndexError.
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"n": [1, 2]}), path)
    monkeypatch.setattr(pq, "read_metadata", _raise(pa.ArrowInvalid("")))
    with pytest.raises(
        InputError, match=r"a\.parquet is not a readable parquet file \(ArrowInvalid\)"
    ):
        describe_input(path)
    monkeypatch.setattr(pq, "ParquetFile", _raise(OSError()))
    with pytest.raises(InputError, match=r"cannot read .*a\.parquet as parquet \(OSError\)"):
        list(read_batches(path, ["n"], batch_rows=2))


def _raise(error: BaseException) -> Any:
    def raising(*args: Any, **kwargs: Any) -> Any:
        raise error

    return raising

"""`seqpack prepare` on bad JSON Lines inputs: one line on stderr, exit 1, nothing written.

Each case names what it must say: the file (and for a line's fault, the line's number), the
column or option, and the fix; as the parquet cases of test_cli_prepare do, the run leaves no
file behind (no output, no temporary sibling).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from seqpack_cli.cli.app import app


def _lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def _rows(path: Path, rows: list[dict[str, object]]) -> Path:
    return _lines(path, [json.dumps(row) for row in rows])


def _good(folder: Path, name: str = "a.jsonl", num_rows: int = 30) -> Path:
    return _rows(folder / name, [{"n": i % 7 + 1, "text": f"row {i}"} for i in range(num_rows)])


def _args(*inputs: Path, length: str = "n", extra: tuple[str, ...] = ()) -> list[str]:
    output = inputs[0].parent / "out"
    return [*map(str, inputs), "--length-column", length, "--max-seq-len", "64", "-o",
            str(output), *extra]  # fmt: skip


def _malformed(t: Path) -> list[str]:
    good = _good(t / "data")
    lines = [json.dumps({"n": 3})] * 40 + ['{"n": 4,, "text": "x"}', json.dumps({"n": 5})]
    return _args(good, _lines(t / "data" / "b.jsonl.gz", lines))


def _malformed_late(t: Path) -> list[str]:
    # Past the lines that type the columns (10,000): found by the full read, by number.
    lines = [json.dumps({"n": 2})] * 12_000 + ['{"n": 3']
    return _args(_lines(t / "data" / "late.jsonl", lines))


def _not_an_object(t: Path) -> list[str]:
    return _args(_lines(t / "data" / "a.json", ['[{"n": 1}, {"n": 2}]']))


def _missing_column(t: Path) -> list[str]:
    return _args(_good(t / "data"), length="num_tokens")


def _missing_in_second(t: Path) -> list[str]:
    return _args(_good(t / "data"), _rows(t / "data" / "b.jsonl", [{"len": 3, "text": "x"}]))


def _float_length(t: Path) -> list[str]:
    return _args(_rows(t / "data" / "a.jsonl", [{"n": 1.5}, {"n": 2}]))


def _float_length_late(t: Path) -> list[str]:
    lines = [json.dumps({"n": 4})] * 10_500 + [json.dumps({"n": 3.5})]
    return _args(_lines(t / "data" / "a.jsonl", lines))


def _string_length_late(t: Path) -> list[str]:
    return _args(_rows(t / "data" / "a.jsonl", [{"n": 4}, {"n": "7"}]))


def _null_length(t: Path) -> list[str]:
    return _args(_rows(t / "data" / "a.jsonl", [{"n": 4}, {"n": None}, {"n": 0}]))


def _empty_file(t: Path) -> list[str]:
    first, last = _good(t / "data"), _good(t / "data", "c.jsonl")
    empty = t / "data" / "b.jsonl"
    empty.write_bytes(b"")
    return _args(first, empty, last)


def _text_length_jsonl(t: Path) -> list[str]:
    return _args(_good(t / "data"), length="text")


def _text_length_parquet(t: Path) -> list[str]:
    path = t / "data" / "a.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"text": ["a b", "c"], "n": [2, 1]}), path)
    return _args(path, length="text")


def _duplicate_ids(t: Path) -> list[str]:
    path = _rows(t / "data" / "a.jsonl", [{"n": 2, "id": 5}, {"n": 3, "id": 6}, {"n": 1, "id": 5}])
    return _args(path, extra=("--id-column", "id"))


def _string_ids(t: Path) -> list[str]:
    path = _rows(t / "data" / "a.jsonl", [{"n": 2, "id": "a"}, {"n": 3, "id": "b"}])
    return _args(path, extra=("--id-column", "id"))


def _tokens_column(t: Path) -> list[str]:
    path = _rows(t / "data" / "a.jsonl", [{"ids": [1, 2, 3]}, {"ids": [4]}])
    return _args(path, length="ids", extra=("--tokens-column", "ids"))


def _not_gzip(t: Path) -> list[str]:
    path = t / "data" / "a.jsonl.gz"
    path.parent.mkdir(parents=True)
    path.write_text('{"n": 1}\n')
    return _args(path)


CASES: dict[str, tuple[Callable[[Path], list[str]], list[str]]] = {
    "malformed line": (_malformed, ["b.jsonl.gz line 41 is not valid JSON", "fix or remove"]),
    "malformed line past the sample": (
        _malformed_late,
        ["late.jsonl line 12001 is not valid JSON"],
    ),
    "a line that is no object": (_not_an_object, ["a.json line 1 is not a JSON object", "array"]),
    "missing column": (
        _missing_column,
        ["'num_tokens' (--length-column) is not in", "a.jsonl", "columns are: n, text"],
    ),
    "missing column in a second file": (
        _missing_in_second,
        ["length column 'n' (--length-column) is not in", "b.jsonl", "columns are: len, text"],
    ),
    "non-integer length in the first lines": (
        _float_length,
        ["'n' (--length-column) in", "holds double values", "write them as JSON integers"],
    ),
    "non-integer length past the sample": (
        _float_length_late,
        ["'n' (--length-column) in", "a.jsonl line 10501 holds 3.5", "integer token counts"],
    ),
    "a length that is a string": (
        _string_length_late,
        ["'n' (--length-column) in", 'a.jsonl line 2 holds "7"', "fix or drop that line"],
    ),
    "null and zero lengths": (
        _null_length,
        ["2 NULL, zero or negative lengths, the first (NULL)", "a.jsonl at row 1", "line 2"],
    ),
    "an empty file among others": (
        _empty_file,
        ["b.jsonl holds no JSON object (it is empty)", "leave it out"],
    ),
    "a text column as lengths (JSON Lines)": (
        _text_length_jsonl,
        ["'text' (--length-column)", "holds text", "--tokenizer PATH --text-column text"],
    ),
    "a text column as lengths (parquet)": (
        _text_length_parquet,
        ["'text' (--length-column)", "holds text", "--tokenizer PATH --text-column text"],
    ),
    "duplicate ids": (_duplicate_ids, ["id column 'id'", "5", "a.jsonl"]),
    "string ids": (_string_ids, ["id column 'id' (--id-column)", "holds string values"]),
    "a token store from JSON Lines": (
        _tokens_column,
        ["a.jsonl is JSON Lines", "(--tokens-column) reads token lists from parquet only"],
    ),
    "a .gz that is not gzip": (_not_gzip, ["a.jsonl.gz", "gzip"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_jsonl_input_is_one_line_and_writes_nothing(tmp_path: Path, name: str) -> None:
    make, fragments = CASES[name]
    args = make(tmp_path)
    before = sorted(p.as_posix() for p in tmp_path.rglob("*"))
    result = CliRunner().invoke(app, ["prepare", *args])
    assert result.exit_code == 1, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert sorted(p.as_posix() for p in tmp_path.rglob("*")) == before, "nothing written"


def test_the_same_rows_as_jsonl_prepare_through_the_cli(tmp_path: Path) -> None:
    path = _good(tmp_path / "data", "a.jsonl.gz")
    result = CliRunner().invoke(app, ["prepare", *_args(path, extra=("--json",))])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["num_input_rows"] == summary["num_sequences"] == 30

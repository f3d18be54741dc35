"""`seqpack prepare --tokenizer`: text in, a prepared directory with its token store out.

The store is checked against transformers (`AutoTokenizer.from_pretrained(dir)` and
`apply_chat_template(..., return_assistant_tokens_mask=True)`) and against the same tokens
prepared from parquet with `--tokens-column`: the same pools, counts, templates and tokens.
Every bad input is one line, exit code 1, and nothing written.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import assert_failed_cleanly
from tokenizer_fixtures import (
    UNMARKED_TEMPLATE,
    build_bpe_tokenizer,
    generate_conversations,
)
from typer.testing import CliRunner

from seqpack_cli import load_prepared
from seqpack_cli.cli.app import app
from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.prepare import PrepareConfig, prepare_dataset
from seqpack_cli.prepare.tokenize_options import TokenizeOptions

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bpe_tokenizer(tmp_path_factory.mktemp("tok"))


@pytest.fixture(scope="module")
def hf_tokenizer(tokenizer_dir: Path) -> Any:
    return transformers.AutoTokenizer.from_pretrained(str(tokenizer_dir))


def _chats(n: int, seed: int = 0) -> list[list[dict[str, Any]]]:
    return generate_conversations(n, seed)


def _write(folder: Path, columns: dict[str, list[Any]], files: int = 3) -> Path:
    """`columns` as `files` parquet files of consecutive rows."""
    folder.mkdir(parents=True, exist_ok=True)
    table = pa.table(columns)
    cuts = np.linspace(0, table.num_rows, files + 1).astype(int)
    for i, (start, stop) in enumerate(itertools.pairwise(cuts)):
        pq.write_table(table.slice(start, stop - start), folder / f"part-{i}.parquet")
    return folder


def _prepare(inputs: Path, output: Path, *extra: str, max_seq_len: int = 512) -> Any:
    args = ["prepare", str(inputs), "--max-seq-len", str(max_seq_len), "-o", str(output), "-q"]
    return CliRunner().invoke(app, [*args, *extra])


def _rows(prepared: Any, role: str) -> list[list[int]]:
    """Each stored sequence's values, in ascending id order."""
    source = getattr(prepared, role)
    ids = np.sort(np.concatenate([prepared.pools[length] for length in prepared.counts]))
    return [np.asarray(source[int(i)]).tolist() for i in ids]


# ---- what the store holds ------------------------------------------------------------------


def test_messages_equal_transformers_chat_template_and_assistant_mask(
    tmp_path: Path, tokenizer_dir: Path, hf_tokenizer: Any
) -> None:
    chats = _chats(240, seed=3)
    inputs = _write(tmp_path / "in", {"messages": chats})
    result = _prepare(inputs, tmp_path / "out", "--tokenizer", str(tokenizer_dir),
                      "--messages-column", "messages")  # fmt: skip
    assert result.exit_code == 0, result.output
    prepared = load_prepared(tmp_path / "out", verify=True)
    tokens, masks = _rows(prepared, "tokens"), _rows(prepared, "loss_mask")
    for i, chat in enumerate(chats):
        expected = hf_tokenizer.apply_chat_template(
            chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        assert tokens[i] == list(expected["input_ids"]), i
        assert masks[i] == list(expected["assistant_masks"]), i
    assert sum(prepared.counts.values()) == len(chats)
    assert prepared.tokenizer is not None and prepared.tokenizer["kind"] == "messages"


def test_train_on_all_stores_no_mask(tmp_path: Path, tokenizer_dir: Path) -> None:
    inputs = _write(tmp_path / "in", {"messages": _chats(30)})
    result = _prepare(inputs, tmp_path / "out", "--tokenizer", str(tokenizer_dir),
                      "--messages-column", "messages", "--train-on", "all")  # fmt: skip
    assert result.exit_code == 0, result.output
    prepared = load_prepared(tmp_path / "out")
    assert prepared.loss_mask is None and prepared.tokens is not None
    assert prepared.tokenizer is not None and prepared.tokenizer["train_on"] == "all"


@pytest.mark.parametrize("special", [True, False])
def test_text_equals_the_tokenizers_ids(
    tmp_path: Path, tokenizer_dir: Path, hf_tokenizer: Any, special: bool
) -> None:
    texts = [" ".join(m["content"] or "x" for m in chat) or "x" for chat in _chats(120, seed=5)]
    inputs = _write(tmp_path / "in", {"text": texts})
    flag = "--add-special-tokens" if special else "--no-add-special-tokens"
    result = _prepare(inputs, tmp_path / "out", "--tokenizer", str(tokenizer_dir),
                      "--text-column", "text", flag)  # fmt: skip
    assert result.exit_code == 0, result.output
    prepared = load_prepared(tmp_path / "out")
    expected = hf_tokenizer(texts, add_special_tokens=special)["input_ids"]
    assert _rows(prepared, "tokens") == [list(ids) for ids in expected]
    assert prepared.loss_mask is None


def test_prompt_completion_masks_the_prompt(tmp_path: Path, tokenizer_dir: Path) -> None:
    from seqpack_cli.tokenize import encode_prompt_completion, load_tokenizer

    rng = np.random.default_rng(0)
    words = ["the", "model", "packs", "sequences", "into", "bins", "and", "the", "completion"]
    prompts = [" ".join(rng.choice(words, rng.integers(1, 9))) for _ in range(80)]
    completions = [" " + " ".join(rng.choice(words, rng.integers(1, 9))) for _ in range(80)]
    inputs = _write(tmp_path / "in", {"prompt": prompts, "completion": completions})
    result = _prepare(inputs, tmp_path / "out", "--tokenizer", str(tokenizer_dir),
                      "--prompt-column", "prompt", "--completion-column", "completion")  # fmt: skip
    assert result.exit_code == 0, result.output
    prepared = load_prepared(tmp_path / "out")
    encoded = encode_prompt_completion(load_tokenizer(tokenizer_dir), prompts, completions)
    ends = np.cumsum(encoded.lengths)
    assert _rows(prepared, "tokens") == [t.tolist() for t in np.split(encoded.tokens, ends[:-1])]
    assert encoded.loss_mask is not None
    masks = [m.tolist() for m in np.split(encoded.loss_mask, ends[:-1])]
    assert _rows(prepared, "loss_mask") == masks
    assert all(0 < sum(m) < len(m) for m in masks)  # the prompt masked, the completion kept


def test_prompt_completion_without_special_tokens(tmp_path: Path, tokenizer_dir: Path) -> None:
    # --no-add-special-tokens was recorded in the manifest but ignored: <s> ... </s> were stored.
    from tokenizers import Tokenizer

    prompts, completions = ["the model", "a bin", "packs"], [" packs data", " is full", " it"]
    inputs = _write(tmp_path / "in", {"prompt": prompts, "completion": completions}, files=1)
    result = _prepare(inputs, tmp_path / "out", "--tokenizer", str(tokenizer_dir),
                      "--prompt-column", "prompt", "--completion-column", "completion",
                      "--no-add-special-tokens")  # fmt: skip
    assert result.exit_code == 0, result.output
    prepared = load_prepared(tmp_path / "out")
    assert prepared.tokenizer is not None and prepared.tokenizer["add_special_tokens"] is False
    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    expected = [
        tokenizer.encode(p + c, add_special_tokens=False).ids
        for p, c in zip(prompts, completions, strict=True)
    ]
    assert _rows(prepared, "tokens") == expected  # ascending ids: the rows in order


def test_the_same_as_the_tokens_prepared_from_parquet(
    tmp_path: Path, tokenizer_dir: Path, hf_tokenizer: Any
) -> None:
    """--tokenizer gives what --tokens-column gives for the tokens written as parquet: the same
    pools, counts, templates, ids range and store, with an id column and over-cap split."""
    chats = _chats(150, seed=9)
    ids = list(range(10_000, 10_000 + 3 * len(chats), 3))
    inputs = _write(tmp_path / "text", {"messages": chats, "doc": ids})
    options = ["--max-seq-len", "64", "--id-column", "doc", "--over-cap", "split", "-q"]
    common = ["prepare", "--tokenizer", str(tokenizer_dir), "--messages-column", "messages"]
    result = CliRunner().invoke(app, [*common, str(inputs), "-o", str(tmp_path / "a"), *options])
    assert result.exit_code == 0, result.output
    encoded = [
        hf_tokenizer.apply_chat_template(
            chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        for chat in chats
    ]
    tokens = _write(tmp_path / "tokens", {
        "input_ids": [list(e["input_ids"]) for e in encoded],
        "loss_mask": [list(e["assistant_masks"]) for e in encoded],
        "doc": ids,
    })  # fmt: skip
    result = CliRunner().invoke(app, ["prepare", str(tokens), "-o", str(tmp_path / "b"),
                                      "--length-column", "input_ids", "--tokens-column",
                                      "input_ids", "--loss-mask-column", "loss_mask",
                                      *options])  # fmt: skip
    assert result.exit_code == 0, result.output
    a, b = load_prepared(tmp_path / "a"), load_prepared(tmp_path / "b")
    assert a.counts == b.counts and a.templates == b.templates
    assert a.manifest["summary"] == b.manifest["summary"]
    for length in a.counts:
        assert np.array_equal(a.pools[length], b.pools[length])
    assert _rows(a, "tokens") == _rows(b, "tokens")
    assert _rows(a, "loss_mask") == _rows(b, "loss_mask")
    assert a.manifest["summary"]["num_split"] > 0


def test_over_cap_applies_to_the_token_counts(tmp_path: Path, tokenizer_dir: Path) -> None:
    texts = ["packing " * n for n in (2, 5, 40, 3)]
    inputs = _write(tmp_path / "in", {"text": texts}, files=1)
    base = ["--tokenizer", str(tokenizer_dir), "--text-column", "text"]
    refused = _prepare(inputs, tmp_path / "refused", *base, max_seq_len=16)
    assert refused.exit_code == 1
    assert "longer than --max-seq-len 16" in refused.stderr
    assert not (tmp_path / "refused").exists()
    dropped = _prepare(inputs, tmp_path / "dropped", *base, "--over-cap", "drop", max_seq_len=16)
    assert dropped.exit_code == 0, dropped.output
    prepared = load_prepared(tmp_path / "dropped")
    assert prepared.manifest["summary"]["num_dropped"] == 1
    assert sum(prepared.counts.values()) == 3


def test_sequences_over_the_cap_are_named_by_the_tokenized_column(
    tmp_path: Path, tokenizer_dir: Path
) -> None:
    # It used to say "in length column 'input_ids'": the store's name, no column of the input.
    inputs = _write(tmp_path / "in", {"body": ["packing " * 40, "a"]}, files=1)
    result = _prepare(inputs, tmp_path / "out", "--tokenizer", str(tokenizer_dir),
                      "--text-column", "body", max_seq_len=16)  # fmt: skip
    _fails(result, tmp_path / "out", "1 sequences in --text-column 'body' (tokenized) are longer")
    assert "input_ids" not in result.stderr
    pairs = _write(tmp_path / "pairs", {"p": ["packing " * 40], "c": [" a"]}, files=1)
    result = _prepare(pairs, tmp_path / "out", "--tokenizer", str(tokenizer_dir), "--prompt-column",
                      "p", "--completion-column", "c", max_seq_len=16)  # fmt: skip
    _fails(result, tmp_path / "out", "--prompt-column 'p' and --completion-column 'c' (tokenized)")


def test_the_manifest_records_the_tokenizer_and_refuses_another(
    tmp_path: Path, tokenizer_dir: Path
) -> None:
    inputs = _write(tmp_path / "in", {"text": ["a packing model"] * 6}, files=1)
    config = PrepareConfig(
        inputs=[inputs],
        length_column=None,  # type: ignore[arg-type]  # the tokenizer gives the lengths
        max_seq_len=64,
        output=tmp_path / "out",
        tokenize=TokenizeOptions(tokenizer_dir, text_column="text"),
    )
    prepared = prepare_dataset(config)
    recorded = load_prepared(tmp_path / "out").tokenizer
    assert recorded == prepared.tokenizer
    assert recorded is not None and recorded["vocab_size"] > 0 and len(recorded["sha256"]) == 64
    prepared.check_tokenizer(tokenizer_dir)
    other = build_bpe_tokenizer(tmp_path / "other", template=UNMARKED_TEMPLATE)
    config_text = json.loads((other / "tokenizer.json").read_text())
    config_text["added_tokens"].append(
        {**config_text["added_tokens"][-1], "id": 4000, "content": "<extra>"}
    )
    (other / "tokenizer.json").write_text(json.dumps(config_text))
    with pytest.raises(InputError, match="is not the one"):
        prepared.check_tokenizer(other)


def test_the_recorded_tokenizer_file_is_checked_without_building_it(
    tmp_path: Path, tokenizer_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inputs = _write(tmp_path / "in", {"text": ["a packing model"] * 3}, files=1)
    result = _prepare(inputs, tmp_path / "out", "--tokenizer", str(tokenizer_dir),
                      "--text-column", "text")  # fmt: skip
    assert result.exit_code == 0, result.output
    prepared = load_prepared(tmp_path / "out")

    def no_build(path: object) -> None:
        raise AssertionError(f"load_tokenizer({path}) ran")

    monkeypatch.setattr("seqpack_cli.tokenize.load_tokenizer", no_build)
    prepared.check_tokenizer(tokenizer_dir)  # its directory and its file: the hash suffices
    prepared.check_tokenizer(tokenizer_dir / "tokenizer.json")
    with pytest.raises(ConfigError, match="no such file or directory"):
        prepared.check_tokenizer(tmp_path / "nope")
    monkeypatch.undo()
    other = build_bpe_tokenizer(tmp_path / "other", template=None)
    (other / "tokenizer.json").write_text((other / "tokenizer.json").read_text() + "\n")
    with pytest.raises(InputError, match="same vocabulary, other merges or settings"):
        prepared.check_tokenizer(other)  # another file: built, to name the difference


# ---- bad input: one line, exit 1, nothing written -------------------------------------------


_fails = assert_failed_cleanly


def test_a_missing_tokenizer(tmp_path: Path) -> None:
    inputs = _write(tmp_path / "in", {"text": ["a"]}, files=1)
    result = _prepare(inputs, tmp_path / "out", "--tokenizer", str(tmp_path / "nope"),
                      "--text-column", "text")  # fmt: skip
    _fails(result, tmp_path / "out", "--tokenizer", "nope")


def test_messages_without_a_chat_template(tmp_path: Path) -> None:
    plain = build_bpe_tokenizer(tmp_path / "plain", template=None)
    inputs = _write(tmp_path / "in", {"messages": _chats(4)}, files=1)
    result = _prepare(inputs, tmp_path / "out", "--tokenizer", str(plain),
                      "--messages-column", "messages")  # fmt: skip
    _fails(result, tmp_path / "out", "chat template", "--messages-column")


def test_messages_with_a_template_that_does_not_compile(tmp_path: Path) -> None:
    broken = build_bpe_tokenizer(tmp_path / "broken", template="{% for m in messages %}{{ m }")
    inputs = _write(tmp_path / "in", {"messages": _chats(4)}, files=1)
    result = _prepare(inputs, tmp_path / "out", "--tokenizer", str(broken),
                      "--messages-column", "messages")  # fmt: skip
    _fails(result, tmp_path / "out", "--tokenizer", "does not compile", "--messages-column")


@pytest.mark.parametrize(
    ("columns", "option", "fragments"),
    [
        ({"messages": [[{"role": "user"}]]}, "--messages-column", ["messages"]),
        ({"text": [3, 4]}, "--text-column", ["'text'", "int64", "not text"]),
        ({"text": ["fine", None]}, "--text-column", ["part-0.parquet", "row 1", "NULL"]),
        ({"text": ["fine", ""]}, "--text-column", ["part-0.parquet", "row 1"]),
    ],
    ids=["message without content", "non-string text", "NULL text", "zero tokens"],
)
def test_bad_rows(
    tmp_path: Path, tokenizer_dir: Path, columns: dict[str, Any], option: str, fragments: list[str]
) -> None:
    inputs = _write(tmp_path / "in", columns, files=1)
    column = next(iter(columns))
    extra = ["--no-add-special-tokens"] if option == "--text-column" else []
    result = _prepare(inputs, tmp_path / "out", "--tokenizer", str(tokenizer_dir), option,
                      column, *extra)  # fmt: skip
    _fails(result, tmp_path / "out", *fragments)


def test_a_null_or_repeated_id(tmp_path: Path, tokenizer_dir: Path) -> None:
    base = ["--tokenizer", str(tokenizer_dir), "--text-column", "text", "--id-column", "doc"]
    inputs = _write(tmp_path / "null", {"text": ["a", "b", "c"], "doc": [1, None, 3]}, files=1)
    _fails(
        _prepare(inputs, tmp_path / "out", *base), tmp_path / "out", "row 1", "NULL", "--id-column"
    )
    inputs = _write(tmp_path / "twice", {"text": ["a", "b", "c"], "doc": [1, 2, 1]}, files=1)
    _fails(_prepare(inputs, tmp_path / "out", *base), tmp_path / "out", "the id 1", "--id-column")


@pytest.mark.parametrize(
    ("kwargs", "fragment"),
    [
        ({}, "one kind of row"),
        ({"text_column": "t", "messages_column": "m"}, "one kind of row"),
        ({"prompt_column": "p"}, "without completion_column"),
        ({"text_column": "t", "train_on": "most"}, "train_on"),
    ],
)
def test_tokenize_options_are_checked(kwargs: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        TokenizeOptions("tok", **kwargs)


def test_tokenizer_options_conflict_with_store_columns(tmp_path: Path) -> None:
    tokenize = TokenizeOptions("tok", text_column="text")
    with pytest.raises(ConfigError, match="tokens_column"):
        PrepareConfig([tmp_path], None, 8, tmp_path / "o", tokenize=tokenize,  # type: ignore[arg-type]
                      tokens_column="ids")  # fmt: skip
    with pytest.raises(ConfigError, match="runs on engine='local' only"):
        PrepareConfig([tmp_path], None, 8, tmp_path / "o", tokenize=tokenize,  # type: ignore[arg-type]
                      engine="dask", workers=1)  # fmt: skip


def test_no_length_column_and_no_tokenizer(tmp_path: Path) -> None:
    inputs = _write(tmp_path / "in", {"n": [1, 2]}, files=1)
    result = _prepare(inputs, tmp_path / "out")
    _fails(result, tmp_path / "out", "--length-column is not set", "--tokenizer")
    result = _prepare(inputs, tmp_path / "out", "--text-column", "n")
    _fails(result, tmp_path / "out", "--text-column", "no --tokenizer")


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    import gzip

    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode("utf-8")))
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_json_lines_give_what_parquet_gives(tmp_path: Path, tokenizer_dir: Path) -> None:
    chats = _chats(90, seed=11)
    parquet = _write(tmp_path / "parquet", {"messages": chats}, files=2)
    jsonl = tmp_path / "jsonl"
    jsonl.mkdir()
    _write_jsonl(jsonl / "part-0.jsonl", [{"messages": c} for c in chats[:45]])
    _write_jsonl(jsonl / "part-1.jsonl.gz", [{"messages": c} for c in chats[45:]])
    base = ["--tokenizer", str(tokenizer_dir), "--messages-column", "messages"]
    for inputs, output in ((parquet, "a"), (jsonl, "b")):
        result = _prepare(inputs, tmp_path / output, *base)
        assert result.exit_code == 0, result.output
    a, b = load_prepared(tmp_path / "a"), load_prepared(tmp_path / "b")
    assert a.counts == b.counts and a.templates == b.templates
    assert _rows(a, "tokens") == _rows(b, "tokens")
    assert _rows(a, "loss_mask") == _rows(b, "loss_mask")
    for name in ("tokens/tokens.npy", "tokens/offsets.npy", "loss_mask/tokens.npy"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_a_bad_json_line_is_named_by_its_line(tmp_path: Path, tokenizer_dir: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    rows = [{"text": "a packing model"}, {"text": None}, {"text": "fine"}]
    path = _write_jsonl(folder / "rows.jsonl", rows)
    path.write_text("\n" + path.read_text())  # a blank first line: line 3 holds row 1
    result = _prepare(folder, tmp_path / "out", "--tokenizer", str(tokenizer_dir),
                      "--text-column", "text")  # fmt: skip
    _fails(result, tmp_path / "out", "rows.jsonl", "line 3", "NULL")
    path.write_text('{"text": "fine"}\n{"text": "broken\n')
    result = _prepare(folder, tmp_path / "out", "--tokenizer", str(tokenizer_dir),
                      "--text-column", "text")  # fmt: skip
    _fails(result, tmp_path / "out", "rows.jsonl", "line 2")


def test_a_repeated_id_under_split(tmp_path: Path, tokenizer_dir: Path) -> None:
    texts = ["packing " * 40, "a model", "the bin"]
    inputs = _write(tmp_path / "in", {"text": texts, "doc": [7, 8, 7]}, files=1)
    result = _prepare(inputs, tmp_path / "out", "--tokenizer", str(tokenizer_dir),
                      "--text-column", "text", "--id-column", "doc", "--over-cap", "split",
                      max_seq_len=16)  # fmt: skip
    _fails(result, tmp_path / "out", "--id-column", "more than once")

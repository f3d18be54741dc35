"""load_tokenizer: what it reads from a tokenizer directory (as transformers 5 reads it), the
manifest record, and the one-line errors naming --tokenizer."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizer_fixtures import MARKED_TEMPLATE, UNMARKED_TEMPLATE, build_bpe_tokenizer

from seqpack_cli.errors import ConfigError
from seqpack_cli.tokenize import encode_messages, encode_text, load_tokenizer


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return build_bpe_tokenizer(tmp_path / "tok")


def _config(folder: Path, **changes: object) -> None:
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def test_record_names_the_file_hash_vocab_special_tokens_and_template(folder: Path) -> None:
    record = load_tokenizer(folder).record()
    assert record["sha256"] == hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()
    assert record["vocab_size"] == 400
    assert record["special_tokens"] == {
        "bos": {"token": "<s>", "id": 1},
        "eos": {"token": "</s>", "id": 2},
        "pad": {"token": "<pad>", "id": 3},
        "unk": {"token": "<unk>", "id": 0},
    }
    assert record["chat_template_sha256"] == hashlib.sha256(MARKED_TEMPLATE.encode()).hexdigest()
    json.dumps(record)  # the manifest is JSON


def test_a_tokenizer_json_file_alone_has_no_template_nor_named_tokens(folder: Path) -> None:
    spec = load_tokenizer(folder / "tokenizer.json")
    record = spec.record()
    assert record["chat_template_sha256"] is None and record["special_tokens"] == {}
    assert spec.path == folder / "tokenizer.json"


def test_chat_template_jinja_wins_over_the_config_as_in_transformers(folder: Path) -> None:
    (folder / "chat_template.jinja").write_text(UNMARKED_TEMPLATE)
    assert load_tokenizer(folder).chat_template == UNMARKED_TEMPLATE


def test_the_list_form_takes_default(folder: Path) -> None:
    _config(
        folder,
        chat_template=[
            {"name": "tool_use", "template": "{{ 'x' }}"},
            {"name": "default", "template": UNMARKED_TEMPLATE},
        ],
    )
    assert load_tokenizer(folder).chat_template == UNMARKED_TEMPLATE
    _config(folder, chat_template=[{"name": "tool_use", "template": "x"}])
    with pytest.raises(ConfigError, match="'default'"):
        load_tokenizer(folder)


def test_special_tokens_written_as_added_token_dicts(folder: Path) -> None:
    _config(folder, bos_token={"content": "<s>", "special": True}, eos_token=None)
    spec = load_tokenizer(folder)
    assert spec.special_tokens["bos_token"] == "<s>" and "eos_token" not in spec.special_tokens


def test_add_bos_token_is_ignored_beside_tokenizer_json_as_in_transformers(folder: Path) -> None:
    # transformers 5 drops add_bos_token/add_eos_token from the config when tokenizer.json
    # exists: the file's post-processor (here <s> ... </s>) decides.
    transformers = pytest.importorskip("transformers")
    _config(folder, add_bos_token=True, add_eos_token=False)
    texts = ["the packing plan", "héllo wörld", "a"]
    encoded = encode_text(load_tokenizer(folder), texts)
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    for index, text in enumerate(texts):
        assert encoded.row(index)[0].tolist() == reference(text)["input_ids"]
        assert encoded.row(index)[0][-1] == 2  # the file's </s> stays


@pytest.mark.parametrize(
    ("setup", "problem"),
    [
        (lambda root: root / "missing", "no such file or directory"),
        (lambda root: root, "holds no tokenizer.json"),
        (lambda root: _write(root / "tokenizer.json", "{not json"), "not readable JSON"),
        (lambda root: _write(root / "tokenizer.json", '{"model": 3}'), "is not a tokenizer"),
    ],
)
def test_bad_paths_are_one_line_naming_the_option_and_path(tmp_path: Path, setup, problem) -> None:
    path = setup(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_tokenizer(path)
    assert problem in str(caught.value) and str(path) in str(caught.value)
    assert caught.value.cli_message().startswith("--tokenizer ")
    assert str(caught.value).startswith("tokenizer ")
    assert "\n" not in str(caught.value)


def test_a_config_that_is_not_json_is_named(folder: Path) -> None:
    (folder / "tokenizer_config.json").write_text("{")
    with pytest.raises(ConfigError, match=r"tokenizer_config\.json is not readable JSON"):
        load_tokenizer(folder)


def test_messages_without_a_template_name_both_options(folder: Path) -> None:
    spec = load_tokenizer(build_bpe_tokenizer(folder.parent / "plain", template=None))
    with pytest.raises(ConfigError) as caught:
        encode_messages(spec, [[{"role": "user", "content": "hi"}]])
    message = caught.value.cli_message()
    assert "--tokenizer" in message and "--messages-column messages" in message
    assert "no chat template" in message


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_importing_the_kernel_loads_neither_tokenizers_nor_jinja2_nor_torch() -> None:
    code = (
        "import sys, seqpack_cli.tokenize; "
        "print(sorted(m for m in ('tokenizers', 'jinja2', 'torch', 'transformers') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_missing_tokenizers_package_names_the_extra(folder: Path) -> None:
    # A fresh process, where `import tokenizers` fails (a None entry in sys.modules).
    code = (
        "import sys; sys.modules['tokenizers'] = None\n"
        "from seqpack_cli.tokenize import load_tokenizer\n"
        "try:\n"
        f"    load_tokenizer({str(folder)!r})\n"
        "except ImportError as error:\n"
        "    print(type(error).__name__, error)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("MissingDependencyError ")
    assert "pip install 'seqpack-cli[tokenize]'" in out.stdout
    assert out.stdout.count("\n") == 1


@pytest.mark.parametrize("tokenizer_class", ["Qwen2Tokenizer", "LlamaTokenizer", "GPT2Tokenizer"])
def test_a_model_tokenizer_class_encodes_as_transformers_rebuilds_it(
    folder: Path, tokenizer_class: str
) -> None:
    # transformers 5 rebuilds these classes' pipelines: with tokenizer.json as written, every
    # one of these rows differed from transformers (200 of 200 chats on this BPE).
    transformers = pytest.importorskip("transformers")
    from tokenizer_fixtures import generate_conversations

    _config(folder, tokenizer_class=tokenizer_class)
    spec = load_tokenizer(folder)
    assert spec.rebuilt and spec.record()["tokenizer_class"] == tokenizer_class
    assert spec.sha256 == hashlib.sha256((folder / "tokenizer.json").read_bytes()).hexdigest()
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    chats = generate_conversations(60, seed=4)
    encoded = encode_messages(spec, chats)
    texts = [chat[-1]["content"] or "x" for chat in chats]
    plain = encode_text(spec, texts)
    for index, chat in enumerate(chats):
        out = reference.apply_chat_template(
            chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        tokens, mask = encoded.row(index)
        assert tokens.tolist() == out["input_ids"]
        assert mask is not None and mask.tolist() == out["assistant_masks"]
        assert plain.row(index)[0].tolist() == reference(texts[index])["input_ids"]


def test_without_transformers_a_model_class_falls_back_to_the_file(folder: Path) -> None:
    _config(folder, tokenizer_class="Qwen2Tokenizer")
    code = (
        "import sys, logging; sys.modules['transformers'] = None; logging.basicConfig()\n"
        "from seqpack_cli.tokenize import load_tokenizer\n"
        f"print(load_tokenizer({str(folder)!r}).rebuilt)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert "Qwen2Tokenizer is rebuilt by transformers 5, which is not installed" in out.stderr


def test_a_file_that_is_not_json_is_named_whatever_the_class(
    folder: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # tokenizer.json is parsed only where an error needs wording: not UTF-8, not JSON under a
    # model's tokenizer_class (named before transformers would only log a warning about it).
    (folder / "tokenizer.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(ConfigError, match=r"tokenizer\.json is not readable JSON \('utf-8'"):
        load_tokenizer(folder)
    _config(folder, tokenizer_class="Qwen2Tokenizer")
    (folder / "tokenizer.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"tokenizer\.json is not readable JSON"):
        load_tokenizer(folder)
    assert not [record for record in caplog.records if record.levelname == "WARNING"]

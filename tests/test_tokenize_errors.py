"""Every bad row is one `TokenizeError` line naming the row (offset by `first_row`), what is wrong
and the fix; bad options are `ConfigError`s naming the option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizer_fixtures import UNMARKED_TEMPLATE, build_bpe_tokenizer

from seqpack_cli.errors import ConfigError, InputError
from seqpack_cli.tokenize import (
    TokenizeError,
    TokenizerSpec,
    encode_messages,
    encode_prompt_completion,
    encode_text,
    load_tokenizer,
)


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> TokenizerSpec:
    return load_tokenizer(build_bpe_tokenizer(tmp_path_factory.mktemp("tok")))


def _with_template(spec: TokenizerSpec, tmp_path: Path, template: str) -> TokenizerSpec:
    folder = build_bpe_tokenizer(tmp_path / "tok", template=None)
    (folder / "chat_template.jinja").write_text(template)
    return load_tokenizer(folder)


GOOD = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]


def _raises(call, *fragments: str) -> TokenizeError:
    with pytest.raises(TokenizeError) as caught:
        call()
    message = str(caught.value)
    assert isinstance(caught.value, InputError)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message
    return caught.value


def test_a_message_without_role_or_content(spec: TokenizerSpec) -> None:
    no_role = [GOOD, [{"content": "hi"}]]
    error = _raises(
        lambda: encode_messages(spec, no_role, first_row=100),
        "row 101",
        "messages[0] has no 'role'",
        "give every message a role and a content",
    )
    assert error.row == 101
    no_content = [[{"role": "user"}]]
    _raises(lambda: encode_messages(spec, no_content), "row 0", "messages[0] has no 'content'")
    null_role = [[{"role": None, "content": "hi"}]]  # a struct column's missing field
    _raises(lambda: encode_messages(spec, null_role), "has no 'role'")


def test_non_string_content_and_role(spec: TokenizerSpec) -> None:
    parts = [[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]]
    _raises(
        lambda: encode_messages(spec, parts, column="chat"),
        "chat[0].content is a list, not a string",
        "flatten it to text",
    )
    _raises(lambda: encode_messages(spec, [[{"role": 3, "content": "x"}]]), "role is 3")


def test_a_null_or_empty_messages_row(spec: TokenizerSpec) -> None:
    _raises(lambda: encode_messages(spec, [GOOD, None]), "row 1", "holds NULL")
    _raises(lambda: encode_messages(spec, [[]]), "row 0", "not a non-empty list of messages")
    _raises(lambda: encode_messages(spec, ["text"]), "row 0")


def test_null_and_non_string_text(spec: TokenizerSpec) -> None:
    _raises(
        lambda: encode_text(spec, ["a", None], column="body", first_row=7),
        "row 8",
        "column 'body' holds NULL, not a string",
        "drop or fill the row",
    )
    _raises(lambda: encode_text(spec, [b"bytes"]), "holds a bytes", "not a string")
    _raises(lambda: encode_text(spec, [12]), "holds a int (12)")


def test_zero_tokens(spec: TokenizerSpec, tmp_path: Path) -> None:
    _raises(
        lambda: encode_text(spec, ["ok", ""], add_special_tokens=False),
        "row 1",
        "gives zero tokens",
        "drop the row or fill it",
    )
    bare = _with_template(spec, tmp_path, "{% for m in messages %}{{ m['content'] }}{% endfor %}")
    _raises(
        lambda: encode_messages(bare, [[{"role": "user", "content": ""}]]),
        "row 0",
        "the rendered chat gives zero tokens",
    )
    _raises(
        lambda: encode_prompt_completion(spec, ["q", "q"], ["a", ""], completion_column="answer"),
        "row 1",
        "column 'answer' gives zero tokens",
    )
    _raises(lambda: encode_prompt_completion(spec, [None], ["a"]), "column 'prompt' holds NULL")


def test_a_template_that_raises(spec: TokenizerSpec, tmp_path: Path) -> None:
    strict = _with_template(
        spec,
        tmp_path,
        "{% for m in messages %}{% if m['role'] == 'tool' %}"
        "{{ raise_exception('no tools here') }}{% endif %}{{ m['content'] }}{% endfor %}",
    )
    rows = [GOOD, [{"role": "tool", "content": "x"}]]
    _raises(
        lambda: encode_messages(strict, rows), "row 1", "the chat template failed: no tools here"
    )


def test_a_template_error_of_several_lines_is_quoted_by_its_first(
    spec: TokenizerSpec, tmp_path: Path
) -> None:
    # The exception's whole text used to be pasted in: a two-line message from the CLI.
    strict = _with_template(spec, tmp_path, "{{ raise_exception('no tools here\\nsee the docs') }}")
    error = _raises(lambda: encode_messages(strict, [GOOD]), "failed: no tools here; fix the row")
    assert "see the docs" not in str(error)


def test_a_template_that_does_not_compile_is_one_config_line(
    spec: TokenizerSpec, tmp_path: Path
) -> None:
    # It used to escape as jinja2's TemplateSyntaxError (a traceback from `seqpack prepare`).
    broken = _with_template(spec, tmp_path, "{% for m in messages %}\n{{ m['content'] }")
    with pytest.raises(ConfigError) as caught:
        encode_messages(broken, [GOOD], column="chat")
    message = caught.value.cli_message()
    assert "\n" not in message
    for fragment in ("--tokenizer", "does not compile", "line 2", "--messages-column chat"):
        assert fragment in message, message


def test_an_unmarked_template_that_is_not_incremental(spec: TokenizerSpec, tmp_path: Path) -> None:
    # The header counts the messages, so the prompt before a turn is no prefix of the chat.
    counting = _with_template(
        spec,
        tmp_path,
        "{{ messages | length }}{% for m in messages %}{{ m['content'] }}{% endfor %}",
    )
    _raises(
        lambda: encode_messages(counting, [GOOD]),
        "row 0",
        "message 1",
        "add {% generation %} markers",
        "or use train_on all",
    )
    # Training on every token needs no split: it works.
    assert len(encode_messages(counting, [GOOD], train_on="all")) == 1


def test_bad_options(spec: TokenizerSpec) -> None:
    with pytest.raises(ConfigError) as caught:
        encode_messages(spec, [GOOD], train_on="user")  # type: ignore[arg-type]
    assert caught.value.cli_message().startswith("--train-on 'user'")
    with pytest.raises(ConfigError, match="workers=0"):
        encode_messages(spec, [GOOD], workers=0)
    with pytest.raises(ConfigError, match="2 prompts but 1 completions"):
        encode_prompt_completion(spec, ["a", "b"], ["c"])


def test_unmarked_template_rows_are_checked_too(spec: TokenizerSpec, tmp_path: Path) -> None:
    unmarked = _with_template(spec, tmp_path, UNMARKED_TEMPLATE)
    _raises(lambda: encode_messages(unmarked, [[{"role": "user"}]]), "has no 'content'")
    assert json.dumps(unmarked.record())

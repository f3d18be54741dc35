"""Hypothesis properties of the encoders on arbitrary unicode rows (byte-level BPE: every string
encodes): the mask is as long as the tokens and only 0/1, the lengths sum to the tokens, every id
is in the vocabulary, a batch is its rows' results back to back, and the same input gives the same
output; and chats still equal transformers' apply_chat_template."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizer_fixtures import build_byte_level_tokenizer

from seqpack_cli.tokenize import (
    Encoded,
    TokenizerSpec,
    encode_messages,
    encode_prompt_completion,
    encode_text,
    load_tokenizer,
)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_byte_level_tokenizer(tmp_path_factory.mktemp("byte_level"))


@pytest.fixture(scope="module")
def spec(folder: Path) -> TokenizerSpec:
    return load_tokenizer(folder)


texts = st.text(max_size=60)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant"]), "content": texts}
    ),
    min_size=1,
    max_size=6,
)


def _check_shape(encoded: Encoded, spec: TokenizerSpec, rows: int) -> None:
    assert len(encoded.lengths) == rows and encoded.lengths.dtype == np.int64
    assert int(encoded.lengths.sum()) == len(encoded.tokens)
    assert (encoded.lengths > 0).all()
    assert int(encoded.tokens.max(initial=0)) < spec.vocab_size
    if encoded.loss_mask is not None:
        assert len(encoded.loss_mask) == len(encoded.tokens)
        assert encoded.loss_mask.dtype == np.uint8 and set(encoded.loss_mask.tolist()) <= {0, 1}


def _same(a: Encoded, b: Encoded) -> bool:
    masks_equal = (a.loss_mask is None and b.loss_mask is None) or (
        a.loss_mask is not None
        and b.loss_mask is not None
        and np.array_equal(a.loss_mask, b.loss_mask)
    )
    return (
        np.array_equal(a.lengths, b.lengths) and np.array_equal(a.tokens, b.tokens) and masks_equal
    )


def _rows_one_by_one(encode, rows) -> list[Encoded]:
    return [encode([row]) for row in rows]


def _back_to_back(parts: list[Encoded]) -> tuple[list[int], list[int] | None]:
    tokens = [t for part in parts for t in part.tokens.tolist()]
    if parts and parts[0].loss_mask is None:
        return tokens, None
    return tokens, [m for part in parts for m in part.loss_mask.tolist()]  # type: ignore[union-attr]


@SETTINGS
@given(rows=st.lists(texts, min_size=1, max_size=8))
def test_text_invariants(spec: TokenizerSpec, rows: list[str]) -> None:
    encoded = encode_text(spec, rows)  # BOS/EOS: never zero tokens
    _check_shape(encoded, spec, len(rows))
    assert _same(encoded, encode_text(spec, rows))
    one_by_one = _rows_one_by_one(lambda batch: encode_text(spec, batch), rows)
    assert _back_to_back(one_by_one) == (encoded.tokens.tolist(), None)


@SETTINGS
@given(
    chats=st.lists(messages, min_size=1, max_size=5), train_on=st.sampled_from(["assistant", "all"])
)
def test_messages_invariants(spec: TokenizerSpec, chats, train_on) -> None:
    encoded = encode_messages(spec, chats, train_on=train_on)
    _check_shape(encoded, spec, len(chats))
    assert _same(encoded, encode_messages(spec, chats, train_on=train_on))
    one_by_one = _rows_one_by_one(lambda b: encode_messages(spec, b, train_on=train_on), chats)
    assert _back_to_back(one_by_one) == (encoded.tokens.tolist(), encoded.loss_mask.tolist())
    # Only assistant turns give targets.
    for index, chat in enumerate(chats):
        mask = encoded.row(index)[1]
        assert mask is not None
        if train_on == "assistant" and not any(m["role"] == "assistant" for m in chat):
            assert not mask.any()


@SETTINGS
@given(pairs=st.lists(st.tuples(texts, texts.filter(lambda t: t != "")), min_size=1, max_size=6))
def test_prompt_completion_invariants(spec: TokenizerSpec, pairs) -> None:
    prompts, completions = [p for p, _ in pairs], [c for _, c in pairs]
    encoded = encode_prompt_completion(spec, prompts, completions)
    _check_shape(encoded, spec, len(pairs))
    assert _same(encoded, encode_prompt_completion(spec, prompts, completions))
    for index in range(len(pairs)):
        mask = encoded.row(index)[1]
        assert mask is not None and mask[0] == 0 and mask[-1] == 1  # BOS out, EOS in
        # The targets are one run: the prompt first, then the completion.
        assert (np.diff(mask.astype(int)) >= 0).all()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(chat=messages)
def test_arbitrary_chats_equal_transformers(folder: Path, spec: TokenizerSpec, chat) -> None:
    transformers = pytest.importorskip("transformers")
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    out = reference.apply_chat_template(
        chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    tokens, mask = encode_messages(spec, [chat]).row(0)
    assert tokens.tolist() == out["input_ids"]
    assert mask is not None and mask.tolist() == out["assistant_masks"]


@SETTINGS
@given(pairs=st.lists(st.tuples(texts, texts.filter(lambda t: t != "")), min_size=1, max_size=6))
def test_prompt_completion_without_special_tokens_drops_only_them(
    spec: TokenizerSpec, pairs
) -> None:
    # add_special_tokens=False used to be ignored (BOS/EOS added all the same).
    prompts, completions = [p for p, _ in pairs], [c for _, c in pairs]
    bare = encode_prompt_completion(spec, prompts, completions, add_special_tokens=False)
    full = encode_prompt_completion(spec, prompts, completions)
    _check_shape(bare, spec, len(pairs))
    for index, (prompt, completion) in enumerate(pairs):
        tokens, mask = bare.row(index)
        with_specials, full_mask = full.row(index)
        expected = spec.tokenizer.encode(prompt + completion, add_special_tokens=False).ids
        assert tokens.tolist() == expected
        assert with_specials.tolist()[1:-1] == expected  # the post-processor's <s> ... </s>
        assert mask is not None and full_mask is not None
        assert mask.tolist() == full_mask.tolist()[1:-1]  # the text's tokens masked alike

"""encode_text against `tokenizer(text)["input_ids"]`, the token dtype, and
encode_prompt_completion's rule: the pair `prompt + completion` tokenized with the tokenizer's
special tokens; BOS (the post-processor's leading tokens) and the prompt's tokens 0; the
completion's tokens and the trailing EOS 1."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from tokenizer_fixtures import (
    UNICODE_SNIPPETS,
    build_bpe_tokenizer,
    build_byte_level_tokenizer,
    generate_conversations,
)

from seqpack_cli.tokenize import encode_prompt_completion, encode_text, load_tokenizer


@pytest.fixture(scope="module", params=["bpe", "byte_level"])
def folder(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    build = build_bpe_tokenizer if request.param == "bpe" else build_byte_level_tokenizer
    return build(tmp_path_factory.mktemp(request.param))


def _texts(n: int, seed: int) -> list[str]:
    chats = generate_conversations(n, seed=seed)
    return [message["content"] or "x" for chat in chats for message in chat][:n]


def test_text_equals_transformers_with_and_without_special_tokens(folder: Path) -> None:
    transformers = pytest.importorskip("transformers")
    reference = transformers.AutoTokenizer.from_pretrained(folder)
    texts = _texts(500, seed=1) + UNICODE_SNIPPETS
    spec = load_tokenizer(folder)
    with_special = encode_text(spec, texts)
    without = encode_text(spec, pa.array(texts), add_special_tokens=False)
    for index, text in enumerate(texts):
        assert with_special.row(index)[0].tolist() == reference(text)["input_ids"]
        plain = reference(text, add_special_tokens=False)["input_ids"]
        assert without.row(index)[0].tolist() == plain
    # The post-processor's BOS and EOS, on every row, and only with special tokens.
    assert (with_special.lengths == without.lengths + 2).all()
    assert with_special.loss_mask is None and with_special.tokens.dtype == np.uint16


def test_a_vocabulary_over_65536_ids_is_stored_as_uint32(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {f"w{k}": k for k in range(70_000)} | {"<unk>": 70_000}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    spec = load_tokenizer(tmp_path / "tokenizer.json")
    encoded = encode_text(spec, ["w1 w69999 w65536", "w65535 nope"])
    assert spec.vocab_size == 70_001 and encoded.tokens.dtype == np.uint32
    assert encoded.tokens.tolist() == [1, 69_999, 65_536, 65_535, 70_000]
    assert encoded.lengths.tolist() == [3, 2]


def _pairs(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    texts = _texts(2 * n, seed)
    prompts = [text + rng.choice(["", " ", "\n", ": "]) for text in texts[:n]]
    return prompts, texts[n:]


def test_prompt_completion_follows_the_written_rule(folder: Path) -> None:
    spec = load_tokenizer(folder)
    tokenizer = spec.tokenizer
    bos, eos = tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>")
    prompts, completions = _pairs(400, seed=2)
    encoded = encode_prompt_completion(spec, prompts, completions)
    assert encoded.loss_mask is not None
    prefix_rows = 0
    for index, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        tokens, mask = encoded.row(index)
        assert mask is not None
        pair = tokenizer.encode(prompt + completion)  # with the post-processor's BOS/EOS
        assert tokens.tolist() == pair.ids
        assert tokens[0] == bos and mask[0] == 0  # BOS first, not a target
        assert tokens[-1] == eos and mask[-1] == 1  # EOS last, a target
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False).ids
        if pair.ids[1 : 1 + len(prompt_ids)] == prompt_ids:
            # The prompt tokenized alone starts the pair: exactly those tokens are 0.
            prefix_rows += 1
            expected = [0] * (1 + len(prompt_ids)) + [1] * (len(pair.ids) - 1 - len(prompt_ids))
            assert mask.tolist() == expected
        else:
            # A token merged across the boundary belongs to the completion.
            boundary = [
                k for k, (start, end) in enumerate(pair.offsets) if start < len(prompt) < end
            ]
            assert boundary and all(mask[k] == 1 for k in boundary)
    assert 100 < prefix_rows < 400  # both cases occur


def test_a_token_across_the_boundary_is_the_completions(folder: Path) -> None:
    spec = load_tokenizer(folder)
    # "pack" + "ing" is one word: its tokens reaching past "pack" are completion tokens.
    encoded = encode_prompt_completion(spec, ["pack"], ["ing the data"])
    _, mask = encoded.row(0)
    assert mask is not None
    offsets = spec.tokenizer.encode("packing the data").offsets
    for k, (_start, end) in enumerate(offsets[1:-1], start=1):
        assert mask[k] == (end > len("pack"))

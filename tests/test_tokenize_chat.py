"""encode_messages against transformers: token for token and mask bit for mask bit equal to
`AutoTokenizer.from_pretrained(dir).apply_chat_template(messages, tokenize=True,
return_dict=True, return_assistant_tokens_mask=True)` on generated chats (system prompts or the
template's default one, empty turns, unicode, multi-turn, two assistant turns in a row), for a
Metaspace BPE and a byte-level BPE; and the prompt/answer split of a template without markers
against transformers' mask of the same template with markers around exactly that text."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from tokenizer_fixtures import (
    MARKED_TEMPLATE,
    UNMARKED_TEMPLATE,
    build_bpe_tokenizer,
    build_byte_level_tokenizer,
    generate_conversations,
)

from seqpack_cli.tokenize import TokenizeError, encode_messages, load_tokenizer, worker_pool

transformers = pytest.importorskip("transformers")

BUILDERS = {"bpe": build_bpe_tokenizer, "byte_level": build_byte_level_tokenizer}


@pytest.fixture(scope="module")
def tokenizer_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Path]:
    root = tmp_path_factory.mktemp("tokenizers")
    return {
        (kind, marks): build(root / f"{kind}_{marks}", template=template)
        for kind, build in BUILDERS.items()
        for marks, template in (("marked", MARKED_TEMPLATE), ("unmarked", UNMARKED_TEMPLATE))
    }


def _hf(folder: Path, chat: list[dict[str, str | None]]) -> tuple[list[int], list[int]]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    out = tokenizer.apply_chat_template(
        chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    return list(out["input_ids"]), list(out["assistant_masks"])


def _hf_all(folder: Path, chats: list) -> list[tuple[list[int], list[int]]]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    results = []
    for chat in chats:
        out = tokenizer.apply_chat_template(
            chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        results.append((list(out["input_ids"]), list(out["assistant_masks"])))
    return results


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_equal_to_transformers_on_1000_chats(tokenizer_dirs, kind: str) -> None:
    chats = generate_conversations(1000, seed=11)
    # The cases the comparison must cover are all there.
    contents = [m["content"] for chat in chats for m in chat]
    assert "" in contents and any(not c.isascii() for c in contents if c)
    assert sum(chat[0]["role"] == "system" for chat in chats) > 300
    assert sum(len(chat) > 4 for chat in chats) > 300
    assert any(
        a["role"] == b["role"] == "assistant" for chat in chats for a, b in itertools.pairwise(chat)
    )
    folder = tokenizer_dirs[kind, "marked"]
    encoded = encode_messages(load_tokenizer(folder), chats)
    expected = _hf_all(folder, chats)
    assert len(encoded) == 1000
    masked = 0
    for index, (ids, mask) in enumerate(expected):
        tokens, loss_mask = encoded.row(index)
        assert tokens.tolist() == ids, f"chat {index}"
        assert loss_mask is not None and loss_mask.tolist() == mask, f"chat {index}"
        masked += sum(mask)
    # The comparison means something: every chat has targets and non-targets.
    assert 0 < masked < len(encoded.tokens)
    assert encoded.tokens.dtype == np.uint16 and encoded.loss_mask is not None
    assert encoded.loss_mask.dtype == np.uint8


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_unmarked_template_split_equals_the_marked_mask(tokenizer_dirs, kind: str) -> None:
    # The marked template wraps exactly "content<|im_end|>\n" of each assistant turn, which is
    # what the split keeps (between the prompt ending in "<|im_start|>assistant\n" and the
    # rendering with the turn): same tokens as transformers renders the unmarked template,
    # same mask as transformers computes from the marked one.
    chats = generate_conversations(300, seed=12)
    encoded = encode_messages(load_tokenizer(tokenizer_dirs[kind, "unmarked"]), chats)
    unmarked = _hf_all(tokenizer_dirs[kind, "unmarked"], chats)
    marked = _hf_all(tokenizer_dirs[kind, "marked"], chats)
    for index in range(len(chats)):
        tokens, loss_mask = encoded.row(index)
        assert tokens.tolist() == unmarked[index][0] == marked[index][0]
        assert loss_mask is not None and loss_mask.tolist() == marked[index][1]


def test_the_split_keeps_content_and_end_of_turn_not_the_header(tokenizer_dirs) -> None:
    # One turn worked through: the header "<|im_start|>assistant\n" is prompt (0); the content,
    # "<|im_end|>" and the newline after it are the answer (1).
    spec = load_tokenizer(tokenizer_dirs["byte_level", "unmarked"])
    chat = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "the plan"}]
    encoded = encode_messages(spec, [chat])
    tokenizer = spec.tokenizer
    kept = [t for t, m in zip(encoded.tokens, encoded.loss_mask, strict=True) if m]
    assert tokenizer.decode(kept, skip_special_tokens=False) == "the plan<|im_end|>\n"


def test_train_on_all_keeps_every_token(tokenizer_dirs) -> None:
    spec = load_tokenizer(tokenizer_dirs["bpe", "marked"])
    chats = generate_conversations(50, seed=13)
    everything = encode_messages(spec, chats, train_on="all")
    assistant = encode_messages(spec, chats)
    assert everything.loss_mask is not None and everything.loss_mask.all()
    assert np.array_equal(everything.tokens, assistant.tokens)


def test_pyarrow_rows_and_a_null_content(tokenizer_dirs) -> None:
    # A list<struct> column as DuckDB/pyarrow reads it; a NULL content is the empty string
    # (compared with transformers given "" for it).
    folder = tokenizer_dirs["byte_level", "marked"]
    chats = generate_conversations(20, seed=14)
    chats[3][-1]["content"] = None
    column = pa.array(chats)
    encoded = encode_messages(load_tokenizer(folder), column)
    chats[3][-1]["content"] = ""
    for index, chat in enumerate(chats):
        ids, mask = _hf(folder, chat)
        tokens, loss_mask = encoded.row(index)
        assert tokens.tolist() == ids and loss_mask is not None and loss_mask.tolist() == mask


@pytest.mark.slow
def test_two_workers_give_the_same_result_and_errors(tokenizer_dirs, tmp_path: Path) -> None:
    spec = load_tokenizer(tokenizer_dirs["bpe", "marked"])
    chats = generate_conversations(200, seed=15)
    one = encode_messages(spec, chats)
    with ThreadPoolExecutor(2) as threads, worker_pool(2) as processes:
        for executor in (threads, processes):
            two = encode_messages(spec, chats, workers=2, executor=executor)
            assert np.array_equal(one.lengths, two.lengths)
            assert np.array_equal(one.tokens, two.tokens)
            assert one.loss_mask is not None and two.loss_mask is not None
            assert np.array_equal(one.loss_mask, two.loss_mask)
        # A row that fails inside a worker process comes back as the same one-line error.
        folder = build_bpe_tokenizer(tmp_path / "strict", template=None)
        (folder / "chat_template.jinja").write_text(
            "{% for m in messages %}{% if m['role'] == 'tool' %}"
            "{{ raise_exception('no tools') }}{% endif %}{{ m['content'] }}{% endfor %}"
        )
        rows = [*chats[:5], [{"role": "tool", "content": "x"}]]
        with pytest.raises(TokenizeError, match=r"^row 15: the chat template failed: no tools"):
            encode_messages(
                load_tokenizer(folder), rows, workers=2, executor=processes, first_row=10
            )


def test_extra_keys_and_reasoning_reach_the_template_as_in_transformers(tmp_path: Path) -> None:
    # A template reading `thinking` (given as `reasoning`) and a `name` key; NULL keys dropped.
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}"
        "{% if m.name is defined %}({{ m.name }}){% endif %}\n"
        "{% if m.thinking is defined %}<think>{{ m.thinking }}</think>{% endif %}"
        "{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}\n{% endfor %}"
    )
    folder = build_byte_level_tokenizer(tmp_path / "tok", template=template)
    chat = [
        {"role": "user", "content": "hi", "name": "ada", "reasoning": None},
        {"role": "assistant", "content": "yes", "name": None, "reasoning": "because"},
    ]
    encoded = encode_messages(load_tokenizer(folder), [chat])
    ids, mask = _hf(folder, chat)
    tokens, loss_mask = encoded.row(0)
    assert tokens.tolist() == ids and loss_mask is not None and loss_mask.tolist() == mask
    text = load_tokenizer(folder).tokenizer.decode(ids, skip_special_tokens=False)
    assert "(ada)" in text and "<think>because</think>" in text

"""Tokenizers the tokenization tests build for themselves (nothing is downloaded), and the
generated rows they encode.

- `build_bpe_tokenizer(dir, template=...)`: a small BPE trained with the `tokenizers` library on
  generated English-like text, Metaspace pre-tokenizer, `<unk>` for unseen characters, and a
  post-processor that adds `<s>` ... `</s>` (the text case's BOS/EOS); `tokenizer_config.json`
  carries the special tokens and a ChatML-like chat template (with `{% generation %}` markers,
  without them, or none).
- `build_byte_level_tokenizer(dir)`: a byte-level BPE (every string encodes, no `<unk>`), trained on
  text with emoji, CJK, combining marks and right-to-left scripts, with the marked template.
- `generate_conversations(n, seed)`: chats with system prompts (or none), empty turns, unicode,
  multi-turn and consecutive assistant turns.

The two templates differ only by the markers, and the markers cover exactly what the documented
prompt/answer split keeps (an assistant turn's content, `<|im_end|>` and the newline after it), so
the unmarked template's masks can be checked against transformers' masks from the marked one.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<|im_start|>", "<|im_end|>"]

# ChatML with a default system prompt. trim_blocks/lstrip_blocks (as transformers renders) drop
# the newline after each block tag, so the newlines written as "\n" inside expressions are the
# only ones rendered.
_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "{{ '<|im_start|>assistant\\n' }}"
    "{% generation %}{{ message['content'] + '<|im_end|>\\n' }}{% endgeneration %}"
    "{% else %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MARKED_TEMPLATE = _CHAT_TEMPLATE
UNMARKED_TEMPLATE = _CHAT_TEMPLATE.replace("{% generation %}", "").replace(
    "{% endgeneration %}", ""
)

_TEXT = (
    "the a packing sequence token model train data batch length loss mask chat user assistant "
    "system prompt answer question why how when where is are was were be been bin pool epoch "
    "seed shard rank world size tensor attention window step cursor plan value error fix file "
    "column option read write store index order group hash version format json parquet"
)
_WORDS = _TEXT.split(" ")
UNICODE_SNIPPETS = [
    "héllo wörld",
    "naïve café",
    "e\u0301te\u0301",  # combining acute accents
    "日本語のテキスト",
    "中文字符测试",
    "한국어 문장",
    "مرحبا بالعالم",  # Arabic, right to left
    "שלום עולם",  # Hebrew, right to left
    "emoji 😀🎉👩\u200d💻",  # with a zero-width joiner sequence
    "🇫🇷 flags 🏳️\u200d🌈",
    "tab\tand\nnewline",
    "  leading and trailing spaces  ",
]


def _sentence(rng: random.Random, unicode: bool) -> str:
    words = [rng.choice(_WORDS) for _ in range(rng.randint(1, 14))]
    if unicode and rng.random() < 0.3:
        words.insert(rng.randrange(len(words) + 1), rng.choice(UNICODE_SNIPPETS))
    text = " ".join(words)
    return text.capitalize() + rng.choice([".", "?", "!", ""])


def training_corpus(n: int = 3000, seed: int = 0) -> list[str]:
    """Generated sentences (some with unicode) to train the fixtures' BPE on."""
    rng = random.Random(seed)
    return [_sentence(rng, unicode=True) for _ in range(n)] + UNICODE_SNIPPETS * 20


def _train(
    root: Path, *, byte_level: bool, template: str | None, vocab_size: int
) -> tuple[Path, object]:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    if byte_level:
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        alphabet = pre_tokenizers.ByteLevel.alphabet()
    else:
        tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        alphabet = []
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=alphabet
    )
    tokenizer.train_from_iterator(training_corpus(), trainer=trainer)
    bos, eos = tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>",
        pair="<s> $A </s> $B </s>",
        special_tokens=[("<s>", bos), ("</s>", eos)],
    )
    root.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(root / "tokenizer.json"))
    config: dict[str, object] = {
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
        "model_max_length": 1_000_000,
    }
    if template is not None:
        config["chat_template"] = template
    (root / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    return root, tokenizer


def build_bpe_tokenizer(root: Path, *, template: str | None = MARKED_TEMPLATE) -> Path:
    """A BPE (Metaspace, `<unk>`, BOS/EOS post-processor) with `template` in
    root/tokenizer_config.json (None: no chat template). Returns root."""
    return _train(root, byte_level=False, template=template, vocab_size=400)[0]


def build_byte_level_tokenizer(root: Path, *, template: str | None = MARKED_TEMPLATE) -> Path:
    """A byte-level BPE (every string encodes) with `template`. Returns root."""
    return _train(root, byte_level=True, template=template, vocab_size=600)[0]


def generate_conversations(n: int, seed: int = 0) -> list[list[dict[str, str | None]]]:
    """`n` chats: a system prompt in about half, 1 to 4 exchanges, empty contents,
    unicode, and now and then two assistant turns in a row."""
    rng = random.Random(seed)
    chats = []
    for _ in range(n):
        chat: list[dict[str, str | None]] = []
        if rng.random() < 0.5:
            chat.append({"role": "system", "content": _sentence(rng, unicode=True)})
        for _ in range(rng.randint(1, 4)):
            chat.append({"role": "user", "content": _content(rng)})
            chat.append({"role": "assistant", "content": _content(rng)})
            if rng.random() < 0.15:
                chat.append({"role": "assistant", "content": _content(rng)})
        chats.append(chat)
    return chats


def _content(rng: random.Random) -> str:
    draw = rng.random()
    if draw < 0.08:
        return ""
    if draw < 0.2:
        return rng.choice(UNICODE_SNIPPETS)
    return " ".join(_sentence(rng, unicode=True) for _ in range(rng.randint(1, 3)))

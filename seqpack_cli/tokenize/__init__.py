"""Tokenization: rows of text, chats or prompt/completion pairs in, token ids and loss masks out.

The kernel `seqpack prepare --tokenizer` runs over each batch of rows. Importing it loads neither
`tokenizers` nor `jinja2` (the `seqpack-cli[tokenize]` extra); the first encoder call does.

- `loading`: `load_tokenizer(path) -> TokenizerSpec`, a local Hugging Face tokenizer and its
  manifest record.
- `encode`: `encode_text`, `encode_messages`, `encode_prompt_completion`, one batch each;
  `worker_pool` for `encode_messages(workers=2)`; `chat_template`, the check that a tokenizer
  can render chats.
- `chat`: chat templates rendered as transformers renders them, with the spans to train on.
- `encoded`: `Encoded` (lengths, tokens, loss mask) and the token-to-span mask.
- `rows`: `TokenizeError` and the checks of each kind of row.
- `optional`: the lazy imports of `tokenizers` and `jinja2`.
"""

from seqpack_cli.tokenize.encode import (
    TrainOn,
    chat_template,
    encode_messages,
    encode_prompt_completion,
    encode_text,
    worker_pool,
)
from seqpack_cli.tokenize.encoded import Encoded
from seqpack_cli.tokenize.loading import TokenizerSpec, load_tokenizer
from seqpack_cli.tokenize.rows import TokenizeError

__all__ = [
    "Encoded",
    "TokenizeError",
    "TokenizerSpec",
    "TrainOn",
    "chat_template",
    "encode_messages",
    "encode_prompt_completion",
    "encode_text",
    "load_tokenizer",
    "worker_pool",
]

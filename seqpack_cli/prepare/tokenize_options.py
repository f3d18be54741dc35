"""`TokenizeOptions`: what `seqpack prepare --tokenizer` tokenizes, and how, validated once.

The inputs hold text; the job tokenizes it while it reads it and stores the tokens (and a loss
mask) as the token store, so a tokenized dataset never has to exist as parquet. One of three
kinds of rows:

- `text_column`: plain text (pretraining): every token is a target, no mask is stored;
- `messages_column`: chat messages (a list of `{role, content}`), the tokenizer's chat template
  applied; the mask keeps the assistant turns (`train_on="assistant"`) or every token (`"all"`:
  no mask is stored);
- `prompt_column` and `completion_column`: the mask keeps the completion (or every token).

In the prepared directory the store's columns are named `input_ids` and `loss_mask` (what the
tokenizer gave), and the manifest's `tokenizer` section records the tokenizer and these options.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from seqpack_cli.errors import ConfigError, option

__all__ = ["MASK_COLUMN", "TOKENS_COLUMN", "TRAIN_ON", "TokenizeOptions"]

TOKENS_COLUMN = "input_ids"
"""The token store's column name for the tokenizer's ids (the manifest's `tokens_column`)."""
MASK_COLUMN = "loss_mask"
"""The token store's column name for the loss mask the tokenizer's rows give."""
TRAIN_ON = ("assistant", "all")
"""`--train-on`: the assistant turns (the completion) only, or every token."""


def _column(value: object, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{option(name)} is {value!r}; expected a column name")
    return value


@dataclass(frozen=True)
class TokenizeOptions:
    """Tokenize the inputs' text inside `prepare` (`PrepareConfig.tokenize`).

    Args:
        tokenizer: a `tokenizer.json` file, or a directory holding a Hugging Face tokenizer
            (`tokenizer.json`, and `tokenizer_config.json` with its `chat_template`)
            (`--tokenizer`); stored as an absolute `Path`. Nothing is downloaded.
        text_column: a string column of plain text (`--text-column`).
        messages_column: a column of chat messages, each a list of `{role, content}` structs
            (`--messages-column`); needs a tokenizer with a chat template.
        prompt_column: with `completion_column`: the prompt's string column
            (`--prompt-column`).
        completion_column: with `prompt_column`: the completion's string column
            (`--completion-column`).
        train_on: "assistant" (default: the loss on the assistant turns or the completion
            only, stored as a loss mask) or "all" (every token; no mask is stored)
            (`--train-on`).
        add_special_tokens: plain text and prompt/completion: add the BOS/EOS tokens the
            tokenizer's post-processor adds (`--add-special-tokens/--no-add-special-tokens`);
            chat templates write their own.

    Raises:
        ConfigError: not exactly one kind of row named, a bad column name or `train_on`.
    """

    tokenizer: Path  # any str or PathLike is taken, stored as an absolute Path
    text_column: str | None = None
    messages_column: str | None = None
    prompt_column: str | None = None
    completion_column: str | None = None
    train_on: Literal["assistant", "all"] = "assistant"
    add_special_tokens: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.tokenizer, (str, os.PathLike)) or not os.fspath(self.tokenizer):
            raise ConfigError(
                f"{option('tokenizer')} is {self.tokenizer!r}; expected the path of a "
                "tokenizer.json or of a directory holding one"
            )
        object.__setattr__(self, "tokenizer", Path(os.path.abspath(self.tokenizer)))
        for name in ("text_column", "messages_column", "prompt_column", "completion_column"):
            _column(getattr(self, name), name)
        pair = [self.prompt_column, self.completion_column]
        if (pair[0] is None) != (pair[1] is None):
            given, missing = (
                ("prompt_column", "completion_column")
                if pair[1] is None
                else ("completion_column", "prompt_column")
            )
            raise ConfigError(
                f"{option(given)} is set without {option(missing)}; pass both (the mask keeps "
                "the completion)"
            )
        kinds = [
            name
            for name, value in (
                ("text_column", self.text_column),
                ("messages_column", self.messages_column),
                ("prompt_column", self.prompt_column),
            )
            if value is not None
        ]
        if len(kinds) != 1:
            given = "none was given" if not kinds else "got " + ", ".join(map(option, kinds))
            raise ConfigError(
                f"{option('tokenizer')} needs one kind of row: {option('text_column')} (plain "
                f"text), {option('messages_column')} (chat messages) or {option('prompt_column')} "
                f"with {option('completion_column')}; {given}"
            )
        if pair[0] is not None and pair[0] == pair[1]:
            raise ConfigError(
                f"{option('prompt_column')} and {option('completion_column')} are both "
                f"{pair[0]!r}; name two different columns"
            )
        if self.train_on not in TRAIN_ON:
            raise ConfigError(
                f"{option('train_on')} is {self.train_on!r}; expected one of {', '.join(TRAIN_ON)}"
            )
        object.__setattr__(self, "add_special_tokens", bool(self.add_special_tokens))

    @property
    def kind(self) -> str:
        """ "text", "messages" or "prompt_completion"."""
        if self.text_column is not None:
            return "text"
        return "messages" if self.messages_column is not None else "prompt_completion"

    @property
    def columns(self) -> list[str]:
        """The input columns read, in the order the encoder takes them."""
        named = [self.text_column, self.messages_column, self.prompt_column, self.completion_column]
        return [name for name in named if name is not None]

    @property
    def source(self) -> str:
        """The tokenized columns as messages name them (the store's `input_ids` is no input
        column), e.g. "--text-column 'text' (tokenized)"."""
        named = [
            f"{option(name)} {value!r}"
            for name, value in (
                ("text_column", self.text_column),
                ("messages_column", self.messages_column),
                ("prompt_column", self.prompt_column),
                ("completion_column", self.completion_column),
            )
            if value is not None
        ]
        return " and ".join(named) + " (tokenized)"

    @property
    def masked(self) -> bool:
        """Whether a loss mask is stored: not for plain text, nor with `train_on="all"`."""
        return self.kind != "text" and self.train_on == "assistant"

    def to_json(self) -> dict[str, object]:
        """The options as the manifest's `tokenizer` section records them (beside the
        tokenizer's own record)."""
        return {
            "kind": self.kind,
            "columns": self.columns,
            "train_on": self.train_on if self.kind != "text" else "all",
            "add_special_tokens": self.add_special_tokens,
        }

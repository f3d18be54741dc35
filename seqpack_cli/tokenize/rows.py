"""The rows an encoder accepts, checked one by one: `TokenizeError` and the row readers.

A batch arrives as a Python list (what pyarrow's `to_pylist()` gives) or as a pyarrow array; each
reader returns plain Python values in row order, or raises `TokenizeError` for the first bad row,
naming the row (its index in the batch, plus the caller's `first_row` offset) and the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from seqpack_cli.errors import InputError

__all__ = ["Message", "TokenizeError", "as_rows", "check_messages", "check_texts"]

Message = dict[str, str]
# The names a message's reasoning comes under, the first the standard one (transformers 5).
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class TokenizeError(InputError):
    """A row cannot be tokenized. `row` is its index (the caller adds the file name)."""

    def __init__(self, row: int, message: str) -> None:
        super().__init__(f"row {row}: {message}")
        self.row = row
        self.problem = message

    def __reduce__(self) -> tuple[type[TokenizeError], tuple[int, str]]:
        # Raised in a worker process, it crosses back pickled: rebuild it from its two parts.
        return type(self), (self.row, self.problem)


def as_rows(batch: Any) -> Sequence[Any]:
    """The batch as a list of Python values (a pyarrow Array/ChunkedArray is converted)."""
    to_pylist = getattr(batch, "to_pylist", None)
    return to_pylist() if callable(to_pylist) else batch


def check_texts(batch: Any, *, column: str, first_row: int = 0) -> list[str]:
    """The rows of a text column, each a string.

    Raises:
        TokenizeError: a NULL or a value that is not a string.
    """
    texts = as_rows(batch)
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            found = "NULL" if text is None else f"a {type(text).__name__} ({text!r:.40})"
            raise TokenizeError(
                first_row + index,
                f"column {column!r} holds {found}, not a string; drop or fill the row",
            )
    return list(texts)


def check_messages(batch: Any, *, column: str, first_row: int = 0) -> list[list[Message]]:
    """The rows of a messages column: lists of `{role, content}` with string roles and string
    (or NULL, read as empty) contents; other keys are kept for the template (NULL ones dropped),
    and a reasoning (`reasoning_content`, `thinking` or `reasoning`) is also given as
    `thinking` and `reasoning_content`, as transformers 5 passes it.

    Raises:
        TokenizeError: a NULL row, an empty list, a message that is not a struct, lacks `role`
            or `content`, or has a non-string role or content.
    """
    rows = as_rows(batch)
    checked = []
    for index, messages in enumerate(rows):
        row = first_row + index
        if not isinstance(messages, list) or not messages:
            found = "NULL" if messages is None else f"{messages!r:.40}"
            raise TokenizeError(
                row,
                f"column {column!r} holds {found}, not a non-empty list of messages; fix the row",
            )
        conversation = []
        for turn, message in enumerate(messages):
            if not isinstance(message, dict):
                raise TokenizeError(
                    row, f"{column}[{turn}] is {message!r:.40}, not a {{role, content}} struct"
                )
            for key in ("role", "content"):
                # A struct column gives every field: a NULL role is a missing one.
                if key not in message or (key == "role" and message[key] is None):
                    raise TokenizeError(
                        row,
                        f"{column}[{turn}] has no {key!r}; give every message a role and a content",
                    )
            role, content = message["role"], message["content"]
            if not isinstance(role, str):
                raise TokenizeError(row, f"{column}[{turn}].role is {role!r:.40}, not a string")
            if content is not None and not isinstance(content, str):
                raise TokenizeError(
                    row,
                    f"{column}[{turn}].content is a {type(content).__name__}, not a string "
                    "(content parts are not supported); flatten it to text",
                )
            # Keys set to None are dropped, as transformers does, so a template sees them as
            # undefined; a NULL content is the empty string.
            clean = {key: value for key, value in message.items() if value is not None}
            clean["content"] = content or ""
            reasoning = next((clean[key] for key in _REASONING_FIELDS if key in clean), None)
            if reasoning is not None:
                # As transformers does: the reasoning under the names templates read.
                clean = {"thinking": reasoning, **clean, "reasoning_content": reasoning}
            conversation.append(clean)
        checked.append(conversation)
    return checked

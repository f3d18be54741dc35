"""`Prepared.check_tokenizer`: is this the tokenizer `prepare --tokenizer` tokenized with?

A path is compared by its tokenizer.json's sha256 (what the manifest records; the tokenizer is
built only to name a difference); a live tokenizer (`tokenizers.Tokenizer`, or a transformers
tokenizer) by what it can show: the vocabulary size and the ids of the recorded special tokens.
A difference is refused in one line that names it, so training code stops before it feeds ids
from one vocabulary to a model of another.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seqpack_cli.errors import InputError

__all__ = ["check_tokenizer"]


def _vocabulary(tokenizer: Any) -> dict[str, int]:
    """The token -> id map of a live tokenizer, added tokens included."""
    backend = getattr(tokenizer, "backend_tokenizer", None)  # a transformers fast tokenizer
    if backend is not None:
        tokenizer = backend
    try:
        return dict(tokenizer.get_vocab(with_added_tokens=True))
    except TypeError:  # transformers' get_vocab() takes no argument and includes them
        return dict(tokenizer.get_vocab())
    except AttributeError:
        raise InputError(
            f"cannot check {type(tokenizer).__name__} against the recorded tokenizer; pass a "
            "path (a tokenizer.json or a directory holding one), a tokenizers.Tokenizer or a "
            "transformers tokenizer"
        ) from None


def _differences(recorded: Mapping[str, Any], vocabulary: Mapping[str, int]) -> list[str]:
    found = []
    size = max(vocabulary.values(), default=-1) + 1
    if size != recorded.get("vocab_size"):
        found.append(f"vocab_size {size}, recorded {recorded.get('vocab_size')}")
    for name, special in (recorded.get("special_tokens") or {}).items():
        token, expected = special.get("token"), special.get("id")
        if expected is not None and vocabulary.get(token) != expected:
            found.append(
                f"{name} token {token!r} is id {vocabulary.get(token)}, recorded {expected}"
            )
    return found


def check_tokenizer(path: Path, recorded: Mapping[str, Any] | None, tokenizer: Any) -> None:
    """`InputError` unless `tokenizer` is the one recorded for the prepared directory `path`
    (see the module docstring)."""
    if recorded is None:
        raise InputError(
            f"prepared directory {path} was not tokenized by prepare --tokenizer (its manifest "
            "has no tokenizer section): there is no tokenizer to check against"
        )
    if isinstance(tokenizer, (str, os.PathLike)):
        from seqpack_cli.tokenize import load_tokenizer
        from seqpack_cli.tokenize.loading import tokenizer_file

        # The recorded sha256 is the file's: the very file needs no tokenizer built (a model's
        # tokenizer_class would have transformers rebuild it, which takes seconds).
        file = tokenizer_file(os.fspath(tokenizer))
        if hashlib.sha256(file.read_bytes()).hexdigest() == recorded.get("sha256"):
            return
        spec = load_tokenizer(os.fspath(tokenizer))
        found = _differences(recorded, _vocabulary(spec.tokenizer))
        detail = "; ".join(found) if found else "same vocabulary, other merges or settings"
        raise InputError(
            f"tokenizer {spec.path} is not the one {path} was prepared with (sha256 "
            f"{spec.sha256[:12]}..., recorded {str(recorded.get('sha256'))[:12]}...: {detail}); "
            "use the recorded tokenizer, or prepare again with this one"
        )
    found = _differences(recorded, _vocabulary(tokenizer))
    if found:
        raise InputError(
            f"the tokenizer given is not the one {path} was prepared with ({'; '.join(found)}); "
            "use the recorded tokenizer, or prepare again with this one"
        )

"""The optional libraries tokenization needs (`tokenizers`, `jinja2`), imported when first used.

Importing `seqpack_cli.tokenize` costs neither; a missing one is a one-line error naming the
`seqpack-cli[tokenize]` extra that brings it.
"""

from __future__ import annotations

from types import ModuleType

from seqpack_cli.errors import import_optional

__all__ = ["import_jinja2", "import_tokenizers"]


def _require(module: str, purpose: str) -> ModuleType:
    return import_optional(module, purpose, "tokenize")


def import_tokenizers() -> ModuleType:
    """The `tokenizers` module.

    Raises:
        MissingDependencyError: it is not installed.
    """
    return _require("tokenizers", "Tokenizing text")


def import_jinja2() -> ModuleType:
    """The `jinja2` module (chat templates).

    Raises:
        MissingDependencyError: it is not installed.
    """
    return _require("jinja2", "Applying a chat template")

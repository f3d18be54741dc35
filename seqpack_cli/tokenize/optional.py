"""The optional libraries tokenization needs (`tokenizers`, `jinja2`), imported when first used.

Importing `seqpack_cli.tokenize` costs neither; a missing one is a one-line error naming the
`seqpack-cli[tokenize]` extra that brings it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from seqpack_cli.errors import MissingDependencyError

__all__ = ["import_jinja2", "import_tokenizers"]


def _require(module: str, purpose: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingDependencyError(
            f"{purpose} needs the {module!r} package, which is not installed: "
            "pip install 'seqpack-cli[tokenize]'"
        ) from error


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

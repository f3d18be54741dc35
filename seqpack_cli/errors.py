"""The exceptions seqpack raises, and how their messages name options.

Every message says what went wrong, the offending value, what was expected and how to fix it,
naming the file, column or option involved. The CLI turns any `SeqpackError` into one line on
stderr and exit code 1.

An option is named through `option(...)`, so one message reads right in both places: the command
line shows the flag (`--max-seq-len`), Python shows the argument (`max_seq_len`, or the
`python=` spelling such as `overwrite=True`). `str(error)` is the Python form;
`error.cli_message()` the command-line form.
"""

from __future__ import annotations

import re
from types import ModuleType

__all__ = [
    "ConfigError",
    "InputError",
    "MissingDependencyError",
    "PreparedFormatError",
    "SeqpackError",
    "first_line",
    "option",
]

_MARK = "\x1f"  # ASCII unit separator: never in a path, column name or value a message quotes
_OPTION = re.compile(f"{_MARK}([^{_MARK}]*){_MARK}([^{_MARK}]*){_MARK}")


def option(name: str, *, python: str | None = None) -> str:
    """An option named inside an error message: `--kebab-case` on the command line, `name` (or
    `python`, e.g. "overwrite=True") in Python."""
    return f"{_MARK}{name}{_MARK}{python or name}{_MARK}"


def first_line(error: BaseException) -> str:
    """Another exception's text quoted inside a one-line message: its first line, or its type's
    name when it has no text."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class SeqpackError(Exception):
    """Base class of every error seqpack raises on purpose."""

    def __str__(self) -> str:
        return _OPTION.sub(lambda match: match.group(2), super().__str__())

    def cli_message(self) -> str:
        """The message as the command line shows it: options as flags."""
        text = super().__str__()
        return _OPTION.sub(lambda match: "--" + match.group(1).replace("_", "-"), text)


class InputError(SeqpackError, ValueError):
    """The data given to seqpack is unusable (bad lengths, ids, files, columns)."""


class ConfigError(SeqpackError, ValueError):
    """An option or argument has a value seqpack cannot work with."""


class MissingDependencyError(ConfigError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it
    (`pip install 'seqpack-cli[torch]'`). An `ImportError` too, so `except ImportError` around an
    optional import catches it."""


def import_optional(module: str, purpose: str, extra: str) -> ModuleType:
    """`module`, an optional dependency; `MissingDependencyError` naming `purpose` and the extra
    that brings it when it is not installed (`pip install 'seqpack-cli[EXTRA]'`)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise MissingDependencyError(
            f"{purpose} needs the {module.partition('.')[0]!r} package, which is not installed "
            f"({error}); install the {extra} extra: pip install 'seqpack-cli[{extra}]'"
        ) from None


class PreparedFormatError(SeqpackError, ValueError):
    """A `prepared/` directory is missing, incomplete, of an unknown version, or corrupted."""

    problem: str | None = None
    """What is wrong, without the directory and the fix (for callers that word their own)."""

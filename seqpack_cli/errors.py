"""The exceptions seqpack raises.

Every message says what went wrong, the offending value, what was expected and how to fix it,
naming the file, column or option involved. The CLI turns any `SeqpackError` into one line on
stderr and exit code 1.
"""

from __future__ import annotations

__all__ = ["ConfigError", "InputError", "PreparedFormatError", "SeqpackError"]


class SeqpackError(Exception):
    """Base class of every error seqpack raises on purpose."""


class InputError(SeqpackError, ValueError):
    """The data given to seqpack is unusable (bad lengths, ids, files, columns)."""


class ConfigError(SeqpackError, ValueError):
    """An option or argument has a value seqpack cannot work with."""


class PreparedFormatError(SeqpackError, ValueError):
    """A `prepared/` directory is missing, incomplete, of an unknown version, or corrupted."""

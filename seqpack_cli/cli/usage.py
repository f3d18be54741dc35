"""How `seqpack` shows its own usage: help pages and usage errors.

- A flag shows as a flag: typer (0.29) prints a type beside every option in `--help`, so
  `--overwrite <bool>` read as if `--overwrite true` were expected (and `true` became an input).
- The usage line names arguments by their metavar, `INPUT...`, not typer's `{inputs}...`, and
  their help shows no Python type (`<list[str]>`) beside it.
- A usage error (an unknown option, a missing one, a value that does not parse) is one plain
  line on stderr, like seqpack's own errors, with exit code 2, not typer's box.
"""

from __future__ import annotations

import os
from typing import Any

import typer
from typer.core import TyperCommand

__all__ = ["SeqpackCommand", "as_flag", "show_usage_error", "without_type"]

# click's UsageError, from wherever this typer takes click (vendored from 0.29, imported before).
_UsageError: type[Any] = next(
    base for base in typer.BadParameter.__mro__ if base.__name__ == "UsageError"
)


def as_flag(param: Any) -> Any:
    """`param` with no value placeholder in help when it is a flag (an empty metavar)."""
    if param is not None and getattr(param, "is_flag", False) and param.metavar is None:
        param.metavar = ""
    return param


def without_type(param: Any) -> Any:
    """`param` (an argument) with no type beside its metavar in help: typer (0.29) printed
    `INPUT...  <list[str]>`, a Python annotation, where the metavar already says it all."""
    if getattr(param, "param_type_name", None) == "argument" and param.metavar:
        param.display_type_rich = lambda ctx: None
    return param


class SeqpackCommand(TyperCommand):
    """A command whose help shows flags as flags and arguments by their metavar alone."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            without_type(as_flag(param))

    # `ctx` is click's Context, which typer may vendor (typer>=0.29) or import (older): Any.
    def get_help_option(self, ctx: Any) -> Any:
        return as_flag(super().get_help_option(ctx))

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name != "argument":
                continue  # options show as [OPTIONS]
            name = param.metavar or param.name.upper()
            if param.nargs != 1 and not name.endswith("..."):
                name += "..."
            pieces.append(name if param.required else f"[{name}]")
        return pieces


def show_usage_error(error: BaseException) -> bool:
    """Print `error` as one line on stderr if it is a usage error; whether it was.

    The help that no arguments show is left to typer, and so is every usage error under
    `SEQPACK_DEBUG=1` (with its traceback).
    """
    if not isinstance(error, _UsageError) or type(error).__name__ == "NoArgsIsHelpError":
        return False
    if os.environ.get("SEQPACK_DEBUG") == "1":
        return False
    message = " ".join(error.format_message().split()).rstrip(".")
    ctx = getattr(error, "ctx", None)
    where = f"; see '{ctx.command_path} --help'" if ctx is not None else ""
    typer.secho(f"error: {message}{where}", fg="red", err=True)
    return True

"""The `seqpack` command line: a thin skin over the library.

Each command parses its options, makes one library call and renders the result. Every
`SeqpackError` becomes one red line on stderr and exit code 1, here and nowhere else; usage errors
are one line too, with exit code 2 (`usage`); `SEQPACK_DEBUG=1` shows the full traceback
instead. Ctrl-C and SIGTERM end a command with one line and the shell's codes (130, 143); one
that comes after the output was written only adds a note, and the command finishes.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from seqpack_cli import __version__
from seqpack_cli.cli.prepare import prepare
from seqpack_cli.cli.stats import STATS_EPILOG, stats
from seqpack_cli.cli.usage import SeqpackCommand, as_flag, show_usage_error
from seqpack_cli.errors import SeqpackError
from seqpack_cli.interrupts import Interrupts, Terminated

__all__ = ["app"]


class _SeqpackGroup(TyperGroup):
    """Turns library errors into one readable line; works under CliRunner and the console script."""

    _whole_process = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for param in self.params:
            as_flag(param)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # The console script and `python -m` call the command (CliRunner calls `main`): then the
        # process ends with it, and a signal during that end must not change its exit code.
        self._whole_process = True
        return super().__call__(*args, **kwargs)

    # `ctx` is click's Context, which typer may vendor (typer>=0.29) or import (older): Any.
    def get_help_option(self, ctx: Any) -> Any:
        return as_flag(super().get_help_option(ctx))

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        # The group's own options (`seqpack --bogus`) are parsed here, before `invoke`.
        try:
            return super().make_context(*args, **kwargs)
        except Exception as error:
            if not show_usage_error(error):
                raise
            raise typer.Exit(2) from None

    def invoke(self, ctx: Any) -> Any:
        interrupts = Interrupts()
        installed = interrupts.install()
        try:
            return super().invoke(ctx)
        except (KeyboardInterrupt, Terminated, SeqpackError) as error:
            signum = interrupts.raised
            if isinstance(error, SeqpackError) and signum is None:
                if os.environ.get("SEQPACK_DEBUG") == "1":
                    raise
                typer.secho(f"error: {error.cli_message()}", fg="red", err=True)
                ctx.exit(1)
            # A signal (possibly turned into a library error on its way out) that came before
            # anything was written: after that, `interrupts` only records signals.
            if signum is None:
                interrupted = isinstance(error, KeyboardInterrupt)
                signum = signal.SIGINT if interrupted else signal.SIGTERM
            name = "interrupted" if signum == signal.SIGINT else "terminated (SIGTERM)"
            typer.secho(f"{name}; nothing written", fg="red", err=True)
            ctx.exit(128 + signum)
        except Exception as error:
            # A command's options are parsed in here: one line, exit code 2.
            if not show_usage_error(error):
                raise
            ctx.exit(2)
        finally:
            if self._whole_process and installed:
                # The outcome is decided and about to be reported by the exit code.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            else:
                interrupts.restore()
            if interrupts.late is not None:
                late = "Ctrl-C" if interrupts.late == signal.SIGINT else "SIGTERM"
                typer.secho(f"note: {late} came after the output was written", err=True)


app = typer.Typer(
    cls=_SeqpackGroup,
    name="seqpack",
    help="Pack variable-length sequences into fixed-size training contexts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"seqpack {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Pack variable-length sequences into fixed-size training contexts."""
    logging.basicConfig(
        level=os.environ.get("LOGLEVEL", "WARNING").upper(),
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


app.command(cls=SeqpackCommand)(prepare)
app.command(cls=SeqpackCommand, epilog=STATS_EPILOG)(stats)

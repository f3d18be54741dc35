"""The `seqpack` command line: a thin skin over the library.

Each command parses its options, makes one library call and renders the result. Every
`SeqpackError` becomes one red line on stderr and exit code 1, here and nowhere else; usage errors
keep exit code 2; `SEQPACK_DEBUG=1` shows the full traceback instead.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import typer
from typer.core import TyperGroup

from seqpack_cli import __version__
from seqpack_cli.cli_prepare import prepare
from seqpack_cli.cli_stats import STATS_EPILOG, stats
from seqpack_cli.errors import SeqpackError

__all__ = ["app"]


class _SeqpackGroup(TyperGroup):
    """Turns library errors into one readable line; works under CliRunner and the console script."""

    # `ctx` is click's Context, which typer may vendor (typer>=0.29) or import (older): Any.
    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except SeqpackError as error:
            if os.environ.get("SEQPACK_DEBUG") == "1":
                raise
            typer.secho(f"error: {error.cli_message()}", fg="red", err=True)
            ctx.exit(1)


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


app.command()(prepare)
app.command(epilog=STATS_EPILOG)(stats)

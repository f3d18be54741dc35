"""The `seqpack` command's entry point: the console script and `python -m seqpack_cli`.

It imports next to nothing itself, so that a Ctrl-C while the command line is still being
imported and built (typer: the first ~0.1 s) ends like one during the run, in one line with exit
code 130, not in a `KeyboardInterrupt` traceback. Nothing has been written by then.
"""

from __future__ import annotations

import signal
import sys

__all__ = ["main"]

INTERRUPTED = "interrupted; nothing written"
"""What the command says when Ctrl-C comes before it wrote anything (as `seqpack_cli.cli.app`)."""


def main() -> None:
    """Run the `seqpack` command line on `sys.argv`; exits with the command's code."""
    try:
        from seqpack_cli.cli.app import app

        # Typer builds the command from the signatures before any handler of its own runs; a
        # command, once running, handles Ctrl-C itself (and ignores it once it has finished).
        app()
    except KeyboardInterrupt:
        red, reset = ("\x1b[31m", "\x1b[0m") if sys.stderr.isatty() else ("", "")
        sys.stderr.write(f"{red}{INTERRUPTED}{reset}\n")
        raise SystemExit(128 + signal.SIGINT) from None


if __name__ == "__main__":
    main()

"""The `seqpack` command: parses options, makes one library call, renders the result.

- `app`: the Typer app, error and signal handling, logging;
- `options`: option declarations shared by the commands;
- `prepare`, `stats`: one module per command;
- `usage`: how `seqpack` shows its own usage (help pages, usage errors).
"""

from __future__ import annotations

from seqpack_cli.cli.app import app

__all__ = ["app"]

"""`python -m seqpack_cli.prepare --input X --length-column ... --max-seq-len N --output DIR`: the
reference's spelling of `seqpack prepare X --length-column ... --max-seq-len N --output DIR`.

It lives here, not in the job, so that the job never imports the command line (the CLI imports
the job): the layers stay a DAG.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from seqpack_cli.cli.app import app

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m seqpack_cli.prepare`: the reference's `--input FILE` form of `seqpack prepare`."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--input", action="append", nargs="+", default=[])
    known, rest = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    inputs = [path for group in known.input for path in group]
    if "--help" in rest:
        print(
            "Usage: python -m seqpack_cli.prepare --input FILE [--input FILE...] "
            "--length-column NAME --max-seq-len N --output DIR [OPTIONS]\n"
            "The reference's spelling of `seqpack prepare`; every option below applies.\n"
        )
    app(["prepare", *inputs, *rest], prog_name="seqpack")


if __name__ == "__main__":
    main()

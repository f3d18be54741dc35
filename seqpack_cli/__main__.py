"""`python -m seqpack_cli` runs the `seqpack` command line."""

from seqpack_cli.cli.app import app

if __name__ == "__main__":
    app()

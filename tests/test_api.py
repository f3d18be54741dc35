"""The public surface: every exported name resolves, and importing costs nothing heavy."""

from __future__ import annotations

import json
import subprocess
import sys

import seqpack_cli


def test_every_export_resolves() -> None:
    for name in seqpack_cli.__all__:
        assert getattr(seqpack_cli, name) is not None, name


def test_unknown_attribute_is_an_attribute_error() -> None:
    try:
        seqpack_cli.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("expected AttributeError")


def _modules_loaded_after(statement: str) -> set[str]:
    code = f"import sys, json; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def test_runtime_imports_stay_light() -> None:
    # Training code imports the runtime part; it must not drag in the batch-job or CLI stack.
    heavy = {"torch", "duckdb", "polars", "typer", "rich", "pyarrow"}
    for statement in (
        "import seqpack_cli",
        "from seqpack_cli import EpochPlan, materialize_epoch, load_prepared, PackingStats",
        "from seqpack_cli.packing import heap_pack_sequences, pack_length_histogram_batched",
        "import seqpack_cli.masking, seqpack_cli.collate",
    ):
        loaded = _modules_loaded_after(statement)
        assert not heavy & loaded, (statement, sorted(heavy & loaded))

"""The footers of the token store's inputs: read by tasks, checked and gathered here.

`inspect_store_inputs` (a task over consecutive inputs) reads each input's footer for every
role's column, as `token_reading.inspect_token_inputs` does, and where a column has no statistics
its value range from a pass over it (what `choose_dtype` would read); `store_inputs` (the
driver) gathers them in the inputs' order, raises the token column's first fault, and keeps the
other role's for later (the local store reports it only after streaming the tokens).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from seqpack_cli.errors import InputError
from seqpack_cli.prepare.config import PrepareConfig
from seqpack_cli.prepare.engines.dask.fingerprints import Fingerprint
from seqpack_cli.prepare.engines.dask.groups import footer_chunks
from seqpack_cli.prepare.engines.dask.tasks import check_inputs
from seqpack_cli.prepare.token_reading import TokenInput, ValueRule, value_range
from seqpack_cli.prepare.token_reading import inspect_token_input as inspect_one_input
from seqpack_cli.prepare.token_store import STORE_RULES

__all__ = ["inspect_store_inputs", "store_inputs"]


def inspect_store_inputs(
    expected: Sequence[Fingerprint], columns: Mapping[str, str], id_column: str | None
) -> list[dict[str, TokenInput | InputError]]:
    """Each input's footer for each role's column ({role: TokenInput or the InputError the local
    store raises for it}), once the files are checked against the driver's fingerprints
    (`expected`); a column without statistics gets its value range from a pass over it."""
    check_inputs(expected)
    found: list[dict[str, TokenInput | InputError]] = []
    for path in (print_.path for print_ in expected):
        entry: dict[str, TokenInput | InputError] = {}
        for role, column in columns.items():
            rule: ValueRule = STORE_RULES[role]
            try:
                ids = id_column if role == "tokens" else None
                read = inspect_one_input(path, column, ids, rule)
            except InputError as error:
                entry[role] = error
                continue
            if read.value_range is None and role != "loss_mask":
                read = TokenInput(
                    read.path, read.num_bytes, read.num_rows, read.num_values,
                    value_range(read, column),
                )  # fmt: skip
            entry[role] = read
        found.append(entry)
    return found


def store_inputs(
    run: Any,
    num_threads: int,
    config: PrepareConfig,
    expected: Sequence[Fingerprint],
    columns: Mapping[str, str],
) -> tuple[dict[str, list[TokenInput]], dict[str, InputError]]:
    """Every role's footers, and each role's first footer error (the tokens' raised now), read
    from the inputs the driver fingerprinted (`expected`, in the inputs' order)."""
    tuning = config.cluster_tuning
    chunks = footer_chunks(len(expected), num_threads, tuning)
    calls = [
        (inspect_store_inputs, ([expected[i] for i in chunk], columns, config.id_column),
         len(chunk))
        for chunk in chunks
    ]  # fmt: skip
    found = [entry for part in run("store footers", calls) for entry in part]
    inputs: dict[str, list[TokenInput]] = {}
    errors: dict[str, InputError] = {}
    for role in columns:
        read = [entry[role] for entry in found]
        error = next((item for item in read if isinstance(item, InputError)), None)
        if error is not None:
            errors[role] = error
        else:
            inputs[role] = [item for item in read if isinstance(item, TokenInput)]
    if "tokens" in errors:
        raise errors["tokens"]
    return inputs, errors

"""`seqpack prepare`: parse the options, run `prepare_dataset`, render the summary.

The options are checked by `seqpack_cli.prepare.job.PrepareConfig` and the `--json` document is
`seqpack_cli.prepare.job.prepare_summary`; this module only prints it, as JSON or as a table.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from seqpack_cli.cli.options import (
    JsonOption,
    LengthMultipleOption,
    MaxSeqLenOption,
    MaxSeqsPerBinOption,
    MemoryLimitOption,
    Packer,
    PackerOption,
    QuietOption,
    TempDirOption,
    ThreadsOption,
    TokenStoreColumns,
)

__all__ = ["prepare"]


def _check_without_tokenizer(**columns: str | None) -> None:
    """The text options need `--tokenizer`: one line for the first one given."""
    from seqpack_cli.errors import ConfigError, option

    for name, value in columns.items():
        if value is not None:
            raise ConfigError(
                f"{option(name)} is {value!r} but no {option('tokenizer')} is given; pass the "
                f"tokenizer (a tokenizer.json or a directory holding one), or "
                f"{option('length_column')} for a column of lengths"
            )


def _render_prepare(summary: dict[str, Any]) -> None:
    """The `prepare_summary` document as a table on the terminal."""
    from rich.console import Console
    from rich.table import Table

    title = f"{summary['output']}  ({summary['seconds']:.1f} s)"
    table = Table(title=title, show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    inputs = summary["inputs"]
    table.add_row("inputs", f"{inputs['num_files']:,} files, {inputs['num_rows']:,} rows")
    dropped, truncated = summary["num_dropped"], summary.get("num_truncated", 0)
    split, pieces = summary.get("num_split", 0), summary.get("num_pieces", 0)
    over = (
        f" ({dropped:,} over --max-seq-len dropped)"
        if dropped
        else f" ({truncated:,} over --max-seq-len truncated to it)"
        if truncated
        else f" ({split:,} over --max-seq-len split into {pieces:,} pieces)"
        if split
        else ""
    )
    table.add_row("sequences", f"{summary['num_sequences']:,}{over}")
    lost = summary.get("num_tokens_dropped", 0) + summary.get("num_tokens_truncated", 0)
    table.add_row(
        "tokens",
        f"{summary['num_tokens']:,}"
        + (f" ({lost:,} of the inputs' {summary['num_input_tokens']:,} left out)" if lost else ""),
    )
    table.add_row(
        "lengths",
        f"{summary['num_distinct_lengths']:,} distinct, "
        f"{summary['min_length']:,}..{summary['max_length']:,}",
    )
    table.add_row("bins", f"{summary['num_bins']:,} from {summary['num_templates']:,} templates")
    table.add_row(
        "efficiency",
        # Truncated, not rounded: 99.996% is not shown as a perfect 100.00%.
        f"{int(summary['efficiency'] * 10_000) / 100:.2f}% "
        f"(lower bound {summary['lower_bound_bins']:,} bins)",
    )
    multiple = summary["config"].get("length_multiple")
    if multiple:
        padding = summary["num_multiple_padding"]
        capacity = summary["num_bins"] * summary["config"]["max_seq_len"]
        table.add_row(
            "length multiple",
            f"{multiple}: slots cost {padding:,} tokens of padding "
            f"({100 * padding / capacity:.2f}% of the bins' capacity)",
        )
    engine = summary.get("engine", {})
    if engine.get("name") == "dask":
        table.add_row(
            "engine",
            f"dask: {engine['workers']} workers ({engine['threads']} threads), "
            f"{engine['file_groups']} file groups, {engine['tasks']} tasks",
        )
    store = summary.get("token_store")
    if store:
        table.add_row(
            "token store",
            ", ".join(f"{role}/ ({it['column']}, {it['dtype']})" for role, it in store.items()),
        )
    Console().print(table)


def prepare(
    inputs: Annotated[
        list[str],
        typer.Argument(
            metavar="INPUT...",
            help="Parquet or JSON Lines files (.jsonl, .jsonl.gz, .json), globs (quote them: "
            "'data/**/*.parquet') or directories, local or remote (s3://, gs://, https://, "
            "hf://: the remote extra).",
            show_default=False,
        ),
    ],
    max_seq_len: MaxSeqLenOption,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="The prepared directory to create.")
    ],
    length_column: Annotated[
        str | None,
        typer.Option(
            "--length-column",
            help="Column holding each sequence's length in tokens, or its token ids (a list "
            "column such as input_ids: the length is the number of elements). Required unless "
            "--tokenizer gives the lengths.",
            show_default=False,
        ),
    ] = None,
    id_column: Annotated[
        str | None,
        typer.Option(
            "--id-column",
            help="Integer column of unique sequence ids (default: the global row index).",
        ),
    ] = None,
    over_cap: Annotated[
        str | None,
        typer.Option(
            "--over-cap",
            metavar="error|drop|truncate|split",
            help="Sequences longer than --max-seq-len: error (the default) stops the job, drop "
            "leaves them out, truncate keeps their first --max-seq-len tokens, split (with "
            "--tokens-column) cuts them into pieces of --max-seq-len tokens, each a sequence "
            "with a new id (counted in the manifest either way).",
            show_default=False,
        ),
    ] = None,
    filter_over_cap: Annotated[
        bool,
        typer.Option(
            "--filter-over-cap",
            help="Drop sequences longer than --max-seq-len (counted in the manifest) instead "
            "of failing: --over-cap drop.",
        ),
    ] = False,
    packer: PackerOption = Packer.batched,
    max_seqs_per_bin: MaxSeqsPerBinOption = None,
    length_multiple: LengthMultipleOption = None,
    threads: ThreadsOption = None,
    memory_limit: MemoryLimitOption = None,
    temp_dir: TempDirOption = None,
    overwrite: Annotated[
        bool, typer.Option("--overwrite", help="Replace an existing prepared directory.")
    ] = False,
    tokens_column: Annotated[str | None, TokenStoreColumns["tokens_column"]] = None,
    labels_column: Annotated[str | None, TokenStoreColumns["labels_column"]] = None,
    loss_mask_column: Annotated[str | None, TokenStoreColumns["loss_mask_column"]] = None,
    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            metavar="local|dask",
            help="Where the passes run: local (this process) or dask (tasks on a Dask cluster: "
            "--scheduler or --workers; inputs and output on a filesystem every worker sees at "
            "the same path). The output is byte-identical either way.",
        ),
    ] = "local",
    scheduler: Annotated[
        str | None,
        typer.Option(
            "--scheduler",
            help="With --engine dask: the address of a running Dask scheduler (tcp://HOST:PORT).",
            show_default=False,
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            help="With --engine dask: start a local cluster of this many worker processes for "
            "the run.",
            show_default=False,
        ),
    ] = None,
    tokenizer: Annotated[
        Path | None,
        typer.Option(
            "--tokenizer",
            help="Tokenize text while reading it: a tokenizer.json, or a directory holding a "
            "Hugging Face tokenizer (tokenizer.json, tokenizer_config.json with its "
            "chat_template). The token store is its ids (and loss mask); with one of "
            "--text-column, --messages-column, or --prompt-column and --completion-column.",
            show_default=False,
        ),
    ] = None,
    text_column: Annotated[
        str | None,
        typer.Option("--text-column", help="With --tokenizer: a column of plain text."),
    ] = None,
    messages_column: Annotated[
        str | None,
        typer.Option(
            "--messages-column",
            help="With --tokenizer: a column of chat messages (lists of {role, content}), "
            "rendered by the tokenizer's chat template.",
        ),
    ] = None,
    prompt_column: Annotated[
        str | None,
        typer.Option("--prompt-column", help="With --tokenizer and --completion-column."),
    ] = None,
    completion_column: Annotated[
        str | None,
        typer.Option(
            "--completion-column",
            help="With --tokenizer and --prompt-column: the loss is on the completion only.",
        ),
    ] = None,
    train_on: Annotated[
        str,
        typer.Option(
            "--train-on",
            metavar="assistant|all",
            help="With --messages-column or --prompt-column: the loss on the assistant turns "
            "(or the completion) only, stored as a loss mask, or on every token.",
        ),
    ] = "assistant",
    add_special_tokens: Annotated[
        bool,
        typer.Option(
            "--add-special-tokens/--no-add-special-tokens",
            help="With --text-column or --prompt-column: the BOS/EOS tokens the tokenizer adds "
            "(chat templates write their own).",
        ),
    ] = True,
    storage_option: Annotated[
        list[str] | None,
        typer.Option(
            "--storage-option",
            metavar="KEY=VALUE",
            help="For s3://, gs://, https:// and hf:// inputs: an option of their store "
            "(endpoint_url=http://HOST:PORT, region=..., anonymous=true, ...), repeated for "
            "more; credentials come from the usual environment variables and files.",
            show_default=False,
        ),
    ] = None,
    quiet: QuietOption = False,
    json_output: JsonOption = False,
) -> None:
    """Scan parquet or JSON Lines inputs into a prepared/ directory: histogram, templates, pools."""
    from seqpack_cli.prepare.job import PrepareConfig, prepare_dataset, prepare_summary
    from seqpack_cli.prepare.tokenize_options import TokenizeOptions
    from seqpack_cli.progress import rich_progress

    tokenize = None
    if tokenizer is not None:
        tokenize = TokenizeOptions(
            tokenizer,
            text_column=text_column,
            messages_column=messages_column,
            prompt_column=prompt_column,
            completion_column=completion_column,
            train_on=train_on,  # type: ignore[arg-type]  # TokenizeOptions checks it
            add_special_tokens=add_special_tokens,
        )
    else:
        _check_without_tokenizer(
            text_column=text_column,
            messages_column=messages_column,
            prompt_column=prompt_column,
            completion_column=completion_column,
        )
    config = PrepareConfig(
        inputs=inputs,
        length_column=length_column,  # type: ignore[arg-type]  # None: PrepareConfig fills/words it
        max_seq_len=max_seq_len,
        output=output,
        id_column=id_column,
        filter_over_cap=filter_over_cap,
        over_cap=over_cap,
        packer=packer.value,
        max_seqs_per_bin=max_seqs_per_bin,
        length_multiple=length_multiple,
        threads=threads,
        memory_limit=memory_limit,
        temp_dir=temp_dir,
        overwrite=overwrite,
        tokens_column=tokens_column,
        labels_column=labels_column,
        loss_mask_column=loss_mask_column,
        engine=engine,
        scheduler=scheduler,
        workers=workers,
        tokenize=tokenize,
        storage_options=storage_option or None,  # type: ignore[arg-type]  # KEY=VALUE strings
    )
    started = time.perf_counter()
    with rich_progress(enabled=not (quiet or json_output)) as progress:
        prepared = prepare_dataset(config, progress=progress)
    summary = prepare_summary(prepared, seconds=time.perf_counter() - started)
    if json_output:
        typer.echo(json.dumps(summary, indent=2))
    elif not quiet:
        _render_prepare(summary)

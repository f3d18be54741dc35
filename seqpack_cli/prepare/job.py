"""The batch job behind `seqpack prepare`: parquet files -> a `prepared/` directory.

Read the footers (row counts, schema checks), take the length histogram (bad lengths refused
before any heavy work), pack it into templates, stream (length, id) once into the pools, and
write everything atomically. Then `load_prepared` opens it at training time.

"""

from __future__ import annotations

import itertools
import logging
import os
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqpack_cli import __version__
from seqpack_cli.checks import (
    MAX_SEQ_LEN_LIMIT,
    check_int,
    check_max_seq_len,
    check_max_seqs_per_bin,
)
from seqpack_cli.errors import ConfigError, InputError, option
from seqpack_cli.interrupts import signals_held
from seqpack_cli.prepare.pools.tuning import PoolTuning
from seqpack_cli.prepared import (
    COUNTS_NAME,
    FORMAT_NAME,
    FORMAT_VERSION,
    TEMPLATES_NAME,
    PoolMap,
    Prepared,
    PreparedWriter,
    check_output,
    counts_to_json,
    inputs_overview,
    load_prepared,
    recover_siblings,
    templates_to_json,
)
from seqpack_cli.progress import ProgressCallback

__all__ = ["PACKERS", "PrepareConfig", "load_prepared", "prepare_dataset", "prepare_summary"]

logger = logging.getLogger(__name__)

PACKERS = ("batched", "per-item")


def _column_name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{option(field)} is {value!r}; expected a column name")
    return value


@dataclass(frozen=True)
class PrepareConfig:
    """Everything `prepare_dataset` needs; fields are the CLI options in snake case.

    Validated on construction (`ConfigError` naming the option and the fix).
    """

    inputs: Sequence[str | os.PathLike[str]]
    length_column: str
    max_seq_len: int
    output: str | os.PathLike[str]
    id_column: str | None = None
    filter_over_cap: bool = False
    packer: str = "batched"
    max_seqs_per_bin: int | None = None
    threads: int | None = None
    memory_limit: str | None = None
    temp_dir: str | os.PathLike[str] | None = None
    overwrite: bool = False
    tuning: PoolTuning = field(default_factory=PoolTuning)
    """The sizes the pools pass works in (not a CLI option): tests shrink them."""

    def __post_init__(self) -> None:
        with signals_held():  # the first import of DuckDB, which a signal must not cut short
            from seqpack_cli.prepare.scan import check_memory_limit, check_temp_dir

        inputs = self.inputs
        if isinstance(inputs, (str, os.PathLike)):
            inputs = [inputs]
        inputs = tuple(os.fspath(item) for item in inputs)
        if not inputs:
            raise ConfigError("no inputs given; pass parquet files, globs or directories")
        object.__setattr__(self, "inputs", inputs)
        _column_name(self.length_column, "length_column")
        if self.id_column is not None:
            _column_name(self.id_column, "id_column")
        object.__setattr__(self, "max_seq_len", check_max_seq_len(self.max_seq_len))
        object.__setattr__(self, "max_seqs_per_bin", check_max_seqs_per_bin(self.max_seqs_per_bin))
        packer = self.packer.replace("_", "-") if isinstance(self.packer, str) else self.packer
        if packer not in PACKERS:
            raise ConfigError(
                f"{option('packer')} is {self.packer!r}; expected one of {', '.join(PACKERS)}"
            )
        object.__setattr__(self, "packer", packer)
        if self.threads is not None:
            check_int(
                option("threads"),
                self.threads,
                minimum=1,
                expected="an integer >= 1, or leave it unset to use every core",
            )
        if not isinstance(self.tuning, PoolTuning):
            raise ConfigError(f"tuning is {self.tuning!r}; expected a PoolTuning")
        if self.memory_limit is not None:
            object.__setattr__(self, "memory_limit", check_memory_limit(self.memory_limit))
        object.__setattr__(self, "output", Path(os.path.abspath(self.output)))
        if self.temp_dir is not None:
            object.__setattr__(self, "temp_dir", check_temp_dir(self.temp_dir))
        object.__setattr__(self, "filter_over_cap", bool(self.filter_over_cap))
        object.__setattr__(self, "overwrite", bool(self.overwrite))


def _pack(counts: Mapping[int, int], config: PrepareConfig) -> Counter[tuple[int, ...]]:
    from seqpack_cli.packing.histogram import pack_length_histogram, pack_length_histogram_batched

    packer = pack_length_histogram_batched if config.packer == "batched" else pack_length_histogram
    return packer(counts, config.max_seq_len, max_seqs_per_bin=config.max_seqs_per_bin)


def _split_over_cap(
    histogram: Mapping[int, int], config: PrepareConfig
) -> tuple[dict[int, int], int]:
    kept = {length: count for length, count in histogram.items() if length <= config.max_seq_len}
    num_over = sum(histogram.values()) - sum(kept.values())
    if num_over and not config.filter_over_cap:
        longest = max(histogram)
        drop = f"pass {option('filter_over_cap', python='filter_over_cap=True')} to drop them"
        if longest > MAX_SEQ_LEN_LIMIT:  # no max_seq_len is allowed to hold it
            raise InputError(
                f"{num_over} sequences in length column {config.length_column!r} are longer "
                f"than {option('max_seq_len')} {config.max_seq_len}, and the longest has "
                f"{longest}, over seqpack's limit of {MAX_SEQ_LEN_LIMIT} tokens, so no "
                f"{option('max_seq_len')} can hold it; {drop}, or fix the lengths in the data"
            )
        raise InputError(
            f"{num_over} sequences in length column {config.length_column!r} are longer than "
            f"{option('max_seq_len')} {config.max_seq_len} (the longest has {longest}); "
            f"{drop}, or raise {option('max_seq_len')} to {longest}"
        )
    if not kept:
        shortest = min(histogram)
        fix = f"raise {option('max_seq_len')}"
        if shortest > MAX_SEQ_LEN_LIMIT:
            fix = (
                f"even the shortest is over seqpack's limit of {MAX_SEQ_LEN_LIMIT} tokens, so "
                f"no {option('max_seq_len')} can hold it: fix the lengths in the data"
            )
        raise InputError(
            f"all {num_over} sequences are longer than {option('max_seq_len')} "
            f"{config.max_seq_len} (the shortest has {shortest}), so nothing is left to "
            f"pack; {fix}"
        )
    return kept, num_over


def _manifest(
    config: PrepareConfig,
    files: Sequence[Any],
    kept: Mapping[int, int],
    templates: Mapping[tuple[int, ...], int],
    stats: Any,
    num_over: int,
    id_range: tuple[int | None, int | None],
) -> dict[str, Any]:
    stats_dict = stats.to_dict()
    summary = {
        "num_input_rows": sum(file.num_rows for file in files),
        "num_sequences": stats.num_sequences,
        "num_tokens": stats.num_tokens,
        "num_bins": stats.num_bins,
        "efficiency": stats.efficiency,
        "lower_bound_bins": stats.lower_bound_bins,
        "num_distinct_lengths": len(kept),
        "num_templates": len(templates),
        "min_length": min(kept),
        "max_length": max(kept),
        "num_dropped": num_over,
        "dropped": {"over_max_seq_len": num_over},
        "id_min": id_range[0],
        "id_max": id_range[1],
    }
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "seqpack_version": __version__,
        # The reference's manifest keys, kept for code written against it.
        "max_seq_len": config.max_seq_len,
        "n_sequences": stats.num_sequences,
        "n_bins": stats.num_bins,
        "efficiency": stats.efficiency,
        "config": {
            "length_column": config.length_column,
            "id_column": config.id_column,
            "ids": "id_column" if config.id_column else "row_index",
            "max_seq_len": config.max_seq_len,
            "packer": config.packer,
            "max_seqs_per_bin": config.max_seqs_per_bin,
            "filter_over_cap": config.filter_over_cap,
        },
        "inputs": {
            "num_files": len(files),
            "num_rows": summary["num_input_rows"],
            "num_bytes": sum(file.num_bytes for file in files),
            "files": [
                {"path": file.path.as_posix(), "bytes": file.num_bytes, "num_rows": file.num_rows}
                for file in files
            ],
        },
        "summary": summary,
        "stats": stats_dict,
    }


def _literal_part(path: str) -> str:
    """A path, or the folder part of a glob pattern before its first wildcard."""
    if os.path.exists(path):
        return path
    parts = Path(path).parts
    fixed = itertools.takewhile(lambda part: not any(c in part for c in "*?["), parts)
    return os.path.join(".", *fixed)


def _check_outside(output: Path, inputs: Sequence[str | os.PathLike[str]]) -> None:
    """Refuse inputs inside the output directory (real paths compared): replacing the output
    would delete them."""
    inside = os.path.realpath(output)
    for item in inputs:
        real = os.path.realpath(_literal_part(os.fspath(item)))
        if real == inside or real.startswith(inside.rstrip(os.sep) + os.sep):
            raise ConfigError(
                f"input {os.fspath(item)} lies inside the output directory {output}, which "
                f"prepare replaces as a whole; move the inputs out of it, or choose another "
                f"{option('output')}"
            )


def prepare_dataset(config: PrepareConfig, *, progress: ProgressCallback | None = None) -> Prepared:
    """Build the prepared directory `config.output` from parquet inputs; return it, as
    `load_prepared` would.

    Nothing is written unless every check passes: bad inputs raise `InputError`, bad options
    `ConfigError`, and an interrupted job (exception, Ctrl-C, SIGTERM) leaves no output (and
    an `--overwrite` the old one). Inputs inside the output directory are refused.
    Output bytes depend only on the inputs' contents and the packing options, not on `threads`
    or on the order the inputs were named in.
    """
    from seqpack_cli.packing.efficiency import PackingStats
    from seqpack_cli.prepare.pools.engine import scan_pools
    from seqpack_cli.prepare.scan import (
        close_connection,
        connect,
        inspect_inputs,
        length_histogram,
        resolve_inputs,
    )

    started = time.perf_counter()
    output = Path(config.output)
    _check_outside(output, config.inputs)
    paths = resolve_inputs(config.inputs, exclude=[output])
    _check_outside(output, paths)
    recover_siblings(output)  # killed runs' leftovers: an old copy put back, temporaries removed
    check_output(output, overwrite=config.overwrite)
    files = inspect_inputs(paths, config.length_column, config.id_column)
    if not sum(file.num_rows for file in files):
        raise InputError(
            f"the {len(files)} input file(s) hold no rows (e.g. {files[0].path}); point prepare "
            "at the dataset's data files"
        )
    logger.info("%d input files, %d rows", len(files), sum(file.num_rows for file in files))
    # The temporary directory exists from here on, so an unwritable output fails before the
    # heavy work, and any exit (error, Ctrl-C, SIGTERM) removes it.
    with PreparedWriter(output, overwrite=config.overwrite) as writer:
        con = connect(
            threads=config.threads, memory_limit=config.memory_limit, temp_dir=config.temp_dir
        )
        try:
            histogram = length_histogram(con, files, config.length_column, progress=progress)
            logger.info(
                "histogram: %d distinct lengths (%.2fs)",
                len(histogram),
                time.perf_counter() - started,
            )
            kept, num_over = _split_over_cap(histogram, config)
            writer.create_pool_files(kept)
            templates = _pack(kept, config)
            stats = PackingStats.from_templates(
                templates, config.max_seq_len, max_seqs_per_bin=config.max_seqs_per_bin
            )
            logger.info(
                "packed into %d bins, %d templates, efficiency %.4f (%.2fs)",
                stats.num_bins,
                len(templates),
                stats.efficiency,
                time.perf_counter() - started,
            )
            scanned = scan_pools(
                con,
                files,
                config.length_column,
                kept,
                id_column=config.id_column,
                max_seq_len=config.max_seq_len,
                work_dir=writer.work_dir,
                append_pool=writer.append_pool,
                workers=config.threads,
                progress=progress,
                tuning=config.tuning,
            )
        finally:
            close_connection(con)
        logger.info("pools written (%.2fs)", time.perf_counter() - started)
        writer.write_bytes(COUNTS_NAME, counts_to_json(kept))
        writer.write_bytes(TEMPLATES_NAME, templates_to_json(templates))
        id_range = (scanned.id_min, scanned.id_max)
        writer.commit(_manifest(config, files, kept, templates, stats, num_over, id_range))
        # What was written, from memory: reading the output again would race with the next run
        # replacing it.
        counts = {int(length): int(kept[length]) for length in sorted(kept)}
        written: Counter[tuple[int, ...]] = Counter()
        for template, multiplicity in templates.items():
            written[tuple(int(x) for x in template)] += int(multiplicity)
        prepared = Prepared(output, writer.manifest, counts, written, PoolMap(output, counts))
    logger.info("wrote %s in %.2fs", output, time.perf_counter() - started)
    return prepared


def prepare_summary(prepared: Prepared, *, seconds: float) -> dict[str, Any]:
    """The `seqpack prepare --json` document: the directory written, the job's `seconds`, the
    manifest's summary, then its config and inputs (without the per-file list)."""
    manifest = prepared.manifest
    return {
        "output": str(prepared.path),
        "seconds": round(seconds, 3),
        **manifest["summary"],
        "config": manifest["config"],
        "inputs": inputs_overview(manifest),
    }

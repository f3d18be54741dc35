"""The batch job behind `seqpack prepare`: parquet files -> a `prepared/` directory.

Read the footers (row counts, schema checks), take the length histogram (bad lengths refused
before any heavy work), pack it into templates, stream (length, id) once into the pools, and
write everything atomically. Then `load_prepared` opens it at training time.

The passes run in an engine (`engines`: this process, or a Dask cluster), asked the same
things in the same order whichever it is; with a token store (`tokens_column`) the engine
writes it too (the local one in the same read of the token column as the lengths).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqpack_cli import __version__
from seqpack_cli.errors import InputError
from seqpack_cli.prepare.config import PrepareConfig
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
    recover_siblings,
    templates_to_json,
)
from seqpack_cli.prepared.format import TOKEN_STORE_KEY, TOKENIZER_KEY
from seqpack_cli.prepared.multiples import multiple_padding, pack_slots, slot_stats
from seqpack_cli.prepared.slot_pools import SlotPools
from seqpack_cli.progress import ProgressCallback

if TYPE_CHECKING:
    from seqpack_cli.packing.efficiency import PackingStats
    from seqpack_cli.prepare.engines import Engine, StoreSection
    from seqpack_cli.prepare.footers import InputFile
    from seqpack_cli.token_sources import FlatTokenSource

__all__ = ["prepare_dataset", "prepare_summary"]

logger = logging.getLogger(__name__)


def _pack(counts: Mapping[int, int], config: PrepareConfig) -> Counter[tuple[int, ...]]:
    """The packer's templates (of slot lengths under `length_multiple`): the one function
    `Prepared.repack` packs with too, so both give the same templates."""
    return pack_slots(
        counts,
        config.max_seq_len,
        max_seqs_per_bin=config.max_seqs_per_bin,
        packer=config.packer,
        length_multiple=config.length_multiple or 1,
    )


def _apply_over_cap(
    histogram: Mapping[int, int], config: PrepareConfig
) -> tuple[dict[int, int], dict[str, int]]:
    """The lengths to pack under `config.over_cap`, and the summary's counts of it (the rules
    are `OverCap`'s: refused in one message, kept, cut, split or dropped)."""
    over_cap = config.over_cap_rule
    source = None if config.tokenize is None else config.tokenize.source
    over_cap.check(histogram, config.length_column, source=source)
    return over_cap.kept_histogram(histogram), over_cap.summary(histogram)


def _manifest(
    config: PrepareConfig,
    files: Sequence[InputFile],
    kept: Mapping[int, int],
    templates: Mapping[tuple[int, ...], int],
    stats: PackingStats,
    over_cap: Mapping[str, int],
    id_range: tuple[int | None, int | None],
) -> dict[str, Any]:
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
        **over_cap,
        **_multiple_figures(kept, config),
        "dropped": {"over_max_seq_len": over_cap["num_dropped"]},
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
            "over_cap": config.over_cap,
            # Only with a multiple: without one the manifest's bytes stay those of before.
            **({"length_multiple": config.length_multiple} if config.length_multiple else {}),
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
        "stats": stats.to_dict(),
    }


def _tokenizer_section(config: PrepareConfig) -> dict[str, object] | None:
    """With `tokenize`: the manifest's `tokenizer` section, the tokenizer's record (its file's
    sha256, vocabulary size, special tokens, chat template's sha256) and the options it ran
    under; None without."""
    if config.tokenize is None:
        return None
    from seqpack_cli.tokenize import load_tokenizer

    return {**load_tokenizer(config.tokenize.tokenizer).record(), **config.tokenize.to_json()}


def _multiple_figures(kept: Mapping[int, int], config: PrepareConfig) -> dict[str, int]:
    """With a length multiple: the padding it costs (slot tokens minus real tokens)."""
    if not config.length_multiple:
        return {}
    return {"num_multiple_padding": multiple_padding(kept, config.length_multiple)}


def _count_targets(
    writer: PreparedWriter,
    store: StoreSection,
    config: PrepareConfig,
    progress: ProgressCallback | None,
) -> None:
    """Each sequence's number of loss targets beside the store's loss mask or labels
    (`num_targets.npy`), recorded in the files table: one pass over the written store, the
    same whichever engine wrote it."""
    from seqpack_cli.prepare.num_targets import write_num_targets
    from seqpack_cli.target_counts import COUNTED_ROLES
    from seqpack_cli.token_sources import INFO_NAME

    truncated_to = config.over_cap_rule.cut_to
    for role in COUNTED_ROLES:
        if role in store:
            name = write_num_targets(
                writer.tmp_path / role, role, truncated_to=truncated_to, progress=progress
            )
            writer.record_file(f"{role}/{name}")
            writer.record_file(f"{role}/{INFO_NAME}")  # now describing the file


def _name_copies(
    writer: PreparedWriter, store: StoreSection, copies: Mapping[Path, Mapping[str, object]]
) -> None:
    """Each role's token_source.json lists an in-memory table or a remote object as the
    manifest does, not by the path of its copy (rewritten, renamed over, recorded again)."""
    from seqpack_cli.token_sources import INFO_NAME, write_info

    for role in store:
        path = writer.tmp_path / role / INFO_NAME
        info = json.loads(path.read_text("utf-8"))
        for entry in info["inputs"]["files"]:
            entry.update(copies.get(Path(entry["path"]), {}))
        write_info(path.parent, info)
        writer.record_file(f"{role}/{INFO_NAME}")


def _opened(store: StoreSection, root: Path) -> dict[str, FlatTokenSource]:
    """The store's sources in `root` (memory-mapped), as `load_prepared` opens them."""
    from seqpack_cli.token_sources import FlatTokenSource

    return {role: FlatTokenSource.open(root / role) for role in store}


def _plan(
    kept: Mapping[int, int], config: PrepareConfig, started: float
) -> tuple[Counter[tuple[int, ...]], PackingStats]:
    """The templates the kept lengths pack into, and their `PackingStats`."""
    templates = _pack(kept, config)
    # Efficiency on the real tokens, whatever slots the multiple rounds them to.
    stats = slot_stats(
        templates, kept, config.max_seq_len, max_seqs_per_bin=config.max_seqs_per_bin
    )
    logger.info(
        "packed into %d bins, %d templates, efficiency %.4f (%.2fs)",
        stats.num_bins,
        len(templates),
        stats.efficiency,
        time.perf_counter() - started,
    )
    return templates, stats


def prepare_dataset(config: PrepareConfig, *, progress: ProgressCallback | None = None) -> Prepared:
    """Build the prepared directory `config.output` from parquet inputs (`seqpack prepare`).

    Nothing is written unless every check passes, and an interrupted job (exception, Ctrl-C,
    SIGTERM) leaves no output (and, with `overwrite`, the old one). Output bytes depend only on
    the inputs' contents and the packing options, not on `threads`, the engine, or the order
    the inputs were named in.

    Args:
        config: the inputs, columns, packing options, output and engine, validated on
            construction (`PrepareConfig`).
        progress: called as `progress(phase, done, total)` while the passes run (see
            `seqpack_cli.progress`); None reports nothing.

    Returns:
        The directory written, as `load_prepared` would return it (built from what was written,
        without reading it back).

    Raises:
        InputError: bad inputs (a missing column, a bad length or id, a sequence over
            `max_seq_len` under `over_cap="error"`, ...).
        ConfigError: bad options, inputs inside the output directory, or an output it may not
            replace (an existing one without `overwrite`).
    """
    from seqpack_cli.prepare.engines import open_engine
    from seqpack_cli.prepare.inputs import check_outside, resolve_inputs
    from seqpack_cli.prepare.memory_inputs import is_table
    from seqpack_cli.remote.urls import is_remote

    started = time.perf_counter()
    output = Path(config.output)
    tables = [item for item in config.inputs if is_table(item)]
    remote = [item for item in config.inputs if isinstance(item, str) and is_remote(item)]
    paths: list[Path] = []
    if not tables and not remote:
        check_outside(output, config.inputs)
        paths = resolve_inputs(config.inputs, exclude=[output])
        check_outside(output, paths)
    recover_siblings(output)  # killed runs' leftovers: an old copy put back, temporaries removed
    check_output(output, overwrite=config.overwrite)
    tokenizer = _tokenizer_section(config)  # a bad tokenizer stops the job before any read
    # The temporary directory exists from here on, so an unwritable output fails before the
    # heavy work, and any exit (error, Ctrl-C, SIGTERM) removes it. The engine is left first: it
    # stops its work before the directory is removed.
    with (
        PreparedWriter(output, overwrite=config.overwrite) as writer,
        open_engine(config, progress=progress) as engine,
    ):
        copies = _stage(tables, remote, config, writer, engine)
        staged = {path: str(entry["path"]) for path, entry in copies.items()}
        paths = paths or list(copies)
        try:
            prepared = _run(config, engine, writer, paths, copies, tokenizer, started, progress)
        except InputError as error:
            if not staged:
                raise
            from seqpack_cli.prepare.memory_inputs import named

            raise named(error, staged) from None
    logger.info("wrote %s in %.2fs", output, time.perf_counter() - started)
    return prepared


def _stage(
    tables: Sequence[object],
    remote: Sequence[str],
    config: PrepareConfig,
    writer: PreparedWriter,
    engine: Engine,
) -> dict[Path, dict[str, object]]:
    """In-memory tables (`memory_inputs`) or remote objects (`remote_inputs`): what the job
    reads of them written as files into the work directory. Each copy's path and what the
    manifest lists in its place (a table's name; an object's URL, size and version); empty for
    local files."""
    folder = writer.work_dir / "inputs"
    if tables:
        from seqpack_cli.prepare.memory_inputs import stage_tables

        named = stage_tables(tables, config.input_columns, folder)
        return {path: {"path": name} for path, name in named.items()}
    if remote:
        from seqpack_cli.prepare.remote_inputs import plan_copies

        options = dict(config.storage_options or {})
        copies = plan_copies(remote, folder, options)
        engine.fetch(copies, config.input_columns, options)  # the engine reads the objects
        return {copy.path: _remote_entry(copy.identity) for copy in copies}
    return {}


def _remote_entry(identity: Mapping[str, object]) -> dict[str, object]:
    """A remote object's entry in the manifest's files list: its URL as the path, its size,
    its version (ETag, VersionId or blob id)."""
    return {"path": identity["url"], "bytes": identity["bytes"], "version": identity["version"]}


def _run(
    config: PrepareConfig,
    engine: Engine,
    writer: PreparedWriter,
    paths: Sequence[Path],
    copies: Mapping[Path, Mapping[str, object]],
    tokenizer: dict[str, object] | None,
    started: float,
    progress: ProgressCallback | None,
) -> Prepared:
    """The passes in `engine`, the packing and the commit (see `prepare_dataset`)."""
    output = writer.output
    files = engine.inspect(paths)
    if not sum(file.num_rows for file in files):
        raise InputError(
            f"the {len(files)} input file(s) hold no rows (e.g. {files[0].path}); point "
            "prepare at the dataset's data files"
        )
    logger.info("%d input files, %d rows", len(files), sum(file.num_rows for file in files))
    histogram = engine.histogram(files, writer)
    logger.info(
        "histogram: %d distinct lengths (%.2fs)", len(histogram), time.perf_counter() - started
    )
    kept, over_cap = _apply_over_cap(histogram, config)
    templates, stats = _plan(kept, config, started)
    scanned = engine.pools(files, kept, writer)
    logger.info("pools written (%.2fs)", time.perf_counter() - started)
    store = engine.store(writer)
    _count_targets(writer, store, config, progress)
    if copies:
        _name_copies(writer, store, copies)
    writer.write_bytes(COUNTS_NAME, counts_to_json(kept))
    writer.write_bytes(TEMPLATES_NAME, templates_to_json(templates))
    id_range = (scanned.id_min, scanned.id_max)
    manifest = _manifest(config, files, kept, templates, stats, over_cap, id_range)
    if copies:  # a table or a remote object, not its copy
        listed = manifest["inputs"]["files"]
        for entry in listed:
            entry.update(copies.get(Path(entry["path"]), {}))
        manifest["inputs"]["num_bytes"] = sum(int(entry["bytes"]) for entry in listed)
    manifest["engine"] = engine.describe()
    if tokenizer is not None:
        manifest[TOKENIZER_KEY] = tokenizer
    if store:
        manifest[TOKEN_STORE_KEY] = store
    sources = _opened(store, writer.tmp_path)  # mapped now: no race with a later run
    writer.commit(manifest)
    for role, source in sources.items():
        source.path = output / role
    # What was written, from memory: reading the output again would race with the next run
    # replacing it.
    counts = {int(length): int(kept[length]) for length in sorted(kept)}
    written: Counter[tuple[int, ...]] = Counter()
    for template, multiplicity in templates.items():
        written[tuple(int(x) for x in template)] += int(multiplicity)
    pools: Mapping[int, Any] = PoolMap(output, counts)
    if config.length_multiple:  # keyed by slot length, as load_prepared gives them
        pools = SlotPools(pools, counts, config.max_seq_len, config.length_multiple, False)
    return Prepared(
        output,
        writer.manifest,
        counts,
        written,
        pools,
        tokens=sources.get("tokens"),
        labels=sources.get("labels"),
        loss_mask=sources.get("loss_mask"),
    )


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
        **({"engine": manifest["engine"]} if "engine" in manifest else {}),
        **({TOKEN_STORE_KEY: manifest[TOKEN_STORE_KEY]} if TOKEN_STORE_KEY in manifest else {}),
        **({TOKENIZER_KEY: manifest[TOKENIZER_KEY]} if TOKENIZER_KEY in manifest else {}),
    }

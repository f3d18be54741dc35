"""`PrepareConfig`: every option of `seqpack prepare`, validated once, on construction."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from seqpack_cli.checks import check_int, check_max_seq_len, check_max_seqs_per_bin
from seqpack_cli.errors import ConfigError, option
from seqpack_cli.interrupts import signals_held
from seqpack_cli.over_cap import OverCap, check_over_cap, over_cap_option
from seqpack_cli.prepare.engines.dask.tuning import ClusterTuning
from seqpack_cli.prepare.memory_inputs import check_inputs, is_table
from seqpack_cli.prepare.pools.tuning import PoolTuning
from seqpack_cli.prepare.tokenize_options import MASK_COLUMN, TOKENS_COLUMN, TokenizeOptions
from seqpack_cli.prepared.multiples import check_length_multiple

__all__ = ["ENGINES", "PACKERS", "PrepareConfig", "engine_option"]

PACKERS = ("batched", "per-item")
ENGINES = ("local", "dask")
"""Where `prepare_dataset` runs its passes: in this process, or as tasks on a Dask cluster."""


def _over_cap(value: Any, filter_over_cap: bool) -> str:
    """The over-cap policy: `value`, or without one `drop` for `filter_over_cap` (its alias)."""
    if value is None:
        return "drop" if filter_over_cap else "error"
    check_over_cap(value)
    if filter_over_cap and value != "drop":
        raise ConfigError(
            f"{option('filter_over_cap', python='filter_over_cap=True')} is "
            f"{over_cap_option('drop')}, but {option('over_cap')} is {value!r}; "
            "pass only one of them"
        )
    return str(value)


def engine_option(value: str) -> str:
    """`--engine VALUE` / `engine='VALUE'`, inside a message."""
    return option(f"engine {value}", python=f"engine={value!r}")


def _column_name(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{option(field)} is {value!r}; expected a column name")
    return value


@dataclass(frozen=True)
class PrepareConfig:
    """Everything `prepare_dataset` needs; fields are the CLI options in snake case.

    Validated on construction (`ConfigError` naming the option, the value and the fix); some
    fields are normalised on the way (noted below), so read them back from the instance.

    Args:
        inputs: parquet or JSON Lines files, globs or directories (`seqpack prepare
            INPUT...`), or in-memory tables (a pyarrow Table or dataset, a Polars DataFrame or
            LazyFrame, a datasets.Dataset: `memory_inputs`), not both; one path or table is
            taken as a list of one. Stored as a tuple (paths as strings); none is refused.
        length_column: the column holding each sequence's length in tokens, or its token ids (a
            list column: the length is its number of elements) (`--length-column`). With
            `tokenize` the lengths are the token counts: None or "input_ids" (stored).
        max_seq_len: the bin capacity in tokens, an integer in [1, 2**31 - 1]
            (`--max-seq-len`).
        output: the prepared directory to create (`--output`); stored as an absolute `Path`.
        id_column: an integer column of unique, non-null sequence ids (`--id-column`); None:
            an id is the row's global index over the inputs, sorted by path.
        filter_over_cap: True is `over_cap="drop"` (`--filter-over-cap`, its alias); passing
            both with another policy is refused. After construction: whether `over_cap` is
            `drop`.
        packer: the histogram packer, one of `PACKERS` (`--packer`): "batched" (the engine) or
            "per-item" (the reference, for parity); "per_item" is read as "per-item".
        max_seqs_per_bin: at most this many sequences per bin, an integer >= 1
            (`--max-seqs-per-bin`); None: no cap.
        threads: DuckDB threads, an integer >= 1 (`--threads`); None: every core.
        memory_limit: DuckDB's memory limit, a size such as "4GB" or "512MiB" or a share of RAM
            such as "50%", at least 16MiB (`--memory-limit`); None: DuckDB's default.
        temp_dir: where DuckDB spills when over `memory_limit` (`--temp-dir`): a writable
            directory, or a missing one whose parent is (DuckDB creates it); stored absolute.
        overwrite: replace an existing prepared directory at `output` (`--overwrite`).
        tuning: the sizes the pools pass works in, a `PoolTuning` (not a CLI option): tests
            shrink them.
        over_cap: what becomes of sequences longer than `max_seq_len` (`--over-cap`), one of
            `OVER_CAP`: "error" (stop the job), "drop", "truncate" (keep their first
            `max_seq_len` tokens) or "split" (only with `tokens_column`: cut them into pieces,
            each a sequence with a new id). None: "drop" with `filter_over_cap`, else "error".
        tokens_column: a list column of token ids to store in the prepared directory too
            (`tokens/`, `--tokens-column`); None: the directory holds ids only.
        labels_column: with `tokens_column`: per-token labels to store beside them (`labels/`,
            signed, -100 allowed; `--labels-column`).
        loss_mask_column: with `tokens_column`: a per-token 0/1 loss mask to store instead of
            labels (`loss_mask/`, `--loss-mask-column`). The token, label, mask and id columns
            must all differ.
        engine: where the passes run, one of `ENGINES` (`--engine`): "local" (this process) or
            "dask" (tasks on a Dask cluster: exactly one of `scheduler` or `workers`, and Dask
            distributed installed). The output is byte-identical either way.
        scheduler: with engine "dask": the address of a running Dask scheduler (e.g.
            tcp://host:8786; `--scheduler`).
        workers: with engine "dask": start a local cluster of this many worker processes (an
            integer >= 1) for the run (`--workers`).
        cluster_tuning: the sizes the Dask engine cuts its work into, a `ClusterTuning` (not a
            CLI option): tests shrink them.
        length_multiple: pack each sequence into a slot of its length rounded up to this
            multiple (2 * cp for context parallelism; `--length-multiple`); must divide
            `max_seq_len`. None or 1 (stored as None): exact lengths. The pools stay per exact
            length (`seqpack_cli.prepared.multiples`).
        tokenize: tokenize the inputs' text while reading them, a `TokenizeOptions`
            (`--tokenizer`, `--text-column`, ...): the token store is the tokenizer's ids (and
            its loss mask), so `length_column` and the store's columns are not given; after
            construction they read "input_ids" (and `loss_mask_column` "loss_mask" when a mask
            is stored). Local engine only. None: the inputs hold lengths or token ids.
        storage_options: for remote inputs (`s3://`, `gs://`, `https://`, `hf://`), options of
            their store (`--storage-option KEY=VALUE`: `endpoint_url`, `region`, `anonymous`,
            ...), a mapping or KEY=VALUE strings, stored as a dict; credentials otherwise come
            from the usual environment variables and files. Remote inputs only.

    Raises:
        ConfigError: a field breaks its rule above.
    """

    inputs: Sequence[str | os.PathLike[str] | Any]  # Any: an in-memory table
    length_column: str  # None is taken with `tokenize` (see above)
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
    over_cap: str | None = None
    tokens_column: str | None = None
    labels_column: str | None = None
    loss_mask_column: str | None = None
    engine: str = "local"
    scheduler: str | None = None
    workers: int | None = None
    cluster_tuning: ClusterTuning = field(default_factory=ClusterTuning)
    length_multiple: int | None = None
    tokenize: TokenizeOptions | None = None
    storage_options: Mapping[str, str] | None = None  # KEY=VALUE strings are taken too

    def __post_init__(self) -> None:
        with signals_held():  # the first import of DuckDB, which a signal must not cut short
            from seqpack_cli.prepare.db import check_memory_limit, check_temp_dir

        inputs = self.inputs
        if isinstance(inputs, (str, os.PathLike)) or is_table(inputs):
            inputs = [inputs]
        inputs = tuple(inputs)
        check_inputs(inputs)
        inputs = tuple(item if is_table(item) else os.fspath(item) for item in inputs)
        if not inputs:
            raise ConfigError("no inputs given; pass parquet files, globs or directories")
        self._check_remote(inputs)
        object.__setattr__(self, "inputs", inputs)
        self._check_tokenize()
        _column_name(self.length_column, "length_column")
        if self.id_column is not None:
            _column_name(self.id_column, "id_column")
        object.__setattr__(self, "max_seq_len", check_max_seq_len(self.max_seq_len))
        object.__setattr__(self, "max_seqs_per_bin", check_max_seqs_per_bin(self.max_seqs_per_bin))
        multiple = check_length_multiple(self.length_multiple, self.max_seq_len)
        object.__setattr__(self, "length_multiple", None if multiple == 1 else multiple)
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
        over_cap = _over_cap(self.over_cap, bool(self.filter_over_cap))
        object.__setattr__(self, "over_cap", over_cap)
        object.__setattr__(self, "filter_over_cap", over_cap == "drop")
        object.__setattr__(self, "overwrite", bool(self.overwrite))
        self._check_store_columns()
        self._check_engine()

    @property
    def over_cap_rule(self) -> OverCap:
        """`over_cap` at `max_seq_len` as the `OverCap` every pass asks."""
        return OverCap(str(self.over_cap), self.max_seq_len)

    @property
    def input_columns(self) -> dict[str, str]:
        """The input columns the job reads, each once, with the option that names it: the
        length column (or the tokenizer's text columns), the id column and the token store's."""
        if self.tokenize is not None:
            tokenize = self.tokenize
            named = [
                (tokenize.text_column, "text_column"),
                (tokenize.messages_column, "messages_column"),
                (tokenize.prompt_column, "prompt_column"),
                (tokenize.completion_column, "completion_column"),
                (self.id_column, "id_column"),
            ]
        else:
            named = [(self.length_column, "length_column"), (self.id_column, "id_column")]
            named += [(column, f"{role}_column") for role, column in self.store_columns.items()]
        columns: dict[str, str] = {}
        for column, option_name in named:
            if column is not None:
                columns.setdefault(column, option_name)
        return columns

    @property
    def store_columns(self) -> dict[str, str]:
        """The token store's roles and their columns (`tokens`, and `labels` or `loss_mask`
        when given); empty without `tokens_column`."""
        named = {
            "tokens": self.tokens_column,
            "labels": self.labels_column,
            "loss_mask": self.loss_mask_column,
        }
        if self.tokens_column is None:
            return {}
        return {role: column for role, column in named.items() if column is not None}

    def _check_store_columns(self) -> None:
        """The token store's columns: names, each once, labels or a mask only with tokens."""
        named = {
            name: getattr(self, name)
            for name in ("tokens_column", "labels_column", "loss_mask_column")
            if getattr(self, name) is not None
        }
        for name, value in named.items():
            _column_name(value, name)
        if self.labels_column is not None and self.loss_mask_column is not None:
            raise ConfigError(
                f"both {option('labels_column')} and {option('loss_mask_column')} are set; pass "
                "one: labels (with -100 where no loss is taken) or a 0/1 loss mask"
            )
        if named and self.tokens_column is None:
            extra = next(iter(named))
            raise ConfigError(
                f"{option(extra)} is set without {option('tokens_column')}; pass the token "
                f"column too (e.g. {option('tokens_column')} input_ids)"
            )
        if self.over_cap == "split" and self.tokens_column is None:
            raise ConfigError(
                f"{over_cap_option('split')} cuts the tokens of longer sequences into pieces, so "
                f"it needs the token store: pass {option('tokens_column')} (the column of token "
                f"ids, e.g. input_ids), or {over_cap_option('drop')} or "
                f"{over_cap_option('truncate')}"
            )
        values = [*named.values(), *([self.id_column] if self.id_column else [])]
        if len(set(values)) != len(values):
            raise ConfigError(
                f"the columns {option('tokens_column')}, {option('labels_column')}, "
                f"{option('loss_mask_column')} and {option('id_column')} are {values}; each "
                "must name a different column"
            )

    def _check_remote(self, inputs: Sequence[object]) -> None:
        """Remote inputs (URLs) only with other URLs, a local output, storage options as a
        mapping or as KEY=VALUE strings (stored as a dict)."""
        from seqpack_cli.remote.urls import is_remote

        remote = [isinstance(item, str) and is_remote(item) for item in inputs]
        if any(remote) and not all(remote):
            raise ConfigError(
                "inputs mixes remote URLs and local paths or tables; pass one kind (copy the "
                "local files next to the remote ones, or download the remote ones)"
            )
        if is_remote(os.fspath(self.output)):
            raise ConfigError(
                f"{option('output')} is {os.fspath(self.output)!r}; the prepared directory is "
                "written to a local or shared filesystem (training maps its files): pass a "
                "path, and copy the directory to object storage afterwards if you need it there"
            )
        options = self.storage_options
        if options is None:
            options = {}
        elif not isinstance(options, Mapping):
            from seqpack_cli.remote.options import parse_storage_options

            options = parse_storage_options(
                [options] if isinstance(options, str) else list(options)
            )
        elif not all(isinstance(k, str) and isinstance(v, str) for k, v in options.items()):
            raise ConfigError(
                f"{option('storage_option')} values are {dict(options)!r}; expected strings "
                "(KEY=VALUE on the command line)"
            )
        object.__setattr__(self, "storage_options", dict(options))
        if options and not any(remote):
            raise ConfigError(
                f"{option('storage_option')} is set but no input is a remote URL (s3://, gs://, "
                "https://, hf://); leave it out"
            )

    def _check_tokenize(self) -> None:
        """With `tokenize`: the columns it fills (none given), the local engine; without it a
        length column."""
        tokenize = self.tokenize
        if tokenize is None:
            if self.length_column is None:
                raise ConfigError(
                    f"{option('length_column')} is not set; name the column of lengths (or of "
                    f"token ids), or tokenize text with {option('tokenizer')} PATH "
                    f"{option('text_column')} NAME"
                )
            return
        if not isinstance(tokenize, TokenizeOptions):
            raise ConfigError(f"tokenize is {tokenize!r}; expected a TokenizeOptions")
        # What tokenize sets (so that a replaced copy of a config passes again).
        sets = {
            "length_column": TOKENS_COLUMN,
            "tokens_column": TOKENS_COLUMN,
            "labels_column": None,
            "loss_mask_column": MASK_COLUMN if tokenize.masked else None,
        }
        given = [name for name, value in sets.items() if getattr(self, name) not in (None, value)]
        if given:
            raise ConfigError(
                f"{option(given[0])} is {getattr(self, given[0])!r}, but with "
                f"{option('tokenizer')} the tokens, their lengths and the loss mask come from "
                f"the tokenizer; leave {option(given[0])} out"
            )
        if self.engine != "local":
            raise ConfigError(
                f"{option('tokenizer')} runs on {engine_option('local')} only, for now; "
                f"tokenize with {engine_option('local')}, or write token ids to parquet and "
                f"pass {option('tokens_column')} to {engine_option('dask')}"
            )
        object.__setattr__(self, "length_column", TOKENS_COLUMN)
        object.__setattr__(self, "tokens_column", TOKENS_COLUMN)
        if tokenize.masked:
            object.__setattr__(self, "loss_mask_column", MASK_COLUMN)

    def _check_engine(self) -> None:
        """The engine, and a cluster (`scheduler` or `workers`) exactly when it is `dask`."""
        if self.engine not in ENGINES:
            raise ConfigError(
                f"{option('engine')} is {self.engine!r}; expected one of {', '.join(ENGINES)}"
            )
        cluster = [name for name in ("scheduler", "workers") if getattr(self, name) is not None]
        if self.engine == "local":
            if cluster:
                raise ConfigError(
                    f"{option(cluster[0])} is set, which only {engine_option('dask')} uses; pass "
                    f"{engine_option('dask')} too, or leave {option(cluster[0])} out"
                )
            return
        if len(cluster) != 1:
            given = "neither was given" if not cluster else "both were given"
            raise ConfigError(
                f"{engine_option('dask')} needs one of {option('scheduler')} (the address of a "
                f"running Dask scheduler, e.g. tcp://HOST:8786) or {option('workers')} N (a "
                f"local cluster for this run); {given}"
            )
        if not isinstance(self.cluster_tuning, ClusterTuning):
            tuning = self.cluster_tuning
            raise ConfigError(f"cluster_tuning is {tuning!r}; expected a ClusterTuning")
        if self.workers is not None:
            check_int(option("workers"), self.workers, minimum=1)
        elif not isinstance(self.scheduler, str) or not self.scheduler.strip():
            raise ConfigError(
                f"{option('scheduler')} is {self.scheduler!r}; expected a Dask scheduler address "
                "such as tcp://HOST:8786"
            )
        if importlib.util.find_spec("distributed") is None:
            raise ConfigError(
                f"{engine_option('dask')} needs Dask distributed, which is not installed: "
                "pip install 'seqpack-cli[dask]'"
            )

"""What `seqpack stats` computes: a prepared directory described, or max_seq_len values compared.

`describe(StatsRequest(...))` decides the mode from the request and returns a `StatsReport`;
`StatsReport.to_dict()` is the document `seqpack stats --json` prints, and the CLI only renders
it (`seqpack_cli.stats.render`: the terminal report of its `terminal` module, the HTML page of
its `html` module).

The mode:

- **prepared**: one input that is a prepared directory (it has a manifest.json) and no
  `max_seq_lens`: its packing described (`seqpack_cli.stats.profile.profile_packing`).
- **sweep**: `max_seq_lens` given: seqpack and both baselines at each value
  (`seqpack_cli.stats.sweep.sweep_max_seq_len`), on the lengths of parquet inputs (read from
  `length_column`) or of a prepared directory's counts.json.

The `--json` document (`StatsReport.to_dict()`), by mode; `JSON_SCHEMA` holds the same keys, in
order, and the tests check every document against it:

Prepared directory:
    kind            "prepared"
    path            the prepared directory
    verified        whether every file's sha256 was checked (`verify`)
    sample_size     sequences simulated for the sequential baseline
    seed            seed of that sample
    max_seq_len     the directory's bin capacity
    max_seqs_per_bin  the per-bin sequence cap it was prepared with (null: none); both
                    baselines obey it too
    stats           `PackingStats.to_dict()` of its templates
    lower_bound_by  {volume, size, number}, and lp where the LP bound was computed (the packing
                    misses the others): the bounds whose largest is stats.lower_bound_bins
    lengths         num_sequences, num_tokens, num_distinct_lengths, min_length, max_length,
                    mean_length, p50_length, p90_length, p99_length
    no_packing      a baseline: method, num_bins, num_sequences, num_tokens, capacity,
                    efficiency, padding, padding_ratio, avg_seqs_per_bin, num_simulated, estimated
    sequential      the same for sequential (next-fit, random order) packing, under the same
                    cap (its max_seqs_per_bin)
    left_out        what prepare left out (from the manifest's summary): num_input_sequences,
                    num_input_tokens, and num_/share_ of dropped, tokens_dropped, truncated,
                    tokens_truncated (shares of the inputs' sequences or tokens)
    length_histogram, bin_fullness, seqs_per_bin
                    chart data: lists of {label, low, high, count}; seqs_per_bin in
                    even-width buckets up to stats.max_seqs_in_bin
    num_templates   distinct templates
    top_templates   the most common (`top`), most common first: list of {template, num_bins}
    prepare         the manifest's config, inputs (without the file list) and summary

Sweep:
    kind            "sweep"
    source          "parquet" or "prepared" (lengths from counts.json)
    inputs          the parquet files read, or the prepared directory
    length_column   the parquet column read (null for a prepared directory)
    lengths         as above
    length_histogram  as above (power-of-two ranges)
    sample_size, seed  as above
    max_seqs_per_bin  the per-bin sequence caps compared, ascending (null: no cap, last)
    packer          the packer of every row, with its LP effort
    left_out        as above, for a prepared directory (what it no longer holds); null for
                    parquet inputs (each row counts the sequences over its max_seq_len)
    rows            one per (max_seq_len, cap), by max_seq_len ascending, then cap:
      max_seq_len             the candidate
      max_seqs_per_bin        the cap seqpack and both baselines packed under (null: none)
      num_over_cap            sequences longer than it (dropped from every packing below)
      num_tokens_over_cap     their tokens: lost if they are dropped
      share_over_cap          num_over_cap / all sequences
      share_tokens_over_cap   num_tokens_over_cap / all tokens
      num_tokens_truncated    sum of (length - max_seq_len) over them: cut if they are
                              truncated to max_seq_len instead
      share_tokens_truncated  num_tokens_truncated / all tokens
      num_pieces_if_split     the sequences they become if split into max_seq_len pieces
                              instead (`--over-cap split`, with a token store: no token lost)
      attention               the attention cost of the sequences that fit, in query-key
                              pairs scored (FLOPs are proportional; causal halves both):
                              {packed: the sum of length**2, each sequence attending only
                              within itself (a varlen kernel; any packing of them, seqpack's
                              or sequential, costs the same), padded: their number *
                              max_seq_len**2 (no packing: one sequence per row, dense
                              attention over the padded row), packed_vs_padded: packed /
                              padded (0.0 when none fits), per_bin_mean: packed / seqpack's
                              bins, per_bin_max: the largest sum of length**2 in one of
                              its bins, per_bin_max_vs_dense: that over max_seq_len**2}
      seqpack                 `PackingStats.to_dict()` of seqpack's packing
      uncapped_bins           seqpack's bins at this max_seq_len with no cap
      bins_vs_uncapped        seqpack's bins / uncapped_bins - 1: what the cap costs
      seqs_per_bin            seqpack's bins per number of sequences, as seqs_per_bin above
      lower_bound_by          as above
      no_packing, sequential  the baselines under the same cap, as above
      bins_saved_vs_sequential  fraction of sequential's bins seqpack saves

Either mode, with `world_sizes` (`--world-size`), ends with the key `rank_balance`
(`seqpack_cli.stats.rank_balance`): how unequal the data-parallel ranks' costs would be in each
step of epoch 0 of a training run's plan, a rank's cost being the sum over its bins' sequences of
`cost_per_token * l + l**2`:
    rank_balance    cost_per_token, balance_window, seed (the run's; the plan's is epoch_seed =
                    seed_from_components(seed, 0), as PackedDataset(seed=seed) plans epoch 0),
                    epoch_seed, and plans: one per (max_seq_len, cap) packing (the directory's,
                    or each sweep row's), world size and rows per rank, without then with
                    balancing:
      max_seq_len, max_seqs_per_bin  the packing dealt
      world_size, rows_per_rank      the step: world_size x rows_per_rank bins
      balance                 null (DistributedSampler's order) or "cost" (EpochPlan(balance=
                              "cost"): ranks balanced by cost)
      num_steps               steps in the epoch (every rank takes each)
      mean_max_over_mean      the mean over the steps of (the most expensive rank's cost / the
                              mean rank cost): 1.0 when no rank ever waits (null: no step)
      worst_max_over_mean     the largest of them
      worst_step              the first step where it is reached

With a length multiple (a prepared directory packed with `--length-multiple`, or a sweep with
`length_multiple`, `--length-multiple`), the document then ends with the key `length_multiple`
(`seqpack_cli.stats.multiple_cost`): one entry per packing (the directory's, or each sweep row's,
packed again on slot lengths): max_seq_len, max_seqs_per_bin, length_multiple, num_bins,
num_tokens (real), num_slot_tokens, padding (num_slot_tokens - num_tokens) and padding_share
(padding over num_bins * max_seq_len). A prepared directory's `stats` count its real tokens.

Every count is an exact integer (Python ints: past 2**63 where the data is that large).

Importing this module is cheap (no numpy, duckdb or rich): the CLI imports it at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seqpack_cli.errors import ConfigError, option
from seqpack_cli.interrupts import signals_held
from seqpack_cli.progress import ProgressCallback

if TYPE_CHECKING:
    from seqpack_cli.prepared import Prepared
    from seqpack_cli.stats.left_out import LeftOut
    from seqpack_cli.stats.multiple_cost import MultipleCost
    from seqpack_cli.stats.profile import PackingProfile
    from seqpack_cli.stats.rank_balance import PlanBalance, RankBalanceOptions
    from seqpack_cli.stats.sweep import SweepResult

__all__ = ["DEFAULT_SAMPLE_SIZE", "JSON_SCHEMA", "StatsReport", "StatsRequest", "describe"]

DEFAULT_SAMPLE_SIZE = 1_000_000
"""`seqpack_cli.stats.baselines.DEFAULT_SAMPLE_SIZE`, written out so this module imports without
numpy (tested)."""

JSON_SCHEMA: Mapping[str, tuple[str, ...]] = {
    "prepared": (
        "kind",
        "path",
        "verified",
        "sample_size",
        "seed",
        "max_seq_len",
        "max_seqs_per_bin",
        "stats",
        "lower_bound_by",
        "lengths",
        "no_packing",
        "sequential",
        "left_out",
        "length_histogram",
        "bin_fullness",
        "seqs_per_bin",
        "num_templates",
        "top_templates",
        "prepare",
    ),
    "sweep": (
        "kind",
        "source",
        "inputs",
        "length_column",
        "lengths",
        "length_histogram",
        "sample_size",
        "seed",
        "max_seqs_per_bin",
        "packer",
        "left_out",
        "rows",
    ),
    "sweep row": (
        "max_seq_len",
        "max_seqs_per_bin",
        "num_over_cap",
        "num_tokens_over_cap",
        "share_over_cap",
        "share_tokens_over_cap",
        "num_tokens_truncated",
        "share_tokens_truncated",
        "num_pieces_if_split",
        "attention",
        "seqpack",
        "uncapped_bins",
        "bins_vs_uncapped",
        "seqs_per_bin",
        "lower_bound_by",
        "no_packing",
        "sequential",
        "bins_saved_vs_sequential",
    ),
    "rank_balance": ("cost_per_token", "balance_window", "seed", "epoch_seed", "plans"),
    "rank_balance plan": (
        "max_seq_len",
        "max_seqs_per_bin",
        "world_size",
        "rows_per_rank",
        "balance",
        "num_steps",
        "mean_max_over_mean",
        "worst_max_over_mean",
        "worst_step",
    ),
}
"""The keys of `StatsReport.to_dict()`, in order, by mode, then those of its `rank_balance`
(last, with world sizes only) and of each of its plans (meanings: the module docstring)."""

_SEQ_LENS = option("max_seq_len", python="max_seq_lens")
_COLUMN = option("length_column")
_WORLD_SIZES = option("world_size", python="world_sizes")


def _caps_text(caps: Any) -> str:
    """The caps as the user gave them: `3`, or `8,16` for several."""
    if isinstance(caps, int | str):
        return str(caps)
    return ",".join(str(cap) for cap in caps)


@dataclass(frozen=True)
class StatsRequest:
    """What to describe, checked when built: a bad combination is a `ConfigError`.

    `inputs`: one prepared directory, or parquet files, globs or directories. `max_seq_lens`: the
    context lengths to compare (empty: describe the prepared directory). `length_column`: the
    parquet column holding each sequence's length (parquet inputs only). `max_seqs_per_bin`:
    the per-bin sequence cap of a sweep, or several to compare (None: no cap; a prepared
    directory's own cap is read from its manifest); kept as the tuple of caps compared.
    `verify`: check the sha256 of every prepared file. `top`: templates listed.
    `sample_size`, `seed`: the sequential baseline's sample, and the run whose plan the rank
    balance describes. `threads`, `memory_limit`, `temp_dir`: DuckDB's resources for parquet
    inputs. `world_sizes` (empty: none), `rows_per_rank` (default 1), `cost_per_token` (required
    with world sizes), `balance_window`: the rank imbalance of the plans a run would deal from
    each packing (`seqpack_cli.stats.rank_balance`), checked into `rank_balance` (None without
    world sizes).

    The mode is decided here, from the file system: `prepared_dir` is the prepared directory
    read (None for parquet inputs), `is_sweep` whether max_seq_len values are compared.
    """

    inputs: Sequence[str | os.PathLike[str]]
    max_seq_lens: Sequence[int] = ()
    length_column: str | None = None
    max_seqs_per_bin: int | Sequence[int | None] | None = None
    verify: bool = False
    top: int = 10
    sample_size: int = DEFAULT_SAMPLE_SIZE
    seed: int = 0
    threads: int | None = None
    memory_limit: str | None = None
    temp_dir: str | os.PathLike[str] | None = None
    world_sizes: int | Sequence[int] = ()
    rows_per_rank: int | Sequence[int] | None = None
    cost_per_token: float | None = None
    balance_window: int | None = None
    length_multiple: int | None = None
    prepared_dir: str | None = field(init=False)
    rank_balance: RankBalanceOptions | None = field(init=False)

    def __post_init__(self) -> None:
        from seqpack_cli.checks import check_max_seq_len
        from seqpack_cli.seeding import check_required_seed
        from seqpack_cli.stats.baselines import check_sample_size
        from seqpack_cli.stats.profile import check_top
        from seqpack_cli.stats.sweep import check_caps

        if isinstance(self.inputs, str | os.PathLike):
            object.__setattr__(self, "inputs", (self.inputs,))
        object.__setattr__(self, "inputs", tuple(os.fspath(path) for path in self.inputs))
        if not self.inputs:
            raise ConfigError(
                "no inputs: give one prepared directory, or parquet files, globs or directories"
            )
        lens = self.max_seq_lens
        lens = tuple(
            check_max_seq_len(value) for value in ((lens,) if isinstance(lens, int) else lens)
        )
        object.__setattr__(self, "max_seq_lens", lens)
        object.__setattr__(self, "top", check_top(self.top))
        object.__setattr__(self, "sample_size", check_sample_size(self.sample_size))
        object.__setattr__(self, "seed", check_required_seed(self.seed))
        object.__setattr__(self, "prepared_dir", self._prepared_source())
        self._check_combination()
        object.__setattr__(self, "rank_balance", self._rank_balance_options())
        if self.is_sweep:
            object.__setattr__(self, "max_seqs_per_bin", check_caps(self.max_seqs_per_bin))
            if self.length_multiple is not None:  # before any scan: each row packs on slots
                from seqpack_cli.prepared.multiples import check_length_multiple

                for value in lens:
                    check_length_multiple(self.length_multiple, value)
        elif self.max_seqs_per_bin is not None:
            # A prepared directory was packed with its own cap; ignoring this one silently would
            # show figures for a cap the user did not ask about.
            raise ConfigError(
                f"{option('max_seqs_per_bin')} {_caps_text(self.max_seqs_per_bin)} applies when "
                "comparing "
                f"{_SEQ_LENS} values; a prepared directory is described with the cap it was "
                "prepared with (config.max_seqs_per_bin in its manifest): drop it, or give "
                f"{_SEQ_LENS} N[,N...] to compare packings with this cap"
            )

    @property
    def is_sweep(self) -> bool:
        """Whether max_seq_len values are compared (else a prepared directory is described)."""
        return bool(self.max_seq_lens) or self.length_column is not None

    def _prepared_source(self) -> str | None:
        """The prepared directory the inputs name, or None for parquet inputs (then a sweep)."""
        from seqpack_cli.prepared import MANIFEST_NAME

        inputs = self.inputs
        if len(inputs) == 1 and (Path(inputs[0]) / MANIFEST_NAME).is_file():
            return str(inputs[0])
        if self.is_sweep:
            return None
        if len(inputs) > 1:
            raise ConfigError(
                f"{len(inputs)} inputs but no {_SEQ_LENS}: `seqpack stats PREPARED_DIR` takes "
                f"one prepared directory; to analyse parquet inputs give {_COLUMN} NAME "
                f"{_SEQ_LENS} N[,N...]"
            )
        if Path(inputs[0]).exists():
            raise ConfigError(
                f"{inputs[0]} is not a prepared directory (it has no {MANIFEST_NAME}); to "
                f"analyse parquet inputs give {_COLUMN} NAME {_SEQ_LENS} N[,N...], or give a "
                "directory written by `seqpack prepare`"
            )
        return str(inputs[0])  # missing: load_prepared says so, with the command that creates it

    def _rank_balance_options(self) -> RankBalanceOptions | None:
        """The plans to weigh, or None without world sizes (then no option of theirs applies)."""
        world_sizes, rows = self.world_sizes, self.rows_per_rank
        if isinstance(world_sizes, int) or world_sizes:
            from seqpack_cli.stats.rank_balance import RankBalanceOptions

            window = {} if self.balance_window is None else {"balance_window": self.balance_window}
            return RankBalanceOptions(
                (world_sizes,) if isinstance(world_sizes, int) else world_sizes,
                (1,) if rows is None else (rows,) if isinstance(rows, int) else rows,
                self.cost_per_token,
                seed=self.seed,
                **window,
            )
        for name in ("rows_per_rank", "cost_per_token", "balance_window"):
            if getattr(self, name) is not None:
                raise ConfigError(
                    f"{option(name)} describes the plans of {_WORLD_SIZES}, which is not given: "
                    f"add {_WORLD_SIZES} (the data-parallel ranks, e.g. 8,64), or drop it"
                )
        return None

    def _check_combination(self) -> None:
        parquet = self.prepared_dir is None
        if self.is_sweep and not self.max_seq_lens:
            raise ConfigError(
                f"{_COLUMN} without {_SEQ_LENS}: name the context length(s) to compare, "
                f"e.g. {_SEQ_LENS} 2048 or {_SEQ_LENS} 1024,2048,4096"
            )
        if parquet and self.length_column is None:
            raise ConfigError(
                f"{_COLUMN} is required with parquet inputs: name the column holding each "
                "sequence's length in tokens"
            )
        if parquet and self.verify:
            raise ConfigError(
                f"{option('verify')} checks a prepared directory's files; it does not apply to "
                "parquet inputs"
            )
        if not parquet and self.length_column is not None:
            raise ConfigError(
                f"{_COLUMN} does not apply to the prepared directory {self.prepared_dir} (its "
                "lengths are in counts.json); leave it out"
            )


@dataclass(frozen=True)
class StatsReport:
    """The answer to a `StatsRequest`: `profile` (prepared mode) or `sweep`, and what was read.

    `source` is "prepared" or "parquet"; `inputs` the prepared directory or the parquet files
    read; `manifest` the prepared directory's manifest (None for parquet inputs).
    """

    request: StatsRequest
    source: str
    inputs: tuple[str, ...]
    manifest: Mapping[str, Any] | None = None
    profile: PackingProfile | None = None
    sweep: SweepResult | None = None
    rank_balance: tuple[PlanBalance, ...] = ()  # with request.rank_balance: every plan weighed
    multiple_costs: tuple[MultipleCost, ...] = ()  # under a length multiple: its padding
    counts: Mapping[int, int] = field(default_factory=dict, repr=False, compare=False)
    """The length histogram described (real lengths)."""

    def __post_init__(self) -> None:
        if (self.profile is None) == (self.sweep is None):
            raise ValueError("a StatsReport holds a profile or a sweep, not both or neither")

    @property
    def kind(self) -> str:
        """The mode: `prepared` (a directory described) or `sweep` (max_seq_len compared)."""
        return "prepared" if self.profile is not None else "sweep"

    @property
    def left_out(self) -> LeftOut | None:
        """What prepare dropped or truncated (a prepared directory's manifest), else None."""
        if self.manifest is None:
            return None
        from seqpack_cli.stats.left_out import left_out_of_summary

        return left_out_of_summary(self.manifest.get("summary", {}))

    def to_dict(self) -> dict[str, Any]:
        """The `seqpack stats --json` document; keys in `JSON_SCHEMA`, meanings in this module's
        docstring."""
        if self.profile is not None:
            from seqpack_cli.prepared.format import inputs_overview  # numpy: loaded by now

            manifest = self.manifest or {}
            document = {
                "kind": "prepared",
                "path": self.inputs[0],
                "verified": self.request.verify,
                "sample_size": self.request.sample_size,
                "seed": self.request.seed,
                **self.profile.to_dict(),
                "left_out": self._left_out_dict(),
                "prepare": {
                    "config": manifest.get("config", {}),
                    "inputs": inputs_overview(manifest),
                    "summary": manifest.get("summary", {}),
                },
            }
        else:
            assert self.sweep is not None  # __post_init__: one of the two
            document = {
                "kind": "sweep",
                "source": self.source,
                "inputs": list(self.inputs),
                "length_column": self.request.length_column if self.source == "parquet" else None,
                **self.sweep.to_dict(),
                "left_out": self._left_out_dict(),
            }
        ordered = {key: document[key] for key in JSON_SCHEMA[self.kind]}
        options = self.request.rank_balance
        if options is not None:
            ordered["rank_balance"] = {
                **options.to_dict(),
                "plans": [plan.to_dict() for plan in self.rank_balance],
            }
        if self.multiple_costs:
            ordered["length_multiple"] = [cost.to_dict() for cost in self.multiple_costs]
        return ordered

    def _left_out_dict(self) -> dict[str, Any] | None:
        left_out = self.left_out
        return None if left_out is None else left_out.to_dict()

    def to_json(self) -> str:
        """`to_dict()` as `seqpack stats --json` prints it."""
        import json

        return json.dumps(self.to_dict(), indent=2)


def describe(request: StatsRequest, *, progress: ProgressCallback | None = None) -> StatsReport:
    """Describe a prepared directory, or compare `request.max_seq_lens` on its lengths or on
    parquet inputs; see the module docstring for the modes and the document."""
    if request.prepared_dir is None:
        report = _sweep_parquet(request, progress)
    else:
        from seqpack_cli.prepared import load_prepared

        prepared = load_prepared(request.prepared_dir, verify=request.verify)
        if request.is_sweep:
            report = _sweep_prepared(request, prepared, progress)
        else:
            report = _profile_prepared(request, prepared)
    report = _with_multiple_costs(report)
    if request.rank_balance is None:
        return report
    return _with_rank_balance(report, request.rank_balance, progress)


def _with_multiple_costs(report: StatsReport) -> StatsReport:
    """`report` with the padding of its length multiple: the prepared directory's (packed with
    one), or `request.length_multiple` at each sweep row."""
    import dataclasses

    from seqpack_cli.stats.multiple_cost import multiple_cost, sweep_multiple_costs

    multiple = report.request.length_multiple
    config = (report.manifest or {}).get("config", {})
    if report.profile is not None:
        directory = int(config.get("length_multiple") or 1)
        if multiple not in (None, directory):
            raise ConfigError(
                f"{option('length_multiple')} {multiple} with the prepared directory "
                f"{report.inputs[0]}, packed with length_multiple {directory}: stats describes "
                f"its packing; leave {option('length_multiple')} out (or compare "
                f"{_SEQ_LENS} values with it)"
            )
        if directory == 1:
            return report
        profile = report.profile
        cost = multiple_cost(
            report.counts,
            profile.max_seq_len,
            directory,
            num_bins=profile.stats.num_bins,
            max_seqs_per_bin=profile.max_seqs_per_bin,
        )
        return dataclasses.replace(report, multiple_costs=(cost,))
    if multiple is None:
        return report
    assert report.sweep is not None  # a StatsReport holds one of the two
    rows = [(row.max_seq_len, row.max_seqs_per_bin) for row in report.sweep.rows]
    costs = sweep_multiple_costs(report.counts, rows, multiple)
    return dataclasses.replace(report, multiple_costs=tuple(costs))


def _with_rank_balance(
    report: StatsReport, options: RankBalanceOptions, progress: ProgressCallback | None
) -> StatsReport:
    """`report` with the rank imbalance of the plans of each of its packings."""
    import dataclasses

    from seqpack_cli.stats.rank_balance import rank_balance

    if report.profile is not None:
        profile = report.profile
        packings = [(profile.max_seq_len, profile.max_seqs_per_bin, profile.templates)]
    else:
        assert report.sweep is not None  # a StatsReport holds one of the two
        packings = [
            (row.max_seq_len, row.max_seqs_per_bin, row.templates) for row in report.sweep.rows
        ]
    plans = rank_balance(packings, options, progress=progress)
    return dataclasses.replace(report, rank_balance=tuple(plans))


def _sweep_options(request: StatsRequest) -> dict[str, Any]:
    return {
        "max_seqs_per_bin": request.max_seqs_per_bin,
        "sample_size": request.sample_size,
        "seed": request.seed,
    }


def _profile_prepared(request: StatsRequest, prepared: Prepared) -> StatsReport:
    """The prepared directory's own packing, with the cap it was prepared with."""
    from seqpack_cli.stats.profile import profile_packing

    manifest = prepared.manifest
    profile = profile_packing(
        prepared.counts,
        prepared.templates,
        prepared.max_seq_len,
        top=request.top,
        sample_size=request.sample_size,
        seed=request.seed,
        max_seqs_per_bin=manifest.get("config", {}).get("max_seqs_per_bin"),
    )
    if prepared.length_multiple > 1:  # templates of slot lengths: count the real tokens
        import dataclasses

        from seqpack_cli.prepared.multiples import with_real_tokens

        profile = dataclasses.replace(
            profile, stats=with_real_tokens(profile.stats, prepared.counts)
        )
    path = (str(prepared.path),)
    return StatsReport(request, "prepared", path, manifest, profile=profile, counts=prepared.counts)


def _sweep_prepared(
    request: StatsRequest, prepared: Prepared, progress: ProgressCallback | None
) -> StatsReport:
    """The sweep on the lengths the prepared directory kept (its counts.json)."""
    from seqpack_cli.stats.sweep import sweep_max_seq_len

    result = sweep_max_seq_len(
        prepared.counts, request.max_seq_lens, progress=progress, **_sweep_options(request)
    )
    path = (str(prepared.path),)
    return StatsReport(
        request, "prepared", path, prepared.manifest, sweep=result, counts=prepared.counts
    )


def _sweep_parquet(request: StatsRequest, progress: ProgressCallback | None) -> StatsReport:
    """The sweep on the length column of parquet inputs (one DuckDB scan of that column)."""
    from seqpack_cli.stats.sweep import sweep_max_seq_len

    with signals_held():  # a signal must not land inside DuckDB's initialisation (it aborts)
        from seqpack_cli.prepare.inputs import resolve_inputs
        from seqpack_cli.prepare.scan import scan_length_histogram
    files = resolve_inputs(request.inputs)
    counts = scan_length_histogram(
        files,
        str(request.length_column),
        threads=request.threads,
        memory_limit=request.memory_limit,
        temp_dir=request.temp_dir,
        progress=progress,
    )
    result = sweep_max_seq_len(
        counts, request.max_seq_lens, progress=progress, **_sweep_options(request)
    )
    paths = tuple(str(path) for path in files)
    return StatsReport(request, "parquet", paths, sweep=result, counts=counts)

"""What both datasets share: the source, the collator, the seed and the current epoch's plan.

`source` is a prepared directory as `load_prepared` returns it (`Prepared`), or a
`(templates, pools)` pair; without a token source, the tokens (and labels or loss mask) come
from the prepared directory's token store (`prepare --tokens-column`). Each epoch's bins come
from `EpochPlan(templates, pools, seed_from_components(seed, epoch), ...)`, so the pairings
change every epoch, are the same in every process, and bin k is computed directly (no epoch is
ever materialised).
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seqpack_cli.checks import check_int
from seqpack_cli.collate import CollateOptions, PackedCollator
from seqpack_cli.data.targets import StepTargets
from seqpack_cli.epoch.cursor import EpochCursor
from seqpack_cli.epoch.dealing import DEFAULT_BALANCE_WINDOW
from seqpack_cli.epoch.plan import EpochPlan
from seqpack_cli.errors import ConfigError, PreparedFormatError
from seqpack_cli.over_cap import OverCap
from seqpack_cli.seeding import check_required_seed, seed_from_components

__all__ = [
    "PackedEpochs",
    "resolve_source",
    "rows_per_rank_option",
    "source_digest",
    "split_source",
    "store_sources",
    "truncated_by_prepare",
]


def resolve_source(source: Any, verify: bool) -> Any:
    """`source` as the datasets use it: a path is loaded (`load_prepared(path, verify=...)`);
    with `verify=True`, a loaded prepared directory has every file's sha256 checked (and must
    still hold the prepare loaded)."""
    from seqpack_cli.prepared import load_prepared

    if isinstance(source, (str, os.PathLike)):
        return load_prepared(source, verify=verify)
    if verify:
        path = getattr(source, "path", None)
        if path is None:
            raise ConfigError(
                "verify=True checks the files of a prepared directory, but the source is a "
                f"{type(source).__name__}; pass the directory or what load_prepared returns"
            )
        again = load_prepared(path, verify=True)
        if again.manifest_sha256 != getattr(source, "manifest_sha256", None):
            raise PreparedFormatError(
                f"{path} now holds another prepare than the one loaded; load it again"
            )
    return source


def split_source(source: Any) -> tuple[Any, Mapping[int, Any], int | None, Path | None]:
    """(templates, pools, the prepared max_seq_len, the prepared path) from either source."""
    if hasattr(source, "templates") and hasattr(source, "pools"):
        path = getattr(source, "path", None)
        return (
            source.templates,
            source.pools,
            getattr(source, "max_seq_len", None),
            None if path is None else Path(path).absolute(),
        )
    if isinstance(source, (tuple, list)) and len(source) == 2:
        return source[0], source[1], None, None
    raise ConfigError(
        f"source is a {type(source).__name__}; expected what load_prepared returns or a "
        "(templates, pools) pair"
    )


def source_digest(source: Any) -> str | None:
    """What a resume state says it belongs to: the sha256 of the prepared directory's manifest
    as loaded (`manifest_sha256` of its manifest.json; of the repacked manifest after
    `Prepared.repack`, whose bins are others), None for a `(templates, pools)` pair, which has
    no identity. Directories with equal histograms but other ids or inputs differ in it (the
    manifest lists the inputs and every pool file's sha256)."""
    manifest = getattr(source, "manifest", None)
    if not isinstance(manifest, Mapping):
        return None
    from seqpack_cli.prepared.integrity import manifest_digest

    return manifest_digest(manifest)


def store_sources(
    source: Any, token_source: Any, labels_source: Any, loss_mask_source: Any
) -> tuple[Any, Any, Any]:
    """(tokens, labels, loss mask): without a `token_source`, those of the prepared directory's
    token store (`prepare --tokens-column`; its labels or loss mask unless one is given)."""
    if token_source is not None:
        return token_source, labels_source, loss_mask_source
    tokens = getattr(source, "tokens", None)
    if tokens is None:
        raise ConfigError(
            "token_source is not given and the source has no token store; pass token_source "
            "(sequence id -> tokens), or prepare with --tokens-column to store the tokens in the "
            "prepared directory"
        )
    if labels_source is None and loss_mask_source is None:
        labels_source = getattr(source, "labels", None)
        loss_mask_source = getattr(source, "loss_mask", None)
    return tokens, labels_source, loss_mask_source


def truncated_by_prepare(source: Any) -> bool:
    """Whether `source` was prepared with `--over-cap truncate` (`Prepared.over_cap`): its pools
    then hold sequences longer than max_seq_len under the length max_seq_len, and the collator
    keeps their first tokens."""
    over_cap = getattr(source, "over_cap", None)
    return isinstance(over_cap, OverCap) and over_cap.truncates


def _stored_counts(
    source: Any, token_source: Any, labels_source: Any, loss_mask_source: Any
) -> Any:
    """The per-sequence target counts stored with the labels or loss mask in use (`num_targets`
    of the prepared directory's store, or of a token source written by `write_token_source`),
    or None."""
    for values in (labels_source, loss_mask_source):
        counts = getattr(values, "num_targets", None)
        if counts is not None:
            return counts
    store = [getattr(source, name, None) for name in ("tokens", "labels", "loss_mask")]
    in_use = [token_source, labels_source, loss_mask_source]
    if all(a is b for a, b in zip(in_use, store, strict=True)):
        return getattr(source, "num_targets", None)  # counted from this very store
    return None


def collate_options(
    owner: str, collate: CollateOptions | None, legacy: Mapping[str, Any]
) -> CollateOptions:
    """The datasets' `collate=`, or the `CollateOptions` of the collator keywords they took
    before it (`legacy`: each warns once, as deprecated); a `ConfigError` for both or neither,
    a `TypeError` for a keyword that is no collator option (as Python's own)."""
    known = {field.name for field in dataclasses.fields(CollateOptions)}
    unknown = sorted(set(legacy) - known)
    if unknown:
        raise TypeError(f"{owner}() got an unexpected keyword argument {unknown[0]!r}")
    if collate is not None and legacy:
        raise ConfigError(
            f"{owner} got collate= and the collator option {sorted(legacy)[0]}=; pass every "
            f"collator option inside collate=CollateOptions(...)"
        )
    for name, value in legacy.items():
        warnings.warn(
            f"{owner}({name}=...) is deprecated: pass collate=CollateOptions({name}={value!r}, "
            "...) (seqpack_cli.CollateOptions holds every collator option)",
            DeprecationWarning,
            stacklevel=3,
        )
    if collate is not None:
        return collate
    if "pad_token_id" not in legacy:
        raise ConfigError(
            f"{owner} has no collator options; pass collate=CollateOptions(pad_token_id=...) "
            "(the id that pads the rows, e.g. tokenizer.pad_token_id)"
        )
    return CollateOptions(**legacy)


def rows_per_rank_option(owner: str, rows_per_rank: Any, batch_size: Any, fix: str) -> int:
    """The datasets' `rows_per_rank`, checked (a positive int, `fix` in the message), or the
    `batch_size=` they took before it (the same number, named as a state names it): deprecated,
    with a `DeprecationWarning` at the caller and checked under its own name; a `ConfigError`
    for both with different values."""
    if batch_size is None:
        return check_int("rows_per_rank", rows_per_rank, minimum=1, fix=fix)
    if rows_per_rank != 1 and rows_per_rank != batch_size:
        raise ConfigError(
            f"{owner} got rows_per_rank={rows_per_rank!r} and batch_size={batch_size!r}; pass "
            "rows_per_rank only (batch_size is its deprecated name)"
        )
    warnings.warn(
        f"{owner}(batch_size=...) is deprecated: pass rows_per_rank={batch_size!r} (the same "
        "number: packed rows per step of each rank, as the resume state names it)",
        DeprecationWarning,
        stacklevel=3,
    )
    return check_int("batch_size", batch_size, minimum=1, fix=fix)


class PackedEpochs:
    """The base of both datasets: builds the collator and the current epoch's plan."""

    def __init__(
        self,
        source: Any,
        token_source: Any,
        *,
        collate: CollateOptions,
        max_seq_len: int | None,
        seed: int,
        epoch: int,
        rank: int,
        world_size: int,
        drop_last: bool,
        labels_source: Any = None,
        loss_mask_source: Any = None,
        verify: bool = False,
        rows_per_rank: int = 1,
        balance: str | None = None,
        cost_per_token: float | None = None,
        balance_window: int = DEFAULT_BALANCE_WINDOW,
        grad_accum: int = 1,
        return_num_items_in_batch: bool = False,
    ) -> None:
        source = resolve_source(source, verify)
        self._templates, self._pools, prepared_max_seq_len, self._prepared_path = split_source(
            source
        )
        self.manifest_sha256 = source_digest(source)
        token_source, labels_source, loss_mask_source = store_sources(
            source, token_source, labels_source, loss_mask_source
        )
        if max_seq_len is None:
            if prepared_max_seq_len is None:
                raise ConfigError(
                    "max_seq_len is not set and the source is a (templates, pools) pair; pass "
                    "max_seq_len=... (the length the templates were packed for)"
                )
            max_seq_len = prepared_max_seq_len
        self.seed = check_required_seed(seed)
        self.rank, self.world_size, self.drop_last = rank, world_size, bool(drop_last)
        self.collator = PackedCollator.from_options(
            token_source,
            max_seq_len,
            collate,
            labels_source=labels_source,
            loss_mask_source=loss_mask_source,
            truncate=truncated_by_prepare(source),
        )
        self.max_seq_len = self.collator.max_seq_len
        self.rows_per_rank, self.balance = rows_per_rank, balance
        self.cost_per_token, self.balance_window = cost_per_token, balance_window
        self.grad_accum = check_int(
            "grad_accum",
            grad_accum,
            minimum=1,
            fix="pass the micro-batches accumulated per optimizer step (1 without accumulation)",
        )
        self.return_num_items_in_batch = bool(return_num_items_in_batch)
        self._targets: StepTargets | None = None
        # With a length multiple the templates hold rounded slots, not the sequences' lengths.
        self._exact_templates = int(getattr(source, "length_multiple", 1) or 1) == 1
        if self.return_num_items_in_batch:
            counts = _stored_counts(source, token_source, labels_source, loss_mask_source)
            self._targets = StepTargets(
                self.collator, counts, self.grad_accum, self._exact_templates
            )
        self._epoch = check_int("epoch", epoch, minimum=0)
        # What is left of the current epoch when a run resumed on another layout (world size,
        # rows per rank, balance): the plan deals only that.
        self._cursor = EpochCursor()
        self._plan: EpochPlan | None = None
        # Built now, so bad templates/pools/rank fail here rather than inside a worker.
        plan = self.plan
        if plan.max_seq_len_needed > self.max_seq_len:
            raise ConfigError(
                f"max_seq_len={self.max_seq_len} but the templates hold bins of up to "
                f"{plan.max_seq_len_needed} tokens; pass the max_seq_len they were packed for "
                f"(at least {plan.max_seq_len_needed})"
            )

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def batch_size(self) -> int:
        """`rows_per_rank`'s name before: deprecated, with a `DeprecationWarning`."""
        warnings.warn(
            f"{type(self).__name__}.batch_size is deprecated: read rows_per_rank (the same number)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.rows_per_rank

    @property
    def plan(self) -> EpochPlan:
        """The current epoch's plan (this rank's bins), built once per epoch."""
        if self._plan is None:
            self._plan = EpochPlan(
                self._templates,
                self._pools,
                seed_from_components(self.seed, self._epoch),
                rank=self.rank,
                world_size=self.world_size,
                drop_last=self.drop_last,
                rows_per_rank=self.rows_per_rank,
                balance=self.balance,
                cost_per_token=self.cost_per_token,
                balance_window=self.balance_window,
                cursor=self._cursor,
            )
        return self._plan

    def num_items_in_batch(self, step: int, num_steps: int | None = None) -> int:
        """The loss targets of the optimizer step holding step `step` of this rank's epoch:
        every rank's, every micro-batch's (`grad_accum` steps of the plan, of its first
        `num_steps`), from the plan."""
        if self._targets is None:
            self._targets = StepTargets(self.collator, None, self.grad_accum, self._exact_templates)
        return self._targets.for_step(self.plan, step, num_steps)

    def _switch_epoch(self, epoch: Any) -> bool:
        """Make `epoch` current; True when it changed."""
        epoch = check_int("epoch", epoch, minimum=0)
        if epoch == self._epoch:
            return False
        self._epoch, self._plan, self._cursor = epoch, None, EpochCursor()
        return True

    def __getstate__(self) -> dict[str, Any]:
        # What a worker started with "spawn"/"forkserver" receives. The plan is cheap to rebuild;
        # the pools and the token store of a prepared directory pickle as their location and
        # manifest digest (`PoolMap`, `StoreTokenSource`): the worker maps the same files rather
        # than receiving copies, and refuses the directory if it now holds another prepare.
        state = self.__dict__.copy()
        state["_plan"] = None
        return state

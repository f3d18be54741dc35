"""`Prepared.repack`: a prepared directory re-targeted to other packing options at load time.

The plan depends only on the length histogram, so a new `max_seq_len`, `max_seqs_per_bin` or
`length_multiple` needs no token read and writes no file: the directory's histogram (counts.json)
is packed again with the packer prepare used (`multiples.pack_slots`, so the templates are those
`prepare` would write with the same options), and the pools become the directory's pools keyed by
slot length (`SlotPools`: memory-mapped pools stay mapped, nothing is concatenated). The cost is
O(distinct lengths) plus the packer's; nothing grows with the number of sequences.

A repack always starts from the directory's own histogram and pools, so repacking a repacked
`Prepared` equals repacking the loaded one with the options in force (None keeps them).

Sequences over a smaller `max_seq_len` follow `over_cap`: `drop` leaves them out, `truncate`
keeps them in slots of `max_seq_len` (the collator then keeps their first `max_seq_len` tokens:
the returned manifest's `config.over_cap` is `truncate` whenever a kept sequence is cut, which is
what `truncated_by_prepare` reads), `error` refuses in one line saying how many no longer fit.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from seqpack_cli.checks import check_max_seq_len, check_max_seqs_per_bin
from seqpack_cli.errors import ConfigError
from seqpack_cli.over_cap import OverCap
from seqpack_cli.prepared.multiples import (
    check_length_multiple,
    multiple_padding,
    pack_slots,
    slot_stats,
)
from seqpack_cli.prepared.slot_pools import SlotPools, exact_pools

__all__ = ["REPACK_OVER_CAP", "repack_prepared"]

logger = logging.getLogger(__name__)

REPACK_OVER_CAP = ("error", "drop", "truncate")
"""The `over_cap` policies a repack applies (prepare's `split` needs new ids: prepare again)."""

_ORIGIN_KEY = "repacked_from"
"""The config key of a repacked manifest holding the directory's own packing options."""


def _origin(manifest: dict[str, Any]) -> dict[str, Any]:
    """The directory's own options (carried through repacks): max_seq_len, max_seqs_per_bin,
    length_multiple, over_cap, and num_truncated (sequences prepare stored cut to max_seq_len)."""
    config = manifest["config"]
    if _ORIGIN_KEY in config:
        return dict(config[_ORIGIN_KEY])
    over_cap = config.get("over_cap", "error")
    cut = OverCap.from_config(config).truncates
    truncated = manifest.get("summary", {}).get("num_truncated", 0) if cut else 0
    return {
        "max_seq_len": int(config["max_seq_len"]),
        "max_seqs_per_bin": config.get("max_seqs_per_bin"),
        "length_multiple": int(config.get("length_multiple") or 1),
        "over_cap": over_cap,
        "num_truncated": int(truncated or 0),
    }


def _policy(over_cap: Any, inherited: str) -> str:
    if over_cap is None:
        return "error" if inherited == "split" else inherited
    if over_cap not in REPACK_OVER_CAP:
        raise ConfigError(
            f"over_cap is {over_cap!r}; a repack takes one of {', '.join(REPACK_OVER_CAP)} (None "
            "keeps the manifest's; split needs new ids: run seqpack prepare --over-cap split)"
        )
    return str(over_cap)


def repack_prepared(
    prepared: Any,
    *,
    max_seq_len: int | None = None,
    max_seqs_per_bin: int | None = None,
    length_multiple: int | None = None,
    over_cap: str | None = None,
) -> dict[str, Any]:
    """The fields of the `Prepared` that is `prepared` (a `Prepared`) packed again with these
    options (None keeps the manifest's): `manifest`, `counts`, `templates`, `pools`, the rest
    (path, token store, manifest digest) its own; see the module docstring. Raises
    `ConfigError` for a bad option, for sequences over a smaller `max_seq_len` under the policy
    `error`, and for a `max_seq_len` above the one prepare cut sequences to (`--over-cap
    truncate`: their tokens past it are not in their slots)."""
    manifest = prepared.manifest
    config = manifest["config"]
    origin = _origin(manifest)
    limit = check_max_seq_len(config["max_seq_len"] if max_seq_len is None else max_seq_len)
    cap = check_max_seqs_per_bin(
        config.get("max_seqs_per_bin") if max_seqs_per_bin is None else max_seqs_per_bin
    )
    multiple = check_length_multiple(
        config.get("length_multiple") if length_multiple is None else length_multiple, limit
    )
    prepared_with = OverCap.from_config(config)
    policy = _policy(over_cap, prepared_with.policy)
    stored_cut = int(origin["num_truncated"])
    if stored_cut and limit > origin["max_seq_len"]:
        raise ConfigError(
            f"max_seq_len={limit} is over the {origin['max_seq_len']} that {prepared.path} was "
            f"prepared with under over_cap 'truncate': {stored_cut} sequences are stored cut to "
            f"{origin['max_seq_len']} tokens and cannot be cut anywhere else; pass max_seq_len "
            f"<= {origin['max_seq_len']}, or prepare again with --max-seq-len {limit}"
        )
    exact, exact_counts = exact_pools(prepared.pools, prepared.counts)
    rule = OverCap(policy, limit)
    stored = {length: count for length, count in exact_counts.items() if count}
    over = {length: count for length, count in stored.items() if length > limit}
    num_over = sum(over.values())
    if num_over and policy == "error":
        raise ConfigError(
            f"{num_over} sequences of {prepared.path} are longer than max_seq_len={limit} (the "
            f"longest stored has {max(over)} tokens); pass over_cap='drop' to leave them out or "
            f"over_cap='truncate' to keep their first {limit} tokens, or max_seq_len >= "
            f"{max(over)}"
        )
    counts = rule.kept_histogram(stored)
    if not counts:
        raise ConfigError(
            f"all {num_over} sequences of {prepared.path} are longer than max_seq_len={limit}, "
            f"so nothing is left to pack; raise max_seq_len (the shortest has {min(over)} "
            "tokens), or pass over_cap='truncate'"
        )
    packed = pack_slots(
        counts,
        limit,
        max_seqs_per_bin=cap,
        packer=config.get("packer", "batched"),
        length_multiple=multiple,
    )
    stats = slot_stats(packed, counts, limit, max_seqs_per_bin=cap)
    templates: Counter[tuple[int, ...]] = Counter()
    for template, number in packed.items():
        templates[tuple(sorted((int(x) for x in template), reverse=True))] += int(number)
    # Sequences the collator must cut: those over the new limit kept by truncate, and those
    # prepare cut, while they stay at the length it cut them to.
    cut = (num_over if rule.truncates else 0) + (
        stored_cut if limit == origin["max_seq_len"] else 0
    )
    recorded = "truncate" if cut else policy
    if policy == "error" and prepared_with.splits:
        recorded = "split"  # nothing was over: the stored pieces stand as prepare cut them
    pools: Any = exact
    if multiple > 1 or num_over:
        pools = SlotPools(exact, exact_counts, limit, multiple, truncate=rule.truncates)
    new_manifest = _manifest(
        manifest,
        origin,
        config={
            "max_seq_len": limit,
            "max_seqs_per_bin": cap,
            "length_multiple": multiple,
            "over_cap": recorded,
            "filter_over_cap": recorded == "drop",
        },
        counts=counts,
        templates=templates,
        stats=stats,
        repack={
            "num_over_cap": num_over,
            "num_dropped": num_over if rule.drops else 0,
            "num_truncated": num_over if rule.truncates else 0,
        },
    )
    logger.info(
        "repacked %s: max_seq_len %d, length_multiple %d, %d bins, efficiency %.4f",
        prepared.path,
        limit,
        multiple,
        stats.num_bins,
        stats.efficiency,
    )
    return {"manifest": new_manifest, "counts": counts, "templates": templates, "pools": pools}


def _manifest(
    manifest: dict[str, Any],
    origin: dict[str, Any],
    *,
    config: dict[str, Any],
    counts: dict[int, int],
    templates: Counter[tuple[int, ...]],
    stats: Any,
    repack: dict[str, int],
) -> dict[str, Any]:
    """The loaded manifest with the repack's config, figures and `summary.repack` (shallow
    copies: the files table is shared, never changed)."""
    new = dict(manifest)
    new["config"] = {**manifest["config"], **config, _ORIGIN_KEY: origin}
    new.update(
        max_seq_len=config["max_seq_len"],
        n_sequences=stats.num_sequences,
        n_bins=stats.num_bins,
        efficiency=stats.efficiency,
        stats=stats.to_dict(),
    )
    new["summary"] = {
        **manifest.get("summary", {}),
        "num_sequences": stats.num_sequences,
        "num_tokens": stats.num_tokens,
        "num_bins": stats.num_bins,
        "efficiency": stats.efficiency,
        "lower_bound_bins": stats.lower_bound_bins,
        "num_distinct_lengths": len(counts),
        "num_templates": len(templates),
        "min_length": min(counts),
        "max_length": max(counts),
        "num_multiple_padding": multiple_padding(counts, config["length_multiple"]),
        "repack": repack,
    }
    return new

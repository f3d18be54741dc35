"""The `prepared/` layout: file names, the format version, the canonical JSON bytes, and
`Prepared`, what `load_prepared` returns.

```
prepared/
  manifest.json     format_version, seqpack version, config, inputs, summary, every file's
                    size and sha256 (and the token store's edges_sha256), its own digest
                    (manifest_sha256); written last, so its presence means the rest is complete
  counts.json       {length: number of sequences}, lengths ascending
  templates.json    [[template_lengths, multiplicity], ...], templates descending; with
                    config.length_multiple m > 1 (`prepare --length-multiple`), of slot lengths
                    (each length rounded up to a multiple of m), while counts.json and the
                    pools stay per exact length (`load_prepared` keys the pools by slot)
  pools/{length}.npy  int64 ids of that length, ascending
  tokens/           only with `--tokens-column`: a token source directory (tokens.npy,
                    offsets.npy, with an id column ids.npy and rows.npy, token_source.json) of
                    every input row, in row order; `labels/` or `loss_mask/` beside it with
                    `--labels-column` / `--loss-mask-column`. Listed in the manifest's
                    `token_store` and its files table.
  labels/num_targets.npy or loss_mask/num_targets.npy
                    each row's number of loss targets (int32, or int64 for a sequence over
                    2**31 tokens), aligned with the role's rows, counted as `PackedCollator`
                    makes targets (labels != -100 or mask != 0, never a sequence's first token,
                    within the first max_seq_len tokens under `--over-cap truncate`); described
                    in that role's token_source.json (`num_targets`), listed in the files table
                    (size, sha256, edges_sha256). A store written before it has none:
                    `Prepared.num_targets` is then None (see `seqpack_cli.target_counts`).
```
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from seqpack_cli.over_cap import OverCap

__all__ = [
    "COUNTS_NAME",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "MANIFEST_NAME",
    "READABLE_FORMAT_VERSIONS",
    "STORE_ROLES",
    "TEMPLATES_NAME",
    "TOKENIZER_KEY",
    "TOKEN_STORE_KEY",
    "Prepared",
    "counts_to_json",
    "templates_to_json",
]

FORMAT_NAME = "seqpack-prepared"
"""The manifest's `format`: what marks a directory as a seqpack prepared directory."""
FORMAT_VERSION = 2
"""Version of the `prepared/` layout that this seqpack writes. Version 2 added the manifest's own
digest (`manifest_sha256`) and the token store's `edges_sha256`."""
READABLE_FORMAT_VERSIONS = (1, 2)
"""The versions `load_prepared` reads (1 without the digests, with a warning); it refuses any
other."""

MANIFEST_NAME = "manifest.json"
COUNTS_NAME = "counts.json"
TEMPLATES_NAME = "templates.json"
TOKEN_STORE_KEY = "token_store"
"""The manifest section describing the token store: `{role: {"column", "dtype", ...}}`."""
TOKENIZER_KEY = "tokenizer"
"""The manifest section of `prepare --tokenizer`: the tokenizer's record and its options."""
STORE_ROLES = ("tokens", "labels", "loss_mask")
"""The token store's subdirectories (and the manifest's `token_store` keys)."""


@dataclass(frozen=True, eq=False)
class Prepared:
    """A loaded `prepared/` directory, as `load_prepared` (or `prepare_dataset`) returns it.

    Unpacks like the reference's tuple: `manifest, counts, templates, pools = load_prepared(p)`.
    Build one with `load_prepared`; the fields are what it read, checked against each other.

    Args:
        path: the directory.
        manifest: manifest.json as a dict: format_version, config (columns, max_seq_len,
            packer, over_cap, ...), inputs, summary, and every file's size and sha256.
        counts: counts.json: `{length: number of sequences}`, lengths ascending.
        templates: templates.json: `Counter{(l1 >= l2 >= ...): multiplicity}`, of slot lengths
            when `length_multiple` > 1.
        pools: `{length: int64 ids of that length, ascending}`, read-only and opened on first
            use (memory-mapped by default; keyed by slot length when `length_multiple` > 1).
        tokens: the token store's tokens (a memory-mapped `FlatTokenSource` indexed by sequence
            id, `prepare --tokens-column`), None without a store.
        labels: the store's labels (`--labels-column`), or None.
        loss_mask: the store's loss mask (`--loss-mask-column`), or None.
        manifest_sha256: the manifest's own digest as loaded (None for format_version 1): what
            a reopen of the same path (a DataLoader worker) compares to tell that it still holds
            this prepare.
    """

    path: Path
    manifest: dict[str, Any]
    counts: dict[int, int]
    templates: Counter[tuple[int, ...]]
    pools: Mapping[int, np.ndarray] = field(repr=False)
    tokens: Any = field(default=None, repr=False)
    labels: Any = field(default=None, repr=False)
    loss_mask: Any = field(default=None, repr=False)
    manifest_sha256: str | None = None

    @property
    def num_targets(self) -> Any:
        """Each sequence's number of loss targets, stored with the loss mask or labels (a
        `seqpack_cli.target_counts.NumTargets`: `take(seq_ids)`, `truncated_to`), or None
        without either (or in a store written before seqpack stored them)."""
        for values in (self.labels, self.loss_mask):
            if values is not None:
                return getattr(values, "num_targets", None)
        return None

    @property
    def tokenizer(self) -> dict[str, Any] | None:
        """What `prepare --tokenizer` recorded (None without it): the tokenizer's `sha256`
        (of its tokenizer.json), `vocab_size`, `special_tokens` ({"bos": {"token", "id"},
        ...}), `chat_template_sha256`, and the options (`kind`, `columns`, `train_on`,
        `add_special_tokens`). `check_tokenizer` compares a tokenizer with it."""
        section = self.manifest.get(TOKENIZER_KEY)
        return dict(section) if isinstance(section, dict) else None

    def check_tokenizer(self, tokenizer: Any) -> None:
        """Refuse a tokenizer other than the one `prepare --tokenizer` tokenized with.

        Args:
            tokenizer: a path (a tokenizer.json, or a directory holding one), a
                `tokenizers.Tokenizer`, or a transformers tokenizer.

        Raises:
            InputError: the directory was not tokenized by prepare, or `tokenizer` differs
                from the recorded one (its file's hash for a path; its vocabulary size and
                special token ids for an object), naming the difference.
        """
        from seqpack_cli.prepared.tokenizer_check import check_tokenizer

        check_tokenizer(self.path, self.tokenizer, tokenizer)

    @property
    def max_seq_len(self) -> int:
        """The bin capacity the templates were packed for."""
        return int(self.manifest["config"]["max_seq_len"])

    @property
    def over_cap(self) -> OverCap:
        """What prepare (or the last repack) did with sequences over `max_seq_len`, as the
        `OverCap` rule: `over_cap.cut_to` is the length the collator cuts a stored sequence to
        (truncate), None when every stored sequence fits whole."""
        return OverCap.from_config(self.manifest["config"])

    @property
    def length_multiple(self) -> int:
        """The multiple the templates' slot lengths are rounded up to (1: exact lengths)."""
        return int(self.manifest["config"].get("length_multiple") or 1)

    def repack(
        self,
        max_seq_len: int | None = None,
        max_seqs_per_bin: int | None = None,
        length_multiple: int | None = None,
        over_cap: str | None = None,
    ) -> Prepared:
        """This directory packed again for other options, from its histogram: no token read,
        no file written, the same token store and memory-mapped pools (`ConcatPool`s under a
        length multiple). See `seqpack_cli.prepared.repack`.

        Args:
            max_seq_len: the new bin capacity in tokens, in [1, 2**31 - 1]; None keeps the
                manifest's. Above the one prepare cut sequences to (`--over-cap truncate`) is
                refused: their tokens past it are not stored.
            max_seqs_per_bin: the new cap on sequences per bin, >= 1; None keeps the
                manifest's.
            length_multiple: the new slot multiple (2 * cp for context parallelism), which must
                divide `max_seq_len`; None keeps the manifest's, 1 packs exact lengths.
            over_cap: what happens to sequences over a smaller `max_seq_len`: "drop",
                "truncate" or "error" (prepare's "split" needs new ids: prepare again); None
                keeps the manifest's.

        Returns:
            A `Prepared` with the same path, token store and digest, and the manifest, counts,
            templates and pools of the new packing (the manifest's `config` and `summary`
            record the new options and figures).

        Raises:
            ConfigError: a bad option, sequences over a smaller `max_seq_len` under "error", or
                a `max_seq_len` over the length prepare truncated to.
        """
        from seqpack_cli.prepared.repack import repack_prepared

        repacked = repack_prepared(
            self,
            max_seq_len=max_seq_len,
            max_seqs_per_bin=max_seqs_per_bin,
            length_multiple=length_multiple,
            over_cap=over_cap,
        )
        return dataclasses.replace(self, **repacked)  # the same path, token store and digest

    @property
    def summary(self) -> dict[str, Any]:
        """Sequences, tokens, bins, efficiency, lower bound and drops, as recorded by prepare."""
        return dict(self.manifest.get("summary", {}))

    def __iter__(self) -> Iterator[Any]:
        return iter((self.manifest, self.counts, self.templates, self.pools))


def inputs_overview(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's `inputs` without the per-file list (which can run to thousands of entries):
    what the `--json` documents of `prepare` and `stats` show."""
    inputs = manifest.get("inputs", {})
    return {key: value for key, value in inputs.items() if key != "files"}


def _json_bytes(value: Any) -> bytes:
    return (json.dumps(value) + "\n").encode()


def counts_to_json(counts: Mapping[int, int]) -> bytes:
    """counts.json's bytes: `{"length": count}` with lengths ascending."""
    return _json_bytes({str(length): int(counts[length]) for length in sorted(counts)})


def templates_to_json(templates: Mapping[tuple[int, ...], int]) -> bytes:
    """templates.json's bytes: `[[template_lengths, multiplicity], ...]`, each template's lengths
    descending, templates descending, each template once (templates equal once sorted are merged;
    a multiplicity of 0, a Counter's absent key, is left out)."""
    # The reference's [[template_lengths, multiplicity], ...]; descending templates give one
    # canonical order whatever order the packer produced them in (load_prepared checks it).
    merged: Counter[tuple[int, ...]] = Counter()
    for template, multiplicity in templates.items():
        merged[tuple(sorted((int(x) for x in template), reverse=True))] += int(multiplicity)
    items = sorted(((t, m) for t, m in merged.items() if m != 0), reverse=True)
    return _json_bytes([[list(template), multiplicity] for template, multiplicity in items])

"""The O(templates) checks that catch a prepared directory whose files agree with their hashes
but not with each other; `load_prepared` always runs them.

- `read_counts`, `read_templates`: counts.json and templates.json as typed values.
- `check_templates`: every template is a valid bin (positive lengths listed in counts.json, sorted
  descending, within `max_seq_len` and `max_seqs_per_bin`, listed once) and together the
  templates use each length exactly as often as counts.json says.
- `check_figures`: the totals the manifest records (`n_sequences`, `n_bins`, ...) agree with
  those files.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from seqpack_cli.prepared.format import COUNTS_NAME, MANIFEST_NAME, TEMPLATES_NAME
from seqpack_cli.prepared.schema import INT_RANGE_MAX, MAX_INT, unusable
from seqpack_cli.prepared.strict_json import show

__all__ = ["check_figures", "check_templates", "read_counts", "read_templates"]

_LENGTH_TEXT = re.compile(r"[1-9][0-9]{0,18}")


def read_counts(path: Path, data: Any, max_seq_len: int) -> dict[int, int]:
    """counts.json (`{"length": count}`) as `{length: count}`; lengths within max_seq_len."""
    if not isinstance(data, dict):
        raise unusable(path, f"{COUNTS_NAME} holds {show(data)}; expected an object")
    counts: dict[int, int] = {}
    for key, count in data.items():
        if not _LENGTH_TEXT.fullmatch(key):
            raise unusable(
                path,
                f"{COUNTS_NAME} has the key {json.dumps(key)[:60]}; expected lengths written as "
                'positive integers ("1", "512")',
            )
        length = int(key)
        if length > max_seq_len:
            raise unusable(
                path,
                f"{COUNTS_NAME} has length {length}, longer than config.max_seq_len "
                f"{max_seq_len} in {MANIFEST_NAME}",
            )
        if type(count) is not int or not 0 <= count <= MAX_INT:
            raise unusable(
                path,
                f"{COUNTS_NAME} has {show(count)} sequences of length {length}; expected an "
                f"integer in [0, {INT_RANGE_MAX}]",
            )
        counts[length] = count
    return counts


def read_templates(path: Path, data: Any) -> list[tuple[tuple[int, ...], int]]:
    """templates.json (`[[template_lengths, multiplicity], ...]`) as (template, multiplicity)
    pairs, in file order; types only (`check_templates` checks the values)."""
    if not isinstance(data, list):
        raise unusable(path, f"{TEMPLATES_NAME} holds {show(data)}; expected an array")
    pairs: list[tuple[tuple[int, ...], int]] = []
    for number, entry in enumerate(data):
        if (
            not isinstance(entry, list)
            or len(entry) != 2
            or not isinstance(entry[0], list)
            or any(type(length) is not int for length in entry[0])
            or type(entry[1]) is not int
        ):
            raise unusable(
                path,
                f"{TEMPLATES_NAME} entry {number} is {show(entry)}; expected [[length, ...], "
                "multiplicity] with integer lengths and multiplicity",
            )
        pairs.append((tuple(entry[0]), entry[1]))
    return pairs


def check_templates(
    path: Path,
    pairs: list[tuple[tuple[int, ...], int]],
    counts: Mapping[int, int],
    max_seq_len: int,
    max_seqs_per_bin: int | None,
) -> Counter[tuple[int, ...]]:
    """The templates as a Counter, after checking that each is a valid bin and that together
    they use every length exactly `counts[length]` times. O(template slots)."""
    templates: Counter[tuple[int, ...]] = Counter()
    used: dict[int, int] = {}
    for number, (template, multiplicity) in enumerate(pairs):
        problem = _template_problem(template, multiplicity, counts, max_seq_len, max_seqs_per_bin)
        if problem is None and template in templates:
            problem = "appears twice (each template is listed once, with its multiplicity)"
        if problem is not None:
            raise unusable(
                path,
                f"{TEMPLATES_NAME} entry {number} ({show([list(template), multiplicity])}) "
                f"{problem}",
            )
        templates[template] = multiplicity
        for length in template:
            used[length] = used.get(length, 0) + multiplicity
    for length, count in counts.items():
        if used.get(length, 0) != count:
            raise unusable(
                path,
                f"the templates in {TEMPLATES_NAME} hold {used.get(length, 0)} sequences of "
                f"length {length} but {COUNTS_NAME} says {count}: every sequence must be in "
                "exactly one bin",
            )
    return templates


def _template_problem(
    template: tuple[int, ...],
    multiplicity: int,
    counts: Mapping[int, int],
    max_seq_len: int,
    max_seqs_per_bin: int | None,
) -> str | None:
    if not template:
        return "is empty; a bin holds at least one sequence"
    if not 1 <= multiplicity <= MAX_INT:
        return f"has multiplicity {multiplicity}; expected an integer in [1, {INT_RANGE_MAX}]"
    previous = template[0]
    for length in template:
        if length not in counts:
            return f"has length {length}, which {COUNTS_NAME} does not list"
        if length > previous:
            return "is not sorted descending"
        previous = length
    total = sum(template)
    if total > max_seq_len:
        return (
            f"holds {total} tokens, more than config.max_seq_len {max_seq_len} in {MANIFEST_NAME}"
        )
    if max_seqs_per_bin is not None and len(template) > max_seqs_per_bin:
        return (
            f"holds {len(template)} sequences, more than config.max_seqs_per_bin "
            f"{max_seqs_per_bin} in {MANIFEST_NAME}"
        )
    return None


def check_figures(
    path: Path,
    manifest: Mapping[str, Any],
    counts: Mapping[int, int],
    templates: Mapping[tuple[int, ...], int],
) -> None:
    """The sequence, token and bin totals the manifest records agree with the files."""
    summary = manifest.get("summary", {})
    actual = {
        "sequences": sum(counts.values()),
        "bins": sum(templates.values()),
        "tokens": sum(length * count for length, count in counts.items()),
    }
    recorded = [
        ("n_sequences", manifest.get("n_sequences"), "sequences"),
        ("n_bins", manifest.get("n_bins"), "bins"),
        ("summary.num_sequences", summary.get("num_sequences"), "sequences"),
        ("summary.num_bins", summary.get("num_bins"), "bins"),
        ("summary.num_tokens", summary.get("num_tokens"), "tokens"),
    ]
    for field, value, what in recorded:
        if value is not None and value != actual[what]:
            source = COUNTS_NAME if what != "bins" else TEMPLATES_NAME
            raise unusable(
                path,
                f"{MANIFEST_NAME} field {field} is {value} but {source} holds {actual[what]} "
                f"{what}",
            )

"""Templates in one canonical form: the sorted tuples of lengths that fill one bin.

A packing is a Counter of templates (or, in templates.json, `(template, multiplicity)` pairs).
`canonical_templates` checks one and returns it in canonical order. It sits below both
`packing.efficiency`, which summarises a packing, and `epoch.plan`, which draws bins from one.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from seqpack_cli.checks import check_int
from seqpack_cli.errors import InputError

__all__ = ["Template", "canonical_templates", "packed_lengths"]

Template = tuple[int, ...]


def canonical_templates(templates: Any) -> list[tuple[Template, int]]:
    """Validated `(template, multiplicity)` pairs in canonical order (templates descending).

    `templates` is a Mapping (a `Counter[BinTemplate]`) or an iterable of
    `(template, multiplicity)` pairs (the templates.json form, lists allowed). Each template's
    lengths are sorted descending; pairs naming the same template are merged.
    """
    fix = "templates come from pack_length_histogram_batched or a prepared/ templates.json"
    if isinstance(templates, Mapping):
        pairs: Iterable[Any] = templates.items()
    elif isinstance(templates, (str, bytes)) or not isinstance(templates, Iterable):
        raise InputError(
            f"templates is a {type(templates).__name__}; expected a Counter of length tuples "
            f"or (template, multiplicity) pairs; {fix}"
        )
    else:
        pairs = templates
    merged: dict[Template, int] = {}
    for number, pair in enumerate(pairs):
        try:
            raw_template, raw_multiplicity = pair
        except (TypeError, ValueError):
            raise InputError(
                f"templates entry {number} is {pair!r}; expected a (template, multiplicity) pair; "
                f"{fix}"
            ) from None
        if isinstance(raw_template, (str, bytes)) or not isinstance(raw_template, Iterable):
            raise InputError(
                f"template {number} is {raw_template!r}; expected a tuple of lengths; {fix}"
            )
        # Plain positive ints, the usual case, skip the full check (a build checks every length).
        lengths = [
            length
            if type(length) is int and length > 0
            else check_int(
                f"length {length!r} in template {number}",
                length,
                minimum=1,
                fix=fix,
                error=InputError,
            )
            for length in raw_template
        ]
        if not lengths:
            raise InputError(f"template {number} is empty; a bin holds at least one length; {fix}")
        multiplicity = check_int(
            f"multiplicity of template {tuple(lengths)}",
            raw_multiplicity,
            minimum=1,
            fix=fix,
            error=InputError,
        )
        template = tuple(sorted(lengths, reverse=True))
        merged[template] = merged.get(template, 0) + multiplicity
    return sorted(merged.items(), reverse=True)


def packed_lengths(pairs: Iterable[tuple[Template, int]]) -> tuple[np.ndarray, np.ndarray]:
    """The sequences a packing holds, as (lengths, counts) int64 arrays, lengths repeating.

    `pairs`: `(template, multiplicity)`, e.g. from `canonical_templates`; each length of a
    template counts once per bin the template fills. O(total template size), whatever the
    multiplicities.
    """
    pairs = list(pairs)
    sizes = np.fromiter((len(template) for template, _ in pairs), dtype=np.int64, count=len(pairs))
    lengths = np.fromiter(
        itertools.chain.from_iterable(template for template, _ in pairs),
        dtype=np.int64,
        count=int(sizes.sum()),
    )
    multiplicities = np.fromiter((m for _, m in pairs), dtype=np.int64, count=len(pairs))
    return lengths, np.repeat(multiplicities, sizes)

"""Groups of identical bins: the representation every histogram packing strategy works on.

Bins are never handled one by one. A group of identical bins is a `(node, num_bins)` pair, where
a node is a persistent chain `(parent_node, length, copies)` (None is the empty bin): appending
`copies` x `length` to a whole group is one tuple, whatever the number of bins. A strategy that
builds a bin whole (the pattern heuristic) stores it as `(None, template, 0)` instead.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

__all__ = ["BinTemplate", "Group", "Node", "count_bins", "group_templates", "node_template"]

BinTemplate = tuple[int, ...]
"""The lengths packed into one bin, sorted descending; their sum is <= max_seq_len."""

Node = Any  # None, (parent: Node, length: int, copies: int), or (None, BinTemplate, 0)
Group = tuple[Node, int]  # (node, num_bins)


def node_template(node: Node) -> BinTemplate:
    """The template of the bins of a node: its lengths, longest first."""
    if node is not None and node[2] == 0:
        return node[1]  # (None, template, 0): a template built whole
    parts: list[int] = []
    while node is not None:
        node, length, copies = node
        parts.extend([length] * copies)
    parts.sort(reverse=True)  # MFFD places lengths out of order; BFD/FFD chains are sorted
    return tuple(parts)


def group_templates(groups: Iterable[Group]) -> Counter[BinTemplate]:
    """The histogram of templates of a packing given as groups (empty groups are skipped)."""
    totals: dict[BinTemplate, int] = {}  # a plain dict, then one Counter: faster than += on one
    for node, num_bins in groups:
        if num_bins:
            # a template built whole is taken as it is (most groups of the pattern heuristic)
            template = node[1] if node is not None and node[2] == 0 else node_template(node)
            totals[template] = totals.get(template, 0) + num_bins
    return Counter(totals)


def count_bins(groups: Iterable[Group]) -> int:
    """The number of bins of a packing given as groups."""
    return sum(num_bins for _, num_bins in groups)

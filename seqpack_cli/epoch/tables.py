"""The canonical layout of an epoch (`TemplateTables`): which template fills each canonical bin,
and which pool position each slot of it takes.

Step 1 of `seqpack_cli.epoch.plan`'s docstring, as flat tables: template t fills the canonical
bins `[bin_start[t], bin_end[t])`; slot q of template t (q in `[slot_start[t], slot_start[t] +
size)`) takes, in occurrence o of the template, pool position `slot_base[q] + o *
slot_stride[q]` of the pool `slot_member[q]`. A bucket table finds the template of a canonical
bin in O(1) for all but a few bins. Memory is O(distinct templates + their slots).

Under a length multiple a slot length's pool is several exact-length pools back to back
(`IdPools.parts`): position p of it is position `p - start` of the part it falls in. A part
boundary falls in one occurrence of one template, so the tables are kept per *segment*: a run
of a template's occurrences in which every slot stays within one part (a boundary cuts a
template into at most three segments). Per segment a slot is a plain (member, base, stride), and
a batch reads exact pools only. Without parts the segments are the templates.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from seqpack_cli.epoch.scratch import Scratch
from seqpack_cli.epoch.tuning import EpochTuning
from seqpack_cli.templates import Template

__all__ = ["TemplateTables", "ids_needed"]


def ids_needed(pairs: Sequence[tuple[Template, int]]) -> dict[int, int]:
    """Length -> the ids of that length the templates hold (`(template, multiplicity)` pairs)."""
    needed: dict[int, int] = {}
    for template, multiplicity in pairs:
        for length in template:
            needed[length] = needed.get(length, 0) + multiplicity
    return needed


class TemplateTables:
    """The templates of an epoch in canonical order, and where each bin and slot draws from.

    `pairs`: canonical `(template, multiplicity)` pairs (`seqpack_cli.templates`); `lengths`:
    the pools' lengths, in the order of their member index (`seqpack_cli.epoch.pools`), and
    `member_dtype` the dtype of that index.
    """

    __slots__ = (
        "_bin_end",
        "_bin_end_list",
        "_bin_start",
        "_segment_bin_end",
        "_segment_template",
        "_slot_base",
        "_slot_lists",
        "_slot_member",
        "_slot_start",
        "_slot_stride",
        "bucket_segment",
        "bucket_shift",
        "num_bins",
        "segment_sizes",
        "templates",
    )

    def __init__(
        self,
        pairs: Sequence[tuple[Template, int]],
        lengths: Sequence[int],
        member_dtype: Any,
        tuning: EpochTuning,
        parts: Mapping[int, Sequence[tuple[int, int]]] | None = None,
    ) -> None:
        self.templates: list[Template] = [template for template, _ in pairs]
        multiplicities = np.array([multiplicity for _, multiplicity in pairs], dtype=np.int64)
        self.num_bins = int(multiplicities.sum())
        self._bin_end_list: list[int] = np.cumsum(multiplicities).tolist()
        segments = _Segments(pairs, {length: i for i, length in enumerate(lengths)}, parts or {})
        # Per segment (= per template without parts): where its bins are, and its slots.
        segment_multiplicities = np.array(segments.multiplicity, dtype=np.int64)
        bin_end = np.cumsum(segment_multiplicities)
        self._bin_end = bin_end
        self._bin_start = bin_end - segment_multiplicities
        self._segment_bin_end: list[int] = bin_end.tolist()
        self._segment_template = np.array(segments.template, dtype=np.int64) if parts else None
        self.bucket_shift, self.bucket_segment = _bucket_table(bin_end, tuning)
        sizes = np.array([len(t) for t in self.templates], dtype=np.int64)
        self.segment_sizes = sizes.take(segments.template) if parts else sizes
        slot_lists = segments.slot_start, segments.member, segments.base, segments.stride
        slot_start, slot_member, slot_base, slot_stride = slot_lists
        self._slot_lists = slot_lists
        self._slot_start = np.array(slot_start, dtype=np.int64)
        self._slot_member = np.array(slot_member, dtype=member_dtype)
        self._slot_base = np.array(slot_base, dtype=np.int64)
        self._slot_stride = np.array(slot_stride, dtype=np.int64)

    def template_of(self, j: int) -> int:
        """The template of canonical bin `j` (a binary search: one bin at a time)."""
        return bisect.bisect_right(self._bin_end_list, j)

    def slots(self, j: int) -> list[tuple[int, int]]:
        """(pool member, pool position) of each slot of canonical bin `j`."""
        bin_end = self._segment_bin_end
        t = bisect.bisect_right(bin_end, j)
        occurrence = j - (bin_end[t - 1] if t else 0)
        slot_start, slot_member, slot_base, slot_stride = self._slot_lists
        first = slot_start[t]
        return [
            (slot_member[q], slot_base[q] + occurrence * slot_stride[q])
            for q in range(first, first + int(self.segment_sizes[t]))
        ]

    def segments_of(self, j: np.ndarray, scratch: Scratch) -> np.ndarray:
        """The segment index of each canonical bin in `j` (a binary search only where the
        bucket table is ambiguous: numpy's searchsorted costs ~50 ns per random query)."""
        buckets = scratch.array("bins.buckets", len(j), np.int64)
        np.right_shift(j, self.bucket_shift, out=buckets)
        table = self.bucket_segment
        t = table.take(buckets, out=scratch.array("bins.t", len(j), table.dtype), mode="clip")
        straddling = np.flatnonzero(t < 0)
        if straddling.size:
            t[straddling] = np.searchsorted(self._bin_end, j[straddling], side="right")
        return t

    def templates_of(self, j: np.ndarray, scratch: Scratch) -> np.ndarray:
        """The template index of each canonical bin in `j`."""
        segments = self.segments_of(j, scratch)
        if self._segment_template is None:
            return segments
        return self._segment_template.take(segments)

    def pool_positions(
        self, j: np.ndarray, t: np.ndarray, sizes: np.ndarray, scratch: Scratch
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(positions, members, ends) of the ids of a batch of canonical bins `j` (segments `t`,
        sizes `sizes`), bin after bin: id i takes pool position `positions[i]` of pool
        `members[i]`, and bin k's ids end at `ends[k]`. `j` is overwritten; all three are work
        arrays of `scratch`."""
        num_bins = len(j)
        work = self._bin_start.take(
            t, out=scratch.array("bins.work", num_bins, np.int64), mode="clip"
        )
        j -= work  # j is now the occurrence of the bin's segment
        ends = np.cumsum(sizes, out=scratch.array("bins.ends", num_bins, np.int64))
        starts = self._slot_start.take(t, out=work, mode="clip")
        starts -= ends
        starts += sizes
        num_ids = int(ends[-1])
        # The bin of each id: 1 at the first id of every bin but the first, summed.
        bin_of_id = scratch.array("ids.a", num_ids, np.int64)
        bin_of_id.fill(0)
        bin_of_id[ends[:-1]] = 1
        np.cumsum(bin_of_id, out=bin_of_id)
        # q: the flat slot index of every id of the batch, bin after bin.
        q = starts.take(bin_of_id, out=scratch.array("ids.b", num_ids, np.int64), mode="clip")
        q += scratch.iota(num_ids)
        positions = j.take(bin_of_id, out=scratch.array("ids.c", num_ids, np.int64), mode="clip")
        slot_values = self._slot_stride.take(q, out=bin_of_id, mode="clip")
        positions *= slot_values
        positions += self._slot_base.take(q, out=slot_values, mode="clip")
        dtype = self._slot_member.dtype
        members = self._slot_member.take(
            q, out=scratch.array("ids.members", num_ids, dtype), mode="clip"
        )
        return positions, members, ends


class _Segments:
    """The segments of the canonical layout (see the module docstring) as flat lists: segment i
    is occurrences of template `template[i]`, `multiplicity[i]` of them, and its slots are
    `slot_start[i]` on, slot q taking position `base[q] + o * stride[q]` of pool `member[q]` in
    the segment's occurrence o. The templates consume the positions of each slot length's pool
    in canonical order; `parts[R]` (length, size) cut the pool of R into exact-length pools."""

    def __init__(
        self,
        pairs: Sequence[tuple[Template, int]],
        member_of: Mapping[int, int],
        parts: Mapping[int, Sequence[tuple[int, int]]],
    ) -> None:
        self.template: list[int] = []
        self.multiplicity: list[int] = []
        self.slot_start: list[int] = []
        self.member: list[int] = []
        self.base: list[int] = []
        self.stride: list[int] = []
        self._member_of = member_of
        self._parts = parts
        # Per slot length with parts: where each part starts in the slot length's pool.
        self._part_starts = {
            slot: np.cumsum([0] + [size for _, size in slot_parts]).tolist()
            for slot, slot_parts in parts.items()
        }
        consumed = dict.fromkeys({length for template, _ in pairs for length in template}, 0)
        for t, (template, multiplicity) in enumerate(pairs):
            per_length: dict[int, int] = {}
            for length in template:
                per_length[length] = per_length.get(length, 0) + 1
            cuts = {0, multiplicity}
            for length in per_length.keys() & self._part_starts.keys():
                starts = self._part_starts[length]
                cuts |= _cuts(starts, consumed[length], per_length[length], multiplicity)
            for first, last in itertools.pairwise(sorted(cuts)):
                self.template.append(t)
                self.multiplicity.append(last - first)
                self.slot_start.append(len(self.base))
                self._add_slots(template, first, per_length, consumed)
            for length, count in per_length.items():
                consumed[length] += multiplicity * count

    def _add_slots(
        self,
        template: Template,
        first: int,
        per_length: Mapping[int, int],
        consumed: Mapping[int, int],
    ) -> None:
        """The slots of a segment of `template` that starts at its occurrence `first`."""
        seen: dict[int, int] = {}
        for length in template:
            stride = per_length[length]
            position = consumed[length] + first * stride + seen.get(length, 0)
            seen[length] = seen.get(length, 0) + 1
            if length in self._parts:
                starts = self._part_starts[length]
                part = bisect.bisect_right(starts, position) - 1
                self.member.append(self._member_of[self._parts[length][part][0]])
                self.base.append(position - starts[part])
            else:
                self.member.append(self._member_of[length])
                self.base.append(position)
            self.stride.append(stride)


def _cuts(starts: list[int], consumed: int, stride: int, multiplicity: int) -> set[int]:
    """The occurrences at which a template whose `stride` slots of one length take positions
    `consumed ..` of its pool must be cut so that no segment crosses a part start (`starts`):
    a start on an occurrence's first slot cuts before it, one inside an occurrence cuts that
    occurrence out on its own."""
    end = consumed + stride * multiplicity
    cuts: set[int] = set()
    for start in starts[bisect.bisect_right(starts, consumed) : bisect.bisect_left(starts, end)]:
        occurrence, within = divmod(start - consumed, stride)
        cuts.add(occurrence)
        if within:
            cuts.add(occurrence + 1)
    return cuts


def _bucket_table(bin_end: np.ndarray, tuning: EpochTuning) -> tuple[int, np.ndarray]:
    """(shift, table): table[b] is the template of every canonical bin j with j >> shift == b,
    or -1 where bucket b straddles two templates (see `EpochTuning.buckets_per_template`)."""
    num_bins = int(bin_end[-1]) if len(bin_end) else 0
    target = min(tuning.max_buckets, tuning.buckets_per_template * max(1, len(bin_end)))
    shift = max(0, (num_bins // target).bit_length() - 1) if num_bins else 0
    first = np.arange(0, num_bins, 1 << shift, dtype=np.int64)
    last = np.minimum(first + (1 << shift), num_bins) - 1
    first_template = np.searchsorted(bin_end, first, side="right")
    last_template = np.searchsorted(bin_end, last, side="right")
    table = np.where(first_template == last_template, first_template, -1)
    return shift, table.astype(np.int32 if len(bin_end) < 1 << 31 else np.int64)

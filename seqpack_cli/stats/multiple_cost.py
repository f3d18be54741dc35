"""What a length multiple costs: the padding of slots rounded up to a multiple m.

Context parallelism pads every sequence to a multiple of `2 * cp`, so packing on slot lengths
(`prepare --length-multiple m`, `Prepared.repack(length_multiple=m)`) keeps rows within
`max_seq_len` at the price of that padding: `num_slot_tokens - num_tokens`, the sum over the
sequences of `ceil(l / m) * m - l`, shown as tokens and as a share of the bins' capacity (bins
of the packing on slot lengths times `max_seq_len`). `seqpack stats` shows it for a prepared
directory packed with a multiple, and for each row of a sweep with `--length-multiple m`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seqpack_cli.prepared.multiples import check_length_multiple, pack_slots, slot_length

__all__ = ["MultipleCost", "multiple_cost", "sweep_multiple_costs"]


@dataclass(frozen=True)
class MultipleCost:
    """The padding a length multiple costs one packing (see the module docstring)."""

    max_seq_len: int
    max_seqs_per_bin: int | None
    length_multiple: int
    num_bins: int  # of the packing on slot lengths
    num_tokens: int  # real tokens of the sequences that fit
    num_slot_tokens: int  # their slots' tokens

    @property
    def padding(self) -> int:
        return self.num_slot_tokens - self.num_tokens

    @property
    def padding_share(self) -> float:
        """The padding over the bins' capacity (num_bins * max_seq_len); 0.0 without bins."""
        capacity = self.num_bins * self.max_seq_len
        return self.padding / capacity if capacity else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "max_seq_len": self.max_seq_len,
            "max_seqs_per_bin": self.max_seqs_per_bin,
            "length_multiple": self.length_multiple,
            "num_bins": self.num_bins,
            "num_tokens": self.num_tokens,
            "num_slot_tokens": self.num_slot_tokens,
            "padding": self.padding,
            "padding_share": self.padding_share,
        }

    def text(self) -> str:
        """One line for the terminal report."""
        return (
            f"{self.padding:,} tokens of padding ({100 * self.padding_share:.2f}% of the "
            f"{self.num_bins:,} bins' capacity) to round lengths up to multiples of "
            f"{self.length_multiple}"
        )


def multiple_cost(
    counts: Mapping[int, int],
    max_seq_len: int,
    length_multiple: int,
    *,
    num_bins: int,
    max_seqs_per_bin: int | None = None,
) -> MultipleCost:
    """The cost of `length_multiple` to the sequences of `counts` that fit `max_seq_len`, packed
    on slot lengths into `num_bins` bins."""
    fit = [(int(length), int(count)) for length, count in counts.items() if length <= max_seq_len]
    return MultipleCost(
        max_seq_len=max_seq_len,
        max_seqs_per_bin=max_seqs_per_bin,
        length_multiple=length_multiple,
        num_bins=num_bins,
        num_tokens=sum(length * count for length, count in fit),
        num_slot_tokens=sum(slot_length(length, length_multiple) * count for length, count in fit),
    )


def sweep_multiple_costs(
    counts: Mapping[int, int],
    packings: Sequence[tuple[int, int | None]],
    length_multiple: Any,
    *,
    packer: str = "batched",
) -> list[MultipleCost]:
    """The cost of `length_multiple` at each (max_seq_len, cap) of a sweep: the sequences that
    fit each max_seq_len packed again on slot lengths (the multiple must divide each)."""
    costs = []
    for max_seq_len, cap in packings:
        multiple = check_length_multiple(length_multiple, max_seq_len)
        fit = {length: count for length, count in counts.items() if length <= max_seq_len}
        templates = pack_slots(
            fit, max_seq_len, max_seqs_per_bin=cap, packer=packer, length_multiple=multiple
        )
        costs.append(
            multiple_cost(
                fit,
                max_seq_len,
                multiple,
                num_bins=sum(templates.values()),
                max_seqs_per_bin=cap,
            )
        )
    return costs

"""The plain-text table the benchmarks print: a titled block of right-aligned columns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["print_table"]


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print `== title`, then the header, a rule and the rows (cells as `str()` gives them)."""
    cells = [list(header), *[[str(cell) for cell in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    print(f"\n== {title}")
    for number, row in enumerate(cells):
        print("  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True)))
        if number == 0:
            print("  ".join("-" * width for width in widths))

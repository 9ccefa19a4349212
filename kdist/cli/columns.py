"""Plain text columns for the tables kdist prints: a row per rank, at any job size.

rich's Table measured every cell of every row through its layout engine: 1,000 ranks
took 1.05 s to print here (`kdist status` of a 1,000-node job, issue 53); these columns
take milliseconds and look the same (two spaces apart, each as wide as its widest cell).
Cells are escaped (``kdist.shared.terminal.escape``): they hold the cluster's words.
"""

from __future__ import annotations

from collections.abc import Sequence

from kdist.shared.terminal import escape


def columns(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """The table's lines: the headers, then one line per row."""
    from rich.cells import cell_len

    texts = [list(headers), *([escape(cell) for cell in row] for row in rows)]
    widths = [max(cell_len(line[i]) for line in texts) for i in range(len(headers))]
    return ["  ".join(cell + " " * (width - cell_len(cell))
                      for cell, width in zip(line, widths, strict=True)) for line in texts]

"""How a table's columns share a width, and what a table reads from its rows. Pure: no
widget, no I/O; `widgets/table.py` draws with it."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size

from tickui.ui.view.cells import Cell

ELLIPSIS = "…"
ARROWS = {False: "▲", True: "▼"}


@dataclass(frozen=True)
class Column:
    """`min` is always given when the column shows (never below its title), then up to
    `preferred`; a `flex` column also takes spare width while its content is cut. Higher
    `priority` numbers are dropped first when narrow; 0 is never dropped."""

    title: str
    min: int
    preferred: int = 0  # 0: the same as min
    priority: int = 0
    flex: bool = False
    right: bool = False  # numbers: aligned right


def fit(text: str, width: int, right: bool = False) -> str:
    """`text` in exactly `width` cells: padded, or cut with a final "…"."""
    size = cell_len(text)
    if size <= width:
        pad = " " * (width - size)
        return pad + text if right else text + pad
    if width <= 0:
        return ""
    return set_cell_size(text, width - 1) + ELLIPSIS


def layout_columns(
    columns: list[Column],
    width: int,
    wanted: dict[int, int] | None = None,
    sorted_title: str | None = None,
) -> list[tuple[int, int]]:
    """(column index, width) of the columns shown in `width` cells, one space between.

    Every shown column gets its minimum (never below its title, plus the sort arrow).
    Columns are dropped, highest priority number first, until the shown ones fit at what
    they need: the minimum, or the preferred width for a column that is never dropped
    (priority 0) or a flexible one (its content, once seen, caps that). Cutting the
    content of a shown column is worse than not showing a less useful one. Then columns
    grow to their preferred widths (lowest priority number first) and the spare goes in
    equal shares to the flexible columns whose content (`wanted`) is still cut. What is
    left stays blank at the right: no column gets width it does not use."""
    wanted = wanted or {}

    def floor(i: int) -> int:
        column = columns[i]
        title = len(column.title) + (1 if column.title == sorted_title else 0)
        return max(column.min, title)

    def preferred(i: int) -> int:
        column = columns[i]
        if column.flex and i in wanted:
            return min(column.preferred, max(wanted[i], column.min))
        return column.preferred

    chosen = list(range(len(columns)))
    widths = {i: floor(i) for i in chosen}
    need = {
        i: max(w, preferred(i)) if columns[i].flex or not columns[i].priority else w
        for i, w in widths.items()
    }

    def used(sizes: dict[int, int]) -> int:
        return sum(sizes[i] for i in chosen) + len(chosen) - 1

    while len(chosen) > 1 and used(need) > width:
        droppable = [i for i in chosen if columns[i].priority > 0]
        if not droppable:
            break
        chosen.remove(max(droppable, key=lambda i: (columns[i].priority, i)))
    spare = width - used(widths)
    for target in (need, {i: preferred(i) for i in chosen}):
        for i in sorted(chosen, key=lambda i: (columns[i].priority, i)):
            grow = max(0, min(spare, target[i] - widths[i]))  # never below the minimum
            widths[i] += grow
            spare -= grow
    while spare > 0:
        cut = [i for i in chosen if columns[i].flex and wanted.get(i, 0) > widths[i]]
        if not cut:
            break
        share = max(1, spare // len(cut))
        for i in cut:
            grow = min(share, spare, wanted[i] - widths[i])
            widths[i] += grow
            spare -= grow
            if spare <= 0:
                break
    return [(i, widths[i]) for i in chosen]


class RowSource:
    """What a `RowTable` reads: a row count, the cells of one row, and the key of a row
    (and the row of a key) so the cursor can follow a row wherever it moves."""

    sort: tuple[str, bool] | None = None  # the sorted column's title, descending

    def __len__(self) -> int:  # pragma: no cover - protocol
        raise NotImplementedError

    def cells(self, index: int, now: int) -> list[Cell] | None:  # pragma: no cover
        raise NotImplementedError

    def key_at(self, index: int) -> Hashable | None:  # pragma: no cover
        raise NotImplementedError

    def index_of(self, key: Hashable) -> int | None:  # pragma: no cover
        raise NotImplementedError

    def hold(self, on: bool) -> bool:
        """Hold the rows' order while the user's cursor is off the top row; True when
        releasing it reordered them. Rows kept in a fixed order ignore it."""
        return False

    def reorders(self) -> bool:
        """The rows move by themselves now (a sort by time, not held): a cursor on the
        top row stays on the top row instead of following a row down."""
        return False

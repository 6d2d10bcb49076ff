"""How a table's columns share a width, and what a table reads from its rows. Pure: no
widget, no I/O; `widgets/table.py` draws with it."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from rich.cells import cell_len, set_cell_size
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.text import Text

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
    gap: int = 1,
) -> list[tuple[int, int]]:
    """(column index, width) of the columns shown in `width` cells, `gap` spaces between.

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
        return sum(sizes[i] for i in chosen) + gap * (len(chosen) - 1)

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
    _squeeze(columns, chosen, widths, width, gap)
    return [(i, widths[i]) for i in chosen]


CUT = 3  # the narrowest a cut cell gets ("ab…"); a column that cannot have it goes


def _squeeze(
    columns: list[Column], chosen: list[int], widths: dict[int, int], width: int, gap: int
) -> None:
    """Narrower than the minimums of the columns that are never dropped: columns go from
    the right while even CUT cells each would not fit, then the rest are cut (their
    content then ends in "…"), flexible ones first, then from the right. The columns and
    their gaps never pass `width`."""

    def total(least: bool = False) -> int:
        sizes = (min(widths[i], CUT) if least else widths[i] for i in chosen)
        return sum(sizes) + gap * (len(chosen) - 1)

    while len(chosen) > 1 and total(least=True) > width:
        del widths[chosen.pop()]
    over = total() - width
    for i in sorted(chosen, key=lambda i: (not columns[i].flex, -i)):
        if over <= 0:
            return
        cut = min(over, widths[i] - min(widths[i], CUT))
        widths[i] -= cut
        over -= cut
    if over > 0:  # one column, narrower than CUT
        widths[chosen[0]] = max(0, widths[chosen[0]] - over)


def fit_row(
    columns: list[Column], layout: list[tuple[int, int]], cells: list[Cell], gap: int = 1
) -> list[Cell]:
    """One row as drawn, left to right: each shown cell fitted to its column's width (cut
    with "…" when longer, aligned as its column), `gap` spaces (at least one) between
    two. Every table of the dashboard draws its rows through this, so no two values ever
    touch."""
    drawn: list[Cell] = []
    for n, (i, w) in enumerate(layout):
        if n:
            drawn.append((" " * gap, ""))
        text, style = cells[i]
        drawn.append((fit(text, w, columns[i].right), style))
    return drawn


def header_row(
    columns: list[Column],
    layout: list[tuple[int, int]],
    sort: tuple[str, bool] | None = None,
    gap: int = 1,
) -> str:
    """The titles over `fit_row`'s cells (the sorted column's with its arrow), as far
    apart."""
    titles = []
    for i, w in layout:
        title = columns[i].title
        if sort and sort[0] == title:
            title += ARROWS[sort[1]]
        titles.append(fit(title, w))  # on the left, over numbers too
    return (" " * gap).join(titles)


def content_widths(columns: list[Column], rows: list[list[Cell]]) -> dict[int, int]:
    """The widest content of each flexible column (what `layout_columns` calls wanted)."""
    return {
        i: max((cell_len(row[i][0]) for row in rows), default=0)
        for i, column in enumerate(columns)
        if column.flex
    }


class FittedTable:
    """A table as a Rich renderable, laid out by `layout_columns` and drawn by `fit_row`
    at whatever width it is given (a pane's or a dialog's): for tables shown whole in a
    `Static` rather than scrolled a row at a time as `RowTable` does."""

    def __init__(
        self,
        columns: list[Column],
        rows: list[list[Cell]],
        row_styles: list[str | None] | None = None,
        header_style: str = "bold",
        gap: int = 2,
    ) -> None:
        self.columns = columns
        self.rows = rows
        self.row_styles = row_styles or [None] * len(rows)
        self.header_style = header_style
        self.gap = gap

    def lines(self, width: int) -> list[Text]:
        """The header and rows in `width` cells: a space at each edge, `gap` between."""
        gap, room = self.gap, max(0, width - 2)
        wanted = content_widths(self.columns, self.rows)
        layout = layout_columns(self.columns, room, wanted, gap=gap)
        header = Text(f" {header_row(self.columns, layout, gap=gap)}", self.header_style)
        header.pad_right(width - header.cell_len)  # as wide as the rows, as a Rich table's
        lines = [header]
        for cells, style in zip(self.rows, self.row_styles, strict=True):
            line = Text(" ", style=style or "")
            for text, spec in fit_row(self.columns, layout, cells, gap):
                line.append(text, spec)
            if style:  # a marked row is marked across the whole width
                line.pad_right(width - line.cell_len)
            lines.append(line)
        return lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.lines(options.max_width)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement(1, options.max_width)


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

"""A table on Textual's Line API: it renders only the rows on screen.

`DataTable` rebuilds its caches in O(rows) on every change (TEXTUAL-NOTES.md); this one
asks its source for the visible rows at paint time, so a change costs what is visible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.cells import set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Region, Size
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tickui.ui.cells import Cell


@dataclass(frozen=True)
class Column:
    title: str
    width: int  # 0: takes what is left
    priority: int = 0  # higher columns are dropped first when the pane is narrow


class RowSource:
    """What a `RowTable` reads: a row count and the cells of one row."""

    def __len__(self) -> int:  # pragma: no cover - protocol
        raise NotImplementedError

    def cells(self, index: int, now: int) -> list[Cell] | None:  # pragma: no cover
        raise NotImplementedError


_STYLES: dict[str, Style] = {}


def _style(spec: str) -> Style:
    style = _STYLES.get(spec)
    if style is None:
        style = _STYLES[spec] = Style.parse(spec) if spec else Style()
    return style


class RowTable(ScrollView, can_focus=True):
    """Rows from a source, a cursor, a sticky header line; scrolls with keys and mouse."""

    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "Top", show=False),
        Binding("end", "jump(-1)", "Bottom", show=False),
    ]

    cursor: reactive[int] = reactive(0, always_update=True, repaint=False)

    def __init__(
        self,
        columns: list[Column],
        source: RowSource,
        now: Callable[[], int],
        *,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.columns = columns
        self.source = source
        self.now = now
        self._layout: list[tuple[int, int]] = []  # (column index, width)
        self._laid_for = -1
        self._painted: dict[int, tuple[int, list[Cell] | None]] = {}  # line: (row, cells)

    # ---- geometry --------------------------------------------------------------------

    def sync_size(self) -> None:
        """Call after rows are added or removed: the virtual height follows the source."""
        self.virtual_size = Size(self.size.width, len(self.source) + 1)
        if self.cursor >= len(self.source):
            self.cursor = max(0, len(self.source) - 1)
        self.refresh()

    def on_resize(self) -> None:
        self.sync_size()

    def _columns_for(self, width: int) -> list[tuple[int, int]]:
        if width == self._laid_for:
            return self._layout
        chosen = list(range(len(self.columns)))
        flex_min = 8

        def needed(indexes: list[int]) -> int:
            return sum(self.columns[i].width or flex_min for i in indexes) + len(indexes)

        while len(chosen) > 1 and needed(chosen) > width:
            drop = max(chosen[1:], key=lambda i: (self.columns[i].priority, i))
            if self.columns[drop].priority == 0:
                break
            chosen.remove(drop)
        fixed = sum(self.columns[i].width + 1 for i in chosen if self.columns[i].width)
        layout = []
        for i in chosen:
            w = self.columns[i].width or max(flex_min, width - fixed - 1)
            layout.append((i, w))
        self._layout, self._laid_for = layout, width
        return layout

    # ---- painting --------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        layout = self._columns_for(width)
        if y == 0:
            header = _style("bold reverse") if self.has_focus else _style("bold")
            text = " ".join(set_cell_size(self.columns[i].title, w) for i, w in layout)
            return Strip([Segment(set_cell_size(text, width), header)], width)
        index = self.scroll_offset.y + y - 1
        cells = self.source.cells(index, self.now()) if index < len(self.source) else None
        self._painted[y] = (index, cells)
        if cells is None:
            return Strip.blank(width)
        selected = index == self.cursor
        base = _style("on #1f4f7a" if self.has_focus else "on #333333") if selected else None
        segments = []
        for i, w in layout:
            text, spec = cells[i]
            style = _style(spec)
            segments.append(Segment(set_cell_size(text, w) + " ", style + base if base else style))
        return Strip(segments).adjust_cell_length(width).crop(0, width)

    def refresh_row(self, index: int) -> None:
        """Repaint one row if it is on screen (the header line is row -1)."""
        line = index - self.scroll_offset.y + 1
        if 1 <= line < self.size.height:
            self.refresh(Region(0, line, self.size.width, 1))

    def refresh_changed(self) -> None:
        """Time moved (countdowns, durations): repaint only the cells on screen whose text or
        style is no longer what was painted. A row that reads the same is not touched."""
        width = self.size.width
        layout = self._columns_for(width)
        top, count, now = self.scroll_offset.y, len(self.source), self.now()
        for y in range(1, self.size.height):
            index = top + y - 1
            painted = self._painted.get(y)
            cells = self.source.cells(index, now) if index < count else None
            if painted is not None and painted[0] == index and painted[1] == cells:
                continue
            if painted is None or painted[0] != index or painted[1] is None or cells is None:
                self.refresh(Region(0, y, width, 1))
                continue
            old, start, end, x = painted[1], width, 0, 0
            for i, w in layout:
                if old[i] != cells[i]:
                    start, end = min(start, x), x + w + 1
                x += w + 1
            if end > start:
                self.refresh(Region(start, y, min(end, width) - start, 1))

    # ---- cursor ----------------------------------------------------------------------

    def watch_cursor(self, old: int, new: int) -> None:
        top = self.scroll_offset.y
        visible = max(1, self.size.height - 1)
        if new < top:
            self.scroll_to(y=new, animate=False)
        elif new >= top + visible:
            self.scroll_to(y=new - visible + 1, animate=False)
        self.refresh()

    def move_to(self, index: int) -> None:
        count = len(self.source)
        self.cursor = max(0, min(index, count - 1)) if count else 0

    def action_cursor(self, step: int) -> None:
        self.move_to(self.cursor + step)

    def action_page(self, direction: int) -> None:
        self.move_to(self.cursor + direction * max(1, self.size.height - 2))

    def action_jump(self, where: int) -> None:
        self.move_to(len(self.source) - 1 if where < 0 else 0)

    def on_click(self, event: Click) -> None:
        if event.y >= 1:
            self.move_to(self.scroll_offset.y + event.y - 1)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

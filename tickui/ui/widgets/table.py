"""A table on Textual's Line API: it renders only the rows on screen.

`DataTable` rebuilds its caches in O(rows) on every change; this one
asks its source for the visible rows at paint time, so a change costs what is visible.
The cursor follows a row's key (task id, occurrence id), not its index, so rows added,
removed or reordered around it leave it on the same row. Colours come from the theme.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Region, Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.timer import Timer

from tickui.ui.view.cells import Cell
from tickui.ui.view.layout import Column, RowSource, fit, fit_row, header_row, layout_columns

HOLD_AFTER_KEY = 5.0  # seconds a key holds the order of rows that reorder by themselves

# Colour words the cell functions use, read as the theme's: a light theme gets readable
# cells and a dark one the colours it chose.
TONES = {
    "bright_black": "rowtable--muted",
    "green": "rowtable--success",
    "red": "rowtable--error",
    "yellow": "rowtable--warning",
    "cyan": "rowtable--accent",
    "magenta": "rowtable--secondary",
}


class RowTable(ScrollView, can_focus=True):
    """Rows from a source, a cursor on a row key, a sticky header line; scrolls with keys
    and mouse; a click on a header posts `HeaderClicked`."""

    COMPONENT_CLASSES = {
        "rowtable--header",
        "rowtable--cursor",
        "rowtable--muted",
        "rowtable--success",
        "rowtable--error",
        "rowtable--warning",
        "rowtable--accent",
        "rowtable--secondary",
    }

    DEFAULT_CSS = """
    RowTable {
        background: $surface;
        color: $foreground;
        & > .rowtable--header { background: $panel; color: $foreground; text-style: bold; }
        & > .rowtable--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
        }
        &:focus > .rowtable--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
        }
        & > .rowtable--muted { color: $text-muted; }
        & > .rowtable--success { color: $text-success; }
        & > .rowtable--error { color: $text-error; }
        & > .rowtable--warning { color: $text-warning; }
        & > .rowtable--accent { color: $text-accent; }
        & > .rowtable--secondary { color: $text-secondary; }
    }
    """

    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False),
        Binding("down,j", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "jump(0)", "Top", show=False),
        Binding("end", "jump(-1)", "Bottom", show=False),
    ]

    class HeaderClicked(Message):
        """A column title was clicked (the app sorts by it, where it can)."""

        def __init__(self, table: RowTable, column_title: str) -> None:
            super().__init__()
            self.table = table
            self.column_title = column_title

        @property
        def control(self) -> RowTable:
            return self.table

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
        self._cursor = 0
        self._key: Hashable | None = None
        self._picked = False  # a row was picked (keys, click, select) since the pane was left
        self._layout: list[tuple[int, int]] = []  # (column index, width)
        self._laid_for: tuple[int, str | None] | None = None
        self._wanted: dict[int, int] = {}  # flexible column: widest content painted
        self._painted: dict[int, tuple[int, list[Cell] | None]] = {}  # line: (row, cells)
        self._styles: dict[tuple[str, bool], Style] = {}
        self.empty_text = ""  # said on the first line when there is no row (what to do)
        self._brief: Timer | None = None  # holds the order a moment after a key

    # ---- selection -------------------------------------------------------------------

    @property
    def cursor(self) -> int:
        return self._cursor

    @cursor.setter
    def cursor(self, index: int) -> None:
        self.move_to(index)

    @property
    def selected_key(self) -> Hashable | None:
        """The key of the selected row (task id, occurrence id), None with no rows."""
        return self._key

    def select_key(self, key: Hashable) -> bool:
        """Put the cursor on the row with `key`; False (nothing moves) if no row has it."""
        index = self.source.index_of(key)
        if index is None:
            return False
        self.move_to(index)
        return True

    def move_to(self, index: int) -> None:
        """The cursor on row `index`. Off the top row the source holds its order (rows do
        not move under a cursor the user moved); back on the top row it resumes."""
        self._picked = True
        count = len(self.source)
        old = self._cursor
        self._cursor = max(0, min(index, count - 1)) if count else 0
        if self.source.hold(self._cursor != 0 or self._brief is not None):
            self.refresh()  # released: the rows took their order
        self._key = self.source.key_at(self._cursor) if count else None
        self._scroll_to_cursor()
        if old != self._cursor:
            self.refresh_row(old)
            self.refresh_row(self._cursor)

    def hold_briefly(self, seconds: float = HOLD_AFTER_KEY) -> None:
        """A key was pressed: the order holds a moment even on the top row, so a key that
        changes the selected row (e, r) leaves it under the cursor for the next key."""
        self.source.hold(True)
        if self._brief is not None:
            self._brief.stop()
        self._brief = self.set_timer(seconds, self._brief_over)

    def _brief_over(self) -> None:
        self._brief = None
        if self._cursor == 0 and self.source.hold(False):
            self.sync_size()

    def show_top(self) -> None:
        """The cursor and the view on the first row, as for a pane nobody picked a row in
        (a new filter starts at the newest rows, not deep in the old ones)."""
        self._picked = False
        self._cursor = 0
        if self.source.hold(False):
            self.refresh()
        self._key = self.source.key_at(0) if len(self.source) else None
        if self.is_mounted:
            self.scroll_to(y=0, animate=False, immediate=True)
        self.sync_size()

    def _scroll_to_cursor(self) -> None:
        if not self.is_mounted:
            return
        top = self.scroll_offset.y
        visible = max(1, self.size.height - 1)
        if self._cursor < top:
            self.scroll_to(y=self._cursor, animate=False, immediate=True)
        elif self._cursor >= top + visible:
            self.scroll_to(y=self._cursor - visible + 1, animate=False, immediate=True)

    # ---- geometry --------------------------------------------------------------------

    @property
    def _width(self) -> int:
        """The cells left of the vertical scrollbar, when it shows."""
        return self.scrollable_content_region.width

    def sync_size(self) -> None:
        """Call after rows are added, removed or reordered: the virtual height follows the
        source and the cursor its row's key (or, if that row went, the row now in its
        place). The selected row keeps its line on screen, unless the view was at the top
        and it still fits there (then rows added on top show)."""
        count = len(self.source)
        self.virtual_size = Size(0, count + 1)  # no horizontal scrolling
        # A pane nobody is in, its cursor on the top row: it shows the newest rows (as a
        # log does) rather than keep a row nobody picked while newer ones push it away.
        # A table whose order moves by itself keeps a cursor on its top row there too.
        watching = (
            self._cursor == 0
            and self.scroll_offset.y == 0
            and ((not self.has_focus and not self._picked) or self.source.reorders())
        )
        index = self.source.index_of(self._key) if self._key is not None and not watching else None
        if index is None:
            index = max(0, min(self._cursor, count - 1)) if count else 0
        if self.is_mounted:
            top = self.scroll_offset.y
            visible = max(1, self.size.height - 1)
            line = self._cursor - top
            if top == 0 and index < visible:
                target = 0
            else:
                target = max(0, index - max(0, min(line, visible - 1)))
            if target != top:
                self.scroll_to(y=target, animate=False, immediate=True)
        self._cursor = index
        self._key = self.source.key_at(index) if count else None
        self._scroll_to_cursor()
        self._laid_for = None  # the sort arrow may have moved
        self.refresh()

    def on_resize(self) -> None:
        self.sync_size()

    def set_columns(self, columns: list[Column]) -> None:
        """Show another set of columns (the source's cells follow the same list): laid out
        and measured again, every line repainted."""
        if columns == self.columns:
            return
        self.columns = columns
        self._wanted = {}
        self._laid_for = None
        self._painted = {}
        self.refresh()

    def say_when_empty(self, text: str) -> None:
        """What the first line says while there is no row; repainted when it changes."""
        if text != self.empty_text:
            self.empty_text = text
            self.refresh()

    def shown_titles(self) -> list[str]:
        """The titles of the columns this width shows, left to right."""
        return [self.columns[i].title for i, _ in self._columns_for(self._width)]

    def _columns_for(self, width: int) -> list[tuple[int, int]]:
        sort = self.source.sort
        sorted_title = sort[0] if sort else None
        if self._laid_for != (width, sorted_title):
            self._layout = layout_columns(self.columns, width, self._wanted, sorted_title)
            self._laid_for = (width, sorted_title)
        return self._layout

    def _measure(self, cells: list[Cell], layout: list[tuple[int, int]]) -> None:
        """Note the widest content painted in each flexible column; when it grows, lay out
        again (it only grows, so this settles after the first screens)."""
        grew = False
        wanted = self._wanted
        for i, w in layout:
            if self.columns[i].flex:
                size = cell_len(cells[i][0])
                if size > wanted.get(i, -1):
                    wanted[i] = size
                    grew = grew or size > w or w > self.columns[i].min
        if grew:
            self._laid_for = None
            self.call_later(self.refresh)

    # ---- styles ----------------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles.clear()
        self.refresh()

    def _cell_style(self, spec: str, selected: bool) -> Style:
        """A cell's style in the theme: its colour word as the theme's tone, on the row's
        background (the cursor's on the selected row, whose colours win there)."""
        style = self._styles.get((spec, selected))
        if style is None:
            base = (
                self.get_component_rich_style("rowtable--cursor") if selected else self.rich_style
            )
            extra = Style()
            for word in spec.split():
                tone = TONES.get(word)
                if tone is not None:
                    if not selected:
                        extra += Style(color=self.get_component_rich_style(tone).color)
                else:
                    try:
                        extra += Style.parse(word)
                    except Exception:
                        continue
            if selected:
                extra = Style(bold=extra.bold, italic=extra.italic)
            style = self._styles[(spec, selected)] = base + extra
        return style

    # ---- painting --------------------------------------------------------------------

    def _header(self, width: int, layout: list[tuple[int, int]]) -> Strip:
        style = self.get_component_rich_style("rowtable--header")
        titles = header_row(self.columns, layout, self.source.sort)
        return Strip([Segment(fit(titles, width), style)], width)

    def render_line(self, y: int) -> Strip:
        width = self._width
        layout = self._columns_for(width)
        if y == 0:
            return self._header(width, layout)
        index = self.scroll_offset.y + y - 1
        cells = self.source.cells(index, self.now()) if index < len(self.source) else None
        self._painted[y] = (index, cells)
        if cells is None:
            if y == 1 and self.empty_text and not len(self.source):
                style = self._cell_style("bright_black", False)
                return Strip([Segment(fit(" " + self.empty_text, width), style)], width)
            return Strip.blank(width, self.rich_style)
        self._measure(cells, layout)
        selected = index == self._cursor
        segments = [
            Segment(text, self._cell_style(spec, selected))
            for text, spec in fit_row(self.columns, layout, cells)
        ]
        used = sum(w for _, w in layout) + len(layout) - 1
        if used < width:
            segments.append(Segment(" " * (width - used), self._cell_style("", selected)))
        return Strip(segments).crop(0, width)

    def refresh_row(self, index: int) -> None:
        """Repaint one row if it is on screen."""
        line = index - self.scroll_offset.y + 1
        if 1 <= line < self.size.height:
            self.refresh(Region(0, line, self.size.width, 1))

    def refresh_changed(self) -> None:
        """Time moved (countdowns, durations): repaint only the cells on screen whose text or
        style is no longer what was painted. A row that reads the same is not touched.
        Rows added, gone or moved without a `sync_size` are caught here too."""
        source = self.source
        if len(source) + 1 != self.virtual_size.height or (
            self._key is not None and source.key_at(self._cursor) != self._key
        ):
            self.sync_size()
            return
        width = self._width
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

    # ---- keys and mouse --------------------------------------------------------------

    def action_cursor(self, step: int) -> None:
        self.move_to(self._cursor + step)

    def action_page(self, direction: int) -> None:
        self.move_to(self._cursor + direction * max(1, self.size.height - 2))

    def action_jump(self, where: int) -> None:
        if where == 0 and self._brief is not None:  # home: the order resumes now
            self._brief.stop()
            self._brief = None
        self.move_to(len(self.source) - 1 if where < 0 else 0)

    def column_at(self, x: int) -> str | None:
        """The title of the column under screen column `x`, if any."""
        left = 0
        for i, w in self._columns_for(self._width):
            if left <= x < left + w + 1:
                return self.columns[i].title
            left += w + 1
        return None

    def on_click(self, event: Click) -> None:
        if event.y == 0:
            title = self.column_at(event.x)
            if title is not None:
                self.post_message(self.HeaderClicked(self, title))
        elif event.y >= 1:
            self.move_to(self.scroll_offset.y + event.y - 1)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self._picked = False  # left: its top row follows the newest again
        self.refresh()

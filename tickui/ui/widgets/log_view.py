"""The log view: a `ScrollView` drawing with `render_line` (as Toolong does) that asks the
index only for the lines on screen, keeps a small cache of them, and shows every line
through `safe_text`."""

from __future__ import annotations

from collections import OrderedDict

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from tickui.common.redact import safe_text
from tickui.ui.log_index import LineIndex

LINE_CACHE = 1024  # lines kept drawn, for scrolling back and forth


class LogView(ScrollView, can_focus=True):
    """A file's lines, drawn from the index a screenful at a time."""

    BINDINGS = [
        Binding("up,k", "scroll_up", "Up", show=False),
        Binding("down,j", "scroll_down", "Down", show=False),
        Binding("home,g", "top", "Top", key_display="g"),
        Binding("end,G", "bottom", "Bottom", key_display="G"),
        Binding("pageup,b", "page_up", "Page up", show=False),
        Binding("pagedown,space", "page_down", "Page down", show=False),
        Binding("right,l", "sideways(8)", "Right", show=False),
        Binding("left,h", "sideways(-8)", "Left", show=False),
    ]
    SIDEWAYS_MARK = "…"  # a line that goes on past an edge of the view ends (or starts) in it

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.index: LineIndex | None = None
        self.lines: OrderedDict[int, str] = OrderedDict()
        self.query_text = ""
        self.match: int | None = None
        self.widest = 0

    def set_index(self, index: LineIndex | None) -> None:
        self.index = index
        self.lines.clear()
        self.sync_size()

    def forget(self, first: int) -> None:
        """Lines from `first` on may have changed (they were read while partial)."""
        for line in [n for n in self.lines if n >= first]:
            del self.lines[line]

    @property
    def count(self) -> int:
        return self.index.lines if self.index is not None else 0

    @property
    def number_width(self) -> int:
        return len(str(max(1, self.count))) + 1

    def sync_size(self) -> None:
        self.virtual_size = Size(self.number_width + self.widest, self.count)
        self.refresh()

    def text(self, line: int) -> str:
        cached = self.lines.get(line)
        if cached is None:
            assert self.index is not None
            try:
                cached = self.index.text(line)
            except OSError as exc:
                cached = safe_text(f"[cannot read: {exc.strerror or exc}]")
            self.lines[line] = cached
            while len(self.lines) > LINE_CACHE:
                self.lines.popitem(last=False)
        else:
            self.lines.move_to_end(line)
        return cached

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        line = self.scroll_offset.y + y
        if line >= self.count:
            return Strip.blank(width)
        text = self.text(line)
        numbers = self.number_width
        length = cell_len(text)
        if length > self.widest:
            self.widest = length
            self.call_later(self.sync_size)
        number = Segment(f"{line + 1:>{numbers - 1}} ", Style(dim=True))
        body = Text(text, style="bold" if line == self.match else "")
        if self.query_text:
            body.highlight_words(
                [self.query_text],
                "reverse",
                case_sensitive=self.query_text != self.query_text.lower(),
            )
        segments = list(body.render(self.app.console))
        left, room = self.scroll_offset.x, width - numbers
        strip = Strip(segments).crop(left, left + room)
        mark = Style(dim=True, bold=True)
        if left + room < length and room > 1:  # more of this line to the right
            strip = Strip([*strip.crop(0, room - 1), Segment(self.SIDEWAYS_MARK, mark)])
        if left > 0 and length > left and room > 1:  # and to the left
            strip = Strip([Segment(self.SIDEWAYS_MARK, mark), *strip.crop(1, room)])
        return Strip([number, *strip]).adjust_cell_length(width)

    def action_sideways(self, step: int) -> None:
        """Long lines: scroll a few columns at a time (the ends show "…" while cut)."""
        self.scroll_to(x=max(0, self.scroll_offset.x + step), animate=False, immediate=True)

    def visible_range(self) -> tuple[int, int]:
        top = self.scroll_offset.y
        return top, min(self.count, top + self.scrollable_content_region.height)

    def action_top(self) -> None:
        self.scroll_home(animate=False, immediate=True)
        self.post_message(Moved(up=True))

    def action_bottom(self) -> None:
        self.scroll_end(animate=False, immediate=True)
        self.post_message(Moved(up=False))

    def action_scroll_up(self) -> None:
        super().action_scroll_up()
        self.post_message(Moved(up=True))

    def action_page_up(self) -> None:
        super().action_page_up()
        self.post_message(Moved(up=True))

    def show_line(self, line: int) -> None:
        height = self.scrollable_content_region.height
        self.scroll_to(y=max(0, line - height // 3), animate=False, immediate=True)

    def on_mouse_scroll_up(self) -> None:
        self.post_message(Moved(up=True))


class Moved(Message):
    """The user moved in the log (up stops following)."""

    def __init__(self, up: bool) -> None:
        super().__init__()
        self.up = up


# ---- the screen -----------------------------------------------------------------------

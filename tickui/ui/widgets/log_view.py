"""The log view: a `ScrollView` drawing with `render_line` (as Toolong does) that asks the
index only for the lines on screen, keeps a small cache of them, and shows every line
as `view.ansi.shown_line` makes it (its colours as styles, everything else made safe).
It holds its place as lines arrive unless it follows them (as `less +F`): a move up
stops following, `G` (or the screen's `f`) resumes it."""

from __future__ import annotations

from collections import OrderedDict

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.scrollbar import ScrollTo, ScrollUp
from textual.strip import Strip

from tickui.common.redact import safe_text
from tickui.ui.log_index import LineIndex, Search

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
        self.lines: OrderedDict[int, Text] = OrderedDict()
        self.search: Search | None = None
        self.match: int | None = None  # the line of the current match
        self.marked: int | None = None  # the line `y` copies: the match or a clicked line
        self.follow = False  # new lines scroll the view to them
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
        """The index grew (or shrank): the view keeps its lines unless it follows."""
        self.virtual_size = Size(self.number_width + self.widest, self.count)
        if self.follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()

    def text(self, line: int) -> str:
        """A line's shown text (what a search matches and `y` copies)."""
        return self.styled(line).plain

    def styled(self, line: int) -> Text:
        cached = self.lines.get(line)
        if cached is None:
            assert self.index is not None
            try:
                cached = self.index.shown(line)
            except OSError as exc:
                cached = Text(safe_text(f"[cannot read: {exc.strerror or exc}]"))
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
        shown = self.styled(line)
        numbers = self.number_width
        length = shown.cell_len
        if length > self.widest:
            self.widest = length
            self.call_later(self.sync_size)
        number = Segment(f"{line + 1:>{numbers - 1}} ", Style(dim=True))
        body = shown.copy()
        if line == self.marked:
            body.style = "bold"
        if self.search is not None:
            body.highlight_regex(self.search.regex, "reverse")
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

    def set_follow(self, follow: bool) -> None:
        """Follow new lines (from the last one) or hold still; the screen hears of it."""
        self.follow = follow
        if follow:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.post_message(Moved(following=follow))

    def action_top(self) -> None:
        self.set_follow(False)
        self.scroll_home(animate=False, immediate=True, x_axis=False)

    def action_bottom(self) -> None:
        self.set_follow(True)  # as `less`'s F: the end, and what comes after it

    # moves are not animated: the lines a key leaves in view are there at once, as in less

    def action_scroll_up(self) -> None:
        self.set_follow(False)
        self.scroll_up(animate=False, immediate=True)

    def action_scroll_down(self) -> None:
        self.scroll_down(animate=False, immediate=True)

    def action_page_up(self) -> None:
        self.set_follow(False)
        self.scroll_page_up(animate=False)

    def action_page_down(self) -> None:
        self.scroll_page_down(animate=False)

    def show_line(self, line: int) -> None:
        """Bring `line` into view a third of the way down (a search found it): the view
        holds there."""
        self.follow = False
        height = self.scrollable_content_region.height
        self.scroll_to(y=max(0, line - height // 3), animate=False, immediate=True)

    def _on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        if not (event.ctrl or event.shift):
            self.set_follow(False)
        super()._on_mouse_scroll_up(event)

    def _on_scroll_to(self, message: ScrollTo) -> None:  # the scrollbar dragged or clicked
        if message.y is not None and message.y < self.scroll_offset.y:
            self.set_follow(False)
        super()._on_scroll_to(message)

    def _on_scroll_up(self, event: ScrollUp) -> None:  # a click on the scrollbar above its thumb
        self.set_follow(False)
        super()._on_scroll_up(event)

    def on_click(self, event: events.Click) -> None:
        """A click marks its line (bold): `y` copies it."""
        offset = event.get_content_offset(self)
        if offset is None:
            return
        line = self.scroll_offset.y + offset.y
        if line < self.count:
            self.marked = line
            self.refresh()

    def marked_text(self) -> str | None:
        """The marked line as shown (made safe), for the clipboard."""
        if self.marked is None or self.index is None or self.marked >= self.count:
            return None
        return self.text(self.marked)


class Moved(Message):
    """A key (or the wheel, or the scrollbar) moved the view: it follows or holds still."""

    def __init__(self, following: bool) -> None:
        super().__init__()
        self.following = following

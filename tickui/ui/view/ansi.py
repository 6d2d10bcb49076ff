"""A run's output line as the run view and the pager show it: its SGR sequences (`ESC [
... m`: colours, bold, dim, italic, underline, reverse, reset) become styles, everything
else is made safe as every text tickui shows (`safe_text`: secrets hidden, every other
control sequence or character escaped, so output never moves the cursor, sets the
title or hides text). The one place that decides what of a log line reaches the screen.

Styles hold within a line: every line starts unstyled (a line can be shown without
reading the ones before it). Conceal (SGR 8) and blinking are dropped, and a foreground
the same as the background loses the background, so no style hides text. A line whose
visible text holds a secret is shown redacted and without styles."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

from rich.color import Color, ColorSystem
from rich.style import Style
from rich.text import Text

from tickui.common.redact import printable, safe_text, secret_markers

ESC = "\x1b"
# Only a CSI with digits, `;` and `:` ending in `m` is SGR; any other byte (`?`, `>`, a
# space, another final) makes it something else, shown escaped.
SGR = re.compile(r"\x1b\[([0-9;:]*)m")
SGR_BYTES = re.compile(rb"\x1b\[[0-9;:]*m")  # the same in UTF-8 bytes
MAX_PARAMS = 64  # parameters of one sequence looked at; the rest are ignored
TAB = 8


@dataclass(frozen=True)
class Pen:
    """The style SGR parameters have set so far."""

    fg: Color | None = None
    bg: Color | None = None
    bold: bool = False
    dim: bool = False
    italic: bool = False
    underline: bool = False
    reverse: bool = False
    strike: bool = False

    def style(self) -> Style | None:
        if self == PLAIN:
            return None
        bg = self.bg
        if bg is not None and self.fg is not None and self.fg.get_truecolor() == bg.get_truecolor():
            bg = None  # fg on the same bg would hide the text
        return Style(
            color=self.fg,
            bgcolor=bg,
            bold=self.bold or None,
            dim=self.dim or None,
            italic=self.italic or None,
            underline=self.underline or None,
            reverse=self.reverse or None,
            strike=self.strike or None,
        )


PLAIN = Pen()


def _number(text: str) -> int:
    """A parameter's value: empty is 0 (ECMA-48); anything unreasonable -1 (ignored)."""
    if not text:
        return 0
    if len(text) > 6 or not text.isdigit():
        return -1
    return int(text)


def _colour(values: list[int]) -> tuple[Color | None, int]:
    """The colour after a 38 or 48 (`5;N` or `2;R;G;B`) and how many values it took."""
    if not values:
        return None, 0
    if values[0] == 5:
        if len(values) < 2:
            return None, len(values)
        n = values[1]
        return (Color.from_ansi(n) if 0 <= n <= 255 else None), 2
    if values[0] == 2:
        if len(values) < 4:
            return None, len(values)
        rgb = values[1:4]
        if all(0 <= v <= 255 for v in rgb):
            return Color.from_rgb(*rgb), 4
        return None, 4
    return None, 1


def _sub_colour(parts: list[str]) -> Color | None:
    """`38:5:N`, `38:2:R:G:B` or `38:2:CS:R:G:B` (colon sub-parameters, ITU T.416)."""
    values = [_number(p) for p in parts[1:]]
    if len(values) >= 5 and values[0] == 2:
        values = [2, *values[2:5]]  # the colour space id is skipped
    colour, _ = _colour(values)
    return colour


def apply_sgr(pen: Pen, params: str) -> Pen:
    """The pen after one SGR sequence's parameters (the text between `ESC [` and `m`)."""
    fields = params.split(";", MAX_PARAMS)[:MAX_PARAMS]
    i = 0
    while i < len(fields):
        field = fields[i]
        i += 1
        if ":" in field:
            parts = field.split(":", 8)
            head = _number(parts[0])
            if head in (38, 48):
                colour = _sub_colour(parts)
                if colour is not None:
                    pen = replace(pen, **{"fg" if head == 38 else "bg": colour})
            elif head == 4:
                pen = replace(pen, underline=_number(parts[1]) != 0)
            continue
        code = _number(field)
        if code == 0:
            pen = PLAIN
        elif code in (38, 48):
            colour, used = _colour([_number(f) for f in fields[i : i + 5]])
            i += used
            if colour is not None:
                pen = replace(pen, **{"fg" if code == 38 else "bg": colour})
        elif code in _SET:
            pen = replace(pen, **_SET[code])
        elif 30 <= code <= 37:
            pen = replace(pen, fg=Color.from_ansi(code - 30))
        elif 40 <= code <= 47:
            pen = replace(pen, bg=Color.from_ansi(code - 40))
        elif 90 <= code <= 97:
            pen = replace(pen, fg=Color.from_ansi(code - 90 + 8))
        elif 100 <= code <= 107:
            pen = replace(pen, bg=Color.from_ansi(code - 100 + 8))
        # anything else (conceal 8, blink 5 and 6, fonts, -1 for junk) is ignored
    return pen


_SET: dict[int, dict[str, object]] = {
    1: {"bold": True}, 2: {"dim": True}, 3: {"italic": True}, 4: {"underline": True},
    7: {"reverse": True}, 9: {"strike": True}, 21: {"underline": True},
    22: {"bold": False, "dim": False}, 23: {"italic": False}, 24: {"underline": False},
    27: {"reverse": False}, 29: {"strike": False}, 39: {"fg": None}, 49: {"bg": None},
}  # fmt: skip


def split_sgr(raw: str) -> Iterator[tuple[str, Pen]]:
    """The text of `raw` between its SGR sequences, each piece with the pen it is drawn
    with (empty pieces left out). Every other character, escapes included, is text."""
    pen, at = PLAIN, 0
    for match in SGR.finditer(raw):
        if match.start() > at:
            yield raw[at : match.start()], pen
        pen = apply_sgr(pen, match[1])
        at = match.end()
    if at < len(raw):
        yield raw[at:], pen


_COLUMN_BREAK = re.compile(r"([\t\r\n])")


def _expand_from(piece: str, column: int) -> tuple[str, int]:
    """`piece` with its tabs expanded as if it started at `column`, and the column after
    it (as str.expandtabs counts: characters, from 0 again after `\\r` or `\\n`)."""
    if not _COLUMN_BREAK.search(piece):
        return piece, column + len(piece)
    out: list[str] = []
    for token in _COLUMN_BREAK.split(piece):
        if token == "\t":
            pad = TAB - column % TAB
            out.append(" " * pad)
            column += pad
        else:
            out.append(token)
            column = 0 if token in ("\r", "\n") else column + len(token)
    return "".join(out), column


def shown_line(raw: str) -> Text:
    """A line of output (without its newline) as the run view shows it: styled by its
    SGR sequences, every other control made visible, secrets hidden, tabs expanded and
    the `\\r`s that end its visible text dropped. Its `plain` is what a search matches
    and what `y` copies."""
    if ESC not in raw:
        return Text(_safe(raw.rstrip("\r").expandtabs(TAB)))
    return _styled(raw, view=True)


def _safe(text: str) -> str:
    """`safe_text(text)`, redacting only a line that holds a secret's marker (any other
    is left as it is by redact): most lines of a log hold none."""
    lowered = text.lower()
    if any(marker.lower() in lowered for marker in secret_markers()):
        return safe_text(text)
    return printable(text)


def _styled(raw: str, view: bool) -> Text:
    """The pieces of `raw` between its SGR sequences, made safe and styled; for the
    `view`, its tabs expanded and the `\\r`s that end it dropped."""
    pieces = list(split_sgr(raw))
    while view and pieces and pieces[-1][0].endswith("\r"):
        piece, pen = pieces.pop()
        if piece.rstrip("\r"):
            pieces.append((piece.rstrip("\r"), pen))
            break
    if view:
        column = 0
        for n, (piece, pen) in enumerate(pieces):
            expanded, column = _expand_from(piece, column)
            pieces[n] = (expanded, pen)
    visible = "".join(piece for piece, _ in pieces)
    shown = _safe(visible)
    if shown != printable(visible):  # a secret: hidden, and the line shown plain
        return Text(shown)
    text = Text()
    for piece, pen in pieces:
        text.append(printable(piece), pen.style())
    return text


def shown_plain(raw: str) -> str:
    """The text of `shown_line(raw)`, without building it: what a search of the output
    matches. The SGR sequences go; the visible text is made safe as a whole (escaping is
    character by character, so it is the same as escaping each piece)."""
    return shown_visible(SGR.sub("", raw) if ESC in raw else raw)


def shown_visible(visible: str) -> str:
    """`shown_plain` of a line whose SGR sequences `without_sgr` has taken out already
    (taking them out again could join what is left into a new one)."""
    return _safe(visible.rstrip("\r").expandtabs(TAB))


def without_sgr(data: bytes) -> bytes:
    """Bytes of output without their SGR sequences (which hold no newline: every line
    stays where it was): what a search looks through, as the view shows no SGR."""
    return SGR_BYTES.sub(b"", data) if b"\x1b[" in data else data


def paged_line(raw: str) -> str:
    """A line as the pager gets it: made safe as the run view makes it (its tabs and
    `\\r` left to the pager, escaped as before), its styles written again as SGR
    sequences, so `less -R` shows the colours and nothing else raw."""
    if ESC not in raw:
        return _safe(raw)
    out: list[str] = []
    for piece, style in _runs(_styled(raw, view=False)):
        out.append(style.render(piece, color_system=ColorSystem.TRUECOLOR) if style else piece)
    return "".join(out)


def _runs(text: Text) -> Iterator[tuple[str, Style | None]]:
    """The pieces of `text` with their styles (spans do not overlap here)."""
    plain, at = text.plain, 0
    for span in sorted(text.spans, key=lambda s: s.start):
        if span.start > at:
            yield plain[at : span.start], None
        style = span.style if isinstance(span.style, Style) else Style.parse(span.style)
        yield plain[span.start : span.end], style
        at = span.end
    if at < len(plain):
        yield plain[at:], None

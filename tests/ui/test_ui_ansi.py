"""A run's output line as the run view and the pager show it (ui/view/ansi.py): SGR
sequences become styles, every other control stays escaped, no style hides text."""

from __future__ import annotations

import pytest
from rich.color import Color
from rich.style import Style

from tickui.ui.view.ansi import (
    Pen,
    apply_sgr,
    paged_line,
    shown_line,
    shown_plain,
    shown_visible,
    split_sgr,
    without_sgr,
)


def styles(raw: str) -> list[tuple[str, Style | None]]:
    """The shown line's pieces with their styles."""
    text = shown_line(raw)
    out, at = [], 0
    for span in text.spans:
        if span.start > at:
            out.append((text.plain[at : span.start], None))
        out.append((text.plain[span.start : span.end], span.style))
        at = span.end
    if at < len(text.plain):
        out.append((text.plain[at:], None))
    return out


def test_a_colour_is_a_style_and_a_title_sequence_stays_escaped() -> None:
    text = shown_line("\x1b[31mred\x1b[0m \x1b]0;title\x07done")
    assert text.plain == "red \\x1b]0;title\\x07done"
    assert styles("\x1b[31mred\x1b[0m \x1b]0;title\x07done")[0] == ("red", Style(color="color(1)"))
    assert [s for _, s in styles("\x1b[31mred\x1b[0m \x1b]0;title\x07done")[1:]] == [None]


@pytest.mark.parametrize(
    "raw",
    [
        "\x1b[2J", "\x1b[H", "\x1b[10;20H", "\x1b[?25l", "\x1b[?1049h", "\x1b[K", "\x1b[3A",
        "\x1b]0;title\x07", "\x1b]8;;http://x\x1b\\", "\x1bc", "\x1b", "\x1b[", "\x1b[31",
        "\x1b[31;", "\x1b[>4m", "\x1b[ m", "\x1b[1;2;3 m", "\x9b31m", "\x07", "\x08", "\r",
        "\x1b[31\x1b]0;t\x07m", "\u202e", "\x1bP1;2q\x1b\\",
    ],
)  # fmt: skip
def test_every_other_control_is_shown_escaped_as_before(raw: str) -> None:
    from tickui.common.redact import safe_text

    line = f"a{raw}b"
    shown = shown_line(line)
    assert shown.plain == safe_text(line)  # exactly as every other text is made safe
    assert not any(ch in shown.plain for ch in "\x1b\x07\x08\r\x9b\u202e")
    assert not shown.spans
    assert paged_line(line) == safe_text(line)


def test_sgr_is_split_from_the_text_around_it() -> None:
    pieces = list(split_sgr("a\x1b[1mb\x1b[mc\x1b[2Jd"))
    assert [p for p, _ in pieces] == ["a", "b", "c\x1b[2Jd"]
    assert pieces[1][1].bold and not pieces[2][1].bold  # an empty SGR resets


def test_256_and_truecolour_foreground_and_background() -> None:
    pen = apply_sgr(apply_sgr(apply_sgr(apply_sgr(Pen(), "38;5;196"), "48;2;1;2;3"), "1"), "4")
    assert pen.fg == Color.from_ansi(196) and pen.bg == Color.from_rgb(1, 2, 3)
    assert pen.bold and pen.underline
    colon = apply_sgr(Pen(), "38:2::10:20:30;48:5:21")
    assert colon.fg == Color.from_rgb(10, 20, 30) and colon.bg == Color.from_ansi(21)
    bright = apply_sgr(Pen(), "91;104;2;3;7;9")
    assert bright.fg == Color.from_ansi(9) and bright.bg == Color.from_ansi(12)
    assert bright.dim and bright.italic and bright.reverse and bright.strike
    off = apply_sgr(bright, "22;23;24;27;29;39;49")
    assert off == Pen()


@pytest.mark.parametrize(
    "params",
    ["38;5", "38;5;256", "38;2;1;2", "38;2;300;0;0", "38", "48;9;1", "38;5;" + "9" * 5000,
     "99999999999999999999", ":::", "38:5", "38:2:1"],
)  # fmt: skip
def test_a_truncated_or_bad_colour_is_ignored(params: str) -> None:
    pen = apply_sgr(Pen(), params)
    assert pen.fg is None and pen.bg is None
    assert shown_line(f"\x1b[{params}mtext").plain == "text"


def test_a_huge_parameter_list_is_read_only_so_far() -> None:
    huge = "\x1b[" + "1;" * 200_000 + "31mtext"
    assert shown_plain(huge) == "text"
    pen = apply_sgr(Pen(), "1;" * 200_000 + "31")
    assert pen.bold and pen.fg is None  # the 31 lies past the parameters looked at
    long_line = ("\x1b[32mgo\x1b[0m " * 20_000).strip()
    assert shown_plain(long_line) == ("go " * 20_000).strip()


def test_no_style_hides_text() -> None:
    assert styles("\x1b[8mconceal") == [("conceal", None)]  # conceal dropped
    assert styles("\x1b[5;6mblink") == [("blink", None)]
    (_, same), = styles("\x1b[31;41mhidden")  # fmt: skip
    assert same.color == Color.from_ansi(1) and same.bgcolor is None
    (_, truecolour), = styles("\x1b[38;2;255;0;0;48;5;196mhidden")  # fmt: skip
    assert truecolour.bgcolor is None  # the same colour written two ways
    (_, apart), = styles("\x1b[31;42mshown")  # fmt: skip
    assert apart.bgcolor == Color.from_ansi(2)


def test_tabs_are_expanded_over_the_visible_text() -> None:
    assert shown_plain("a\x1b[1m\tb\x1b[0m\tc") == "a\tb\tc".expandtabs(8)
    assert shown_plain("\x1b[1m\r") == "" and shown_plain("x\x1b[31m\r") == "x"


def test_a_secret_is_hidden_even_across_colours() -> None:
    text = shown_line("\x1b[1mpassword\x1b[0m=hunter2 \x1b[2J")
    assert "hunter2" not in text.plain and "password=***" in text.plain
    assert "\\x1b[2J" in text.plain
    assert "hunter2" not in paged_line("\x1b[1mpassword\x1b[0m=hunter2")


def test_the_pager_gets_the_colours_again_as_sgr() -> None:
    paged = paged_line("\x1b[1;31mred\x1b[0m\x1b[8m plain\x1b]0;t\x07\tx\r")
    assert paged == "\x1b[1;31mred\x1b[0m plain\\x1b]0;t\\x07\\x09x\\x0d"
    assert paged_line("\x1b[38;5;196mx") == "\x1b[38;5;196mx\x1b[0m"
    assert paged_line("\x1b[48;2;1;2;3mx") == "\x1b[48;2;1;2;3mx\x1b[0m"
    assert paged_line("plain\tline\r") == "plain\\x09line\\x0d"  # as before


def test_the_searched_text_is_the_shown_text() -> None:
    """shown_plain (what search matches, built without styles) is shown_line's text for
    lines of colours, escapes, tabs, secrets and junk mixed at random; so is the text
    search sees once it has taken the SGR sequences out of the bytes (what is left of
    `\\x1b[\\x1b[1m5m` is not taken for a colour a second time)."""
    import random

    parts = ["\x1b[31m", "\x1b[0m", "\x1b[38;5;9m", "\x1b[2J", "\x1b]0;t\x07", "\t", "\r",
             "\x1b", "a", "bc ", "password=", "hunter2", "redis://u:pw@h", "é", "\u202e",
             "\x1b[1;4m", "\x1b[", "m", "5;", "\x9b"]  # fmt: skip
    rng = random.Random(7)
    for _ in range(3000):
        raw = "".join(rng.choice(parts) for _ in range(rng.randrange(12)))
        assert shown_plain(raw) == shown_line(raw).plain, repr(raw)
        # as search reads it: the SGR sequences taken out of the bytes first
        assert shown_visible(without_sgr(raw.encode()).decode()) == shown_plain(raw), repr(raw)
        assert "password=hunter2" not in shown_plain(raw)  # a secret is never shown

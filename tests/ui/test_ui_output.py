"""The run output view: that run's facts and its whole output, of any size (real SQLite,
manual clock, real runs and real log files)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import psutil
import pytest
from rich.color import Color

from helpers import T0
from tickui.common.clock import ManualClock
from tickui.model.spec import build_spec
from tickui.ui import sample
from tickui.ui.log_index import LineIndex, Search
from tickui.ui.screens.detail import DetailScreen
from tickui.ui.screens.run import RunScreen
from ui_support import notes, screen_text, until

SIZE = (140, 40)
ANCHOR = "2027-01-15T08:00:30Z"  # nothing is due until a test says so


async def run_once(pilot, name: str = "alpha"):
    """Run `name` now and wait for it to finish; its occurrence."""
    app = pilot.app
    before = {o.id for o in await app.host.store.history(name)}
    occ = await app.host.engine.run_now(name)
    assert occ.id not in before
    await until(
        pilot, lambda: (o := app.board.occ_rows.by_id.get(occ.id)) is not None and not o.active
    )
    return app.board.occ_rows.by_id[occ.id]


async def open_from_occurrences(pilot, occ) -> RunScreen:
    app = pilot.app
    app.board.occ_table.focus()
    app.board.occ_table.move_to(app.board.occ_rows.index_of(occ.id))
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, RunScreen))
    screen = app.screen
    await until(pilot, lambda: screen.indexed)
    return screen


def lines_shown(app) -> str:
    return screen_text(app)


async def test_enter_on_an_occurrence_opens_that_run_not_the_newest(dashboard) -> None:
    app, pilot = await dashboard()
    first = await run_once(pilot)
    newest = await run_once(pilot)
    Path(first.log_path).write_text("output of the first run\n")
    Path(newest.log_path).write_text("output of the newest run\n")
    screen = await open_from_occurrences(pilot, first)
    assert screen.occ.id == first.id
    await until(pilot, lambda: "output of the first run" in screen_text(app))
    text = screen_text(app)
    assert f"Run {first.id} of alpha" in text and "newest" not in text
    assert "succeeded" in text and first.log_path.split("/")[-1] in text
    await pilot.press("escape")
    assert not isinstance(app.screen, RunScreen)


async def test_a_2000_line_log_is_browsed_first_to_last_from_the_task_detail(dashboard) -> None:
    async def seed(store, clock):
        script = 'i=1; while [ $i -le 2000 ]; do echo "line $i of 2000"; i=$((i+1)); done'
        spec = build_spec(
            {"name": "long", "every": "1h", "anchor": ANCHOR, "command": ["sh", "-c", script]}, T0
        )
        await store.add_task(spec, T0)

    app, pilot = await dashboard(ManualClock(T0), seed)
    occ = await run_once(pilot, "long")
    await pilot.press("enter")  # the task's detail ...
    await until(pilot, lambda: isinstance(app.screen, DetailScreen))
    await until(pilot, lambda: app.screen.recent)
    await pilot.press("enter")  # ... whose picked run opens the same view
    await until(pilot, lambda: isinstance(app.screen, RunScreen))
    screen = app.screen
    assert screen.occ.id == occ.id
    await until(pilot, lambda: screen.indexed and screen.view.count == 2000)
    assert "line 1 of 2000" in screen_text(app)
    assert "line 2000 of 2000" not in screen_text(app)
    for last, first in (("end", "home"), ("G", "g")):
        await pilot.press(last)
        await until(pilot, lambda: "line 2000 of 2000" in screen_text(app))
        assert "line 1 of 2000" not in screen_text(app)
        await pilot.press(first)
        await until(pilot, lambda: "line 1 of 2000" in screen_text(app))
    await pilot.press("pagedown")
    await until(pilot, lambda: "line 40 of 2000" in screen_text(app))
    await pilot.press("escape")
    assert isinstance(app.screen, DetailScreen)


def write_big_log(path: Path, size: int) -> int:
    """FIRST, then numbered-free filler in big blocks, then LAST; the line count."""
    line = b"filler: the quick brown fox jumps over the lazy dog, again and again\n"
    block = line * ((4 << 20) // len(line))
    fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, b"FIRST LINE of the big log\n")
        written, lines = 0, 1
        while written < size:
            written += os.write(fd, block)
            lines += block.count(b"\n")
        os.write(fd, b"LAST LINE of the big log\n")
    finally:
        os.close(fd)
    del block
    return lines + 1


async def loop_lags(lags: list[float], period: float = 0.005) -> None:
    """How late each short sleep of the loop wakes, appended to `lags` until cancelled."""
    loop = asyncio.get_running_loop()
    while True:
        start = loop.time()
        await asyncio.sleep(period)
        lags.append(loop.time() - start - period)


async def test_a_200_mb_log_opens_quickly_and_is_browsed_in_bounded_memory(dashboard) -> None:
    app, pilot = await dashboard()
    occ = await run_once(pilot)
    path = Path(occ.log_path)
    lines = write_big_log(path, 200 << 20)
    assert path.stat().st_size >= 200 << 20
    process = psutil.Process()
    rss_before = process.memory_info().rss
    peak = rss_before
    began = time.monotonic()
    app.board.occ_table.focus()
    app.board.occ_table.move_to(app.board.occ_rows.index_of(occ.id))
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, RunScreen))
    screen = app.screen
    await until(pilot, lambda: "FIRST LINE of the big log" in screen_text(app))
    first_paint = time.monotonic() - began
    await pilot.press("G")  # before the index is complete: goes to the end once it is
    await until(pilot, lambda: "LAST LINE of the big log" in screen_text(app), timeout=20)
    peak = max(peak, process.memory_info().rss)
    assert screen.view.count == lines
    for _ in range(5):
        await pilot.press("pageup")
    await pilot.press("g")
    await until(pilot, lambda: "FIRST LINE of the big log" in screen_text(app))
    peak = max(peak, process.memory_info().rss)
    screen.view.scroll_to(y=lines // 2, animate=False, immediate=True)
    await until(pilot, lambda: "filler: the quick" in screen_text(app))
    await pilot.press("end")
    await until(pilot, lambda: "LAST LINE of the big log" in screen_text(app))
    browsed = time.monotonic() - began
    peak = max(peak, process.memory_info().rss)
    # The screen answers while the search reads 200 MB in a thread: the loop's worst lag
    # over the search, against the search alone (which a search on the loop would add).
    lags: list[float] = []
    probing = asyncio.create_task(loop_lags(lags))
    await pilot.press("g", "slash", *"LAST", "enter")
    await until(pilot, lambda: "/LAST: match 1/1" in screen_text(app), timeout=20)
    probing.cancel()
    assert "LAST LINE of the big log" in screen_text(app)
    alone = time.monotonic()
    assert screen.view.index.find_wrapping(screen.view.search, 0, True)[0] is not None
    alone = time.monotonic() - alone
    await pilot.press("j")
    await pilot.press("g", "slash", *"fox", "enter")  # every line: counted up to 10,000
    await until(pilot, lambda: "/fox: match 1/>10,000" in screen_text(app), timeout=20)
    peak = max(peak, process.memory_info().rss)
    growth = (peak - rss_before) / (1 << 20)
    assert first_paint < 2.0, f"first lines after {first_paint:.2f}s"
    assert browsed < 8.0, f"first to last took {browsed:.2f}s"
    assert growth < 50, f"RSS grew {growth:.1f} MB"
    stalled = max(lags)
    assert stalled < alone / 2, f"the loop stalled {stalled:.2f}s; the search takes {alone:.2f}s"
    index = screen.view.index
    assert len(index.before) <= (path.stat().st_size >> 16) + 1  # one count per 64 KiB


async def test_follow_shows_lines_written_while_the_view_is_open(tmp_db: Path, dashboard) -> None:
    go = tmp_db.with_name("go")

    async def seed(store, clock):
        script = (
            f"echo first-$((1+1)); while [ ! -e {go} ]; do sleep 0.05; done;"
            " echo second-$((1+2)); sleep 30"
        )
        spec = build_spec(
            {"name": "chatty", "every": "1h", "anchor": ANCHOR, "command": ["sh", "-c", script]}, T0
        )
        await store.add_task(spec, T0)

    app, pilot = await dashboard(ManualClock(T0), seed)
    occ = await app.host.engine.run_now("chatty")
    await until(pilot, lambda: occ.id in app.board.occ_rows.by_id)
    app.board.occ_table.focus()
    app.board.occ_table.move_to(app.board.occ_rows.index_of(occ.id))
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, RunScreen))
    screen = app.screen
    assert screen.follow  # on by default while the run runs
    await until(pilot, lambda: "first-2" in screen_text(app))
    assert "following" in screen_text(app) and "running" in screen_text(app)
    go.touch()
    await until(pilot, lambda: "second-3" in screen_text(app))
    await pilot.press("f")
    assert not screen.follow
    await until(pilot, lambda: "paused" in screen_text(app))
    await pilot.press("f")
    assert screen.follow


async def test_a_paused_view_holds_its_lines_while_new_ones_arrive(dashboard) -> None:
    """k, pgup and g stop following and the view then holds the same lines however many
    arrive; G follows again; c cancels the run, asking first as the dashboard does."""

    async def seed(store, clock):
        script = 'i=0; while true; do i=$((i+1)); echo "row $i"; sleep 0.02; done'
        spec = build_spec(
            {"name": "chatty", "every": "1h", "anchor": ANCHOR, "command": ["sh", "-c", script]}, T0
        )
        await store.add_task(spec, T0)

    app, pilot = await dashboard(ManualClock(T0), seed, notifications=True)
    occ = await app.host.engine.run_now("chatty")
    await until(pilot, lambda: occ.id in app.board.occ_rows.by_id)
    app.board.occ_table.focus()
    app.board.occ_table.move_to(app.board.occ_rows.index_of(occ.id))
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, RunScreen))
    screen, view = app.screen, app.screen.view
    await until(pilot, lambda: view.count > 100 and view.scroll_offset.y > 50)
    for key in ("k", "pageup", "g"):
        await pilot.press("G")
        await until(pilot, lambda: screen.follow)
        await pilot.press(key)
        await until(pilot, lambda: not screen.follow and "paused" in screen_text(app))
        held, count = view.scroll_offset.y, view.count
        await until(pilot, lambda count=count: view.count > count + 20)
        assert view.scroll_offset.y == held, key
    assert "paused (G or f follows)" in screen_text(app)
    await pilot.press("G")  # follows again: the newest line in view
    await until(pilot, lambda: screen.follow and view.visible_range()[1] == view.count)
    count = view.count
    await until(pilot, lambda: view.count > count + 20)
    await until(pilot, lambda: view.visible_range()[1] == view.count)
    await pilot.press("c")
    await until(pilot, lambda: f"Cancel run {occ.id} (chatty" in screen_text(app))
    await pilot.press("y")
    await until(pilot, lambda: not screen.occ.active, timeout=20)
    assert screen.occ.state == "cancelled" and app.screen is screen


async def test_y_copies_the_current_match_or_a_clicked_line(dashboard) -> None:
    app, pilot = await dashboard(notifications=True)
    occ = await run_once(pilot)
    Path(occ.log_path).write_text(numbered(3000, 700))
    screen = await open_from_occurrences(pilot, occ)
    copied: list[str] = []
    app.copy_to_clipboard = copied.append
    await pilot.press("y")  # nothing marked yet: says how to
    await until(pilot, lambda: any("shift-drag" in n for n in notes(app)))
    assert not copied
    await pilot.press("slash", *"needle", "enter")
    await until(pilot, lambda: screen.view.match == 699)
    await pilot.press("y")
    await until(pilot, lambda: copied == ["needle number 700"])
    await until(pilot, lambda: "copied line 700 to the clipboard" in notes(app))
    await pilot.click("#run-log", offset=(5, 2))  # the view's third line (under its border)
    await pilot.press("y")
    top = screen.view.scroll_offset.y
    await until(pilot, lambda: copied[-1] == screen.view.text(top + 1))


def numbered(count: int, every: int) -> str:
    return "".join(
        f"needle number {n}\n" if n % every == 0 else f"hay {n}\n" for n in range(1, count + 1)
    )


async def test_search_finds_a_line_and_n_and_shift_n_move_between_matches(dashboard) -> None:
    app, pilot = await dashboard(notifications=True)
    occ = await run_once(pilot)
    Path(occ.log_path).write_text(numbered(3000, 700))
    screen = await open_from_occurrences(pilot, occ)
    view = screen.view
    await pilot.press("slash", *"needle", "enter")
    await until(pilot, lambda: view.match == 699)
    await until(pilot, lambda: "needle number 700" in screen_text(app))
    await until(pilot, lambda: "/needle: match 1/4" in screen_text(app))
    await pilot.press("n")
    await until(pilot, lambda: view.match == 1399)
    assert "needle number 1400" in screen_text(app)
    await until(pilot, lambda: "match 2/4" in screen_text(app))
    await pilot.press("n", "n")
    await until(pilot, lambda: view.match == 2799)
    assert "continuing" not in screen_text(app)
    await pilot.press("n")  # nothing below: wraps to the first, as less does, and says so
    await until(pilot, lambda: view.match == 699)
    await until(
        pilot, lambda: "match 1/4 · search hit BOTTOM, continuing at TOP" in lines_shown(app)
    )
    await pilot.press("N")  # and back over the top
    await until(pilot, lambda: view.match == 2799)
    await until(
        pilot, lambda: "match 4/4 · search hit TOP, continuing at BOTTOM" in lines_shown(app)
    )
    await pilot.press("N")
    await until(pilot, lambda: view.match == 2099)
    assert "needle number 2100" in screen_text(app)


async def test_n_after_g_finds_the_match_below_the_view_wrapping_to_the_top(dashboard) -> None:
    """A search moves from where the view is, not from the last match found."""
    app, pilot = await dashboard(notifications=True)
    occ = await run_once(pilot)
    Path(occ.log_path).write_text(numbered(3000, 700))
    screen = await open_from_occurrences(pilot, occ)
    view = screen.view
    await pilot.press("slash", *"needle", "enter")
    await until(pilot, lambda: view.match == 699)
    await pilot.press("G")
    await until(pilot, lambda: "hay 3000" in screen_text(app))
    await pilot.press("n")  # 2800 is above the view: the next one below wraps to 700
    await until(pilot, lambda: view.match == 699 and "search hit BOTTOM" in screen_text(app))
    await pilot.press("g")
    view.scroll_to(y=1500, animate=False, immediate=True)
    await pilot.pause()
    await pilot.press("N")  # from the view's top: the one above it, 1400
    await until(pilot, lambda: view.match == 1399)


async def test_at_80_columns_the_status_line_keeps_the_match_count_and_the_wrap_notice(
    dashboard,
) -> None:
    """Shorter forms of the line range and the follow state make room; the count stays."""
    app, pilot = await dashboard(size=(80, 24), notifications=True)
    occ = await run_once(pilot)
    Path(occ.log_path).write_text(numbered(3000, 700))
    screen = await open_from_occurrences(pilot, occ)
    view = screen.view
    await pilot.press("slash", *"NEEDLE", "enter")
    await until(pilot, lambda: view.match == 699)
    await until(pilot, lambda: "/NEEDLE (any case): match 1/4" in screen_text(app))
    await pilot.press("G", "n")
    await until(pilot, lambda: "match 1/4 · hit BOTTOM, continuing at TOP" in screen_text(app))
    await pilot.resize_terminal(160, 40)  # wider: the long forms come back
    await until(pilot, lambda: " of 3,000 · " in screen_text(app))
    assert "match 1/4 · search hit BOTTOM, continuing at TOP" in screen_text(app)
    await pilot.resize_terminal(80, 24)
    await until(pilot, lambda: " of 3,000 · " not in screen_text(app))
    assert "match 1/4 · hit BOTTOM" in screen_text(app)


async def test_search_is_smart_case_and_takes_a_regular_expression(dashboard) -> None:
    app, pilot = await dashboard(notifications=True)
    occ = await run_once(pilot)
    Path(occ.log_path).write_text("start\nStep done\nstep DONE twice\nERROR 42\nerror x\n")
    screen = await open_from_occurrences(pilot, occ)
    view = screen.view

    async def search(typed: str) -> None:
        await pilot.press("slash")
        screen.query_one("#run-search").value = typed
        await pilot.press("enter")

    await search("step")  # lowercase: any case
    await until(pilot, lambda: view.match == 1 and "match 1/2" in screen_text(app))
    await search("DONE")  # a capital: as typed
    await until(pilot, lambda: view.match == 2 and "/DONE: match 1/1" in screen_text(app))
    await search("re:^error \\d+$")  # a regular expression, smart case too
    await until(pilot, lambda: view.match == 3 and "match 1/1" in screen_text(app))
    await search("Done")  # nowhere as typed: found ignoring case, and the status says so
    await until(pilot, lambda: view.match == 1 and "(any case): match 1/2" in screen_text(app))
    await search("nowhere")
    await until(pilot, lambda: "/nowhere: no match" in screen_text(app))
    await search("re:(")  # a bad expression is said; the box stays to fix it
    await until(pilot, lambda: any("not a regular expression" in n for n in notes(app)))
    assert screen.query_one("#run-search").display


def test_a_search_is_smart_case_and_an_escape_is_no_capital() -> None:
    assert Search.parse("done").matches("all DONE") and not Search.parse("done").case_sensitive
    assert Search.parse("Done").case_sensitive and not Search.parse("Done").matches("done")
    assert Search.parse("Done").ignoring_case().matches("DONE")
    assert not Search.parse(r"re:\S+ok").case_sensitive  # \S is not a capital
    assert Search.parse("re:a.c").matches("abc") and not Search.parse("a.c").matches("abc")
    assert Search.parse("re:a.c").needle is None and Search.parse("a.c").needle == b"a.c"
    for bad in ("", "re:", "re:("):
        with pytest.raises(ValueError):
            Search.parse(bad)


def test_search_over_chunks_finds_matches_across_chunk_edges(tmp_path: Path) -> None:
    """A match near a read chunk's end is found, forward and backward, and counted once."""
    path = tmp_path / "log"
    line = b"a" * 99 + b"\n"
    body = line * 10500  # the needle lands just across the 1 MiB boundary
    path.write_bytes(body[: (1 << 20) - 3] + b"NEEDLE\n" + body)
    fd = os.open(path, os.O_RDONLY)
    try:
        index = LineIndex(fd)
        while (step := index.scan(1 << 20)) is not None:
            index.apply(step)
        target = index.line_at((1 << 20) - 3)
        assert "NEEDLE" in index.text(target)
        needle = Search.parse("NEEDLE")
        assert index.find(needle, -1, True) == target
        assert index.find(needle, index.lines - 1, False) == target
        assert index.find(needle, target, True) is None
        assert index.find_wrapping(needle, target, True) == (target, True)  # finds itself
        assert index.find_wrapping(needle, 0, False) == (target, True)
        counted, start = [], 0
        while True:  # in slices smaller than the file, as the screen counts
            step = index.count(needle, start, 300_000)
            counted, start = [n for n in counted if n < start] + step.lines, step.next_line
            if step.done:
                break
        assert counted == [target]
    finally:
        os.close(fd)


async def test_an_escape_sequence_and_a_password_are_shown_made_safe(dashboard) -> None:
    """A colour is shown as a colour (its sequence is not text); every other escape is
    shown escaped, a password hidden."""
    app, pilot = await dashboard()
    occ = await run_once(pilot)
    Path(occ.log_path).write_bytes(
        b"plain line\n\x1b[31mred text\x1b[0m\x07\x1b[2J\ndb postgres://u:hunter2@h/x\n"
    )
    screen = await open_from_occurrences(pilot, occ)
    await until(pilot, lambda: "red text" in screen_text(app))
    text = screen_text(app)
    assert "red text\\x07\\x1b[2J" in text and "[31m" not in text
    view = screen.view
    drawn = {seg.text: seg.style for seg in view.render_line(1 - view.scroll_offset.y)}
    assert drawn["red text"].color == Color.from_ansi(1)  # drawn red, in the theme's red
    assert drawn["\\x07\\x1b[2J"] is None or drawn["\\x07\\x1b[2J"].color is None
    assert "\x1b" not in text and "\x07" not in text
    assert "hunter2" not in text and "u:***@h" in text


async def test_search_finds_what_the_view_shows_never_the_hidden_secret(dashboard) -> None:
    """`***` and an escaped `\\x1b` are found where they are shown; the secret they stand
    for is not found, nor shown (counted, found, highlighted, on the status line)."""
    app, pilot = await dashboard(notifications=True)
    occ = await run_once(pilot)
    Path(occ.log_path).write_bytes(
        b"start\n" + b"hay\n" * 40 + b"db postgres://u:hunter2@h/x\n\x1b[31mred\x1b[0m\x1b[2K\n"
        b"col\tumn\nend\n"
    )
    screen = await open_from_occurrences(pilot, occ)
    view = screen.view

    async def search(typed: str) -> None:
        await pilot.press("slash")
        screen.query_one("#run-search").value = typed
        await pilot.press("enter")

    await search("***")
    await until(pilot, lambda: view.match == 41 and "/***: match 1/1" in screen_text(app))
    await search("re:u:\\*+@")
    await until(pilot, lambda: view.match == 41 and "match 1/1" in screen_text(app))
    await search("\\x1b[2K")  # an escape shown escaped is found
    await until(pilot, lambda: view.match == 42 and "match 1/1" in screen_text(app))
    await search("re:^red\\\\x1b")  # a colour is not text: the visible text is searched
    await until(pilot, lambda: view.match == 42 and "red\\\\x1b: match 1/1" in screen_text(app))
    await search("col     umn")  # the tab as the view shows it
    await until(pilot, lambda: view.match == 43 and "match 1/1" in screen_text(app))
    for secret in ("hunter2", "re:hunt.r2", "[31m"):
        await search(secret)
        await until(pilot, lambda: "no match" in screen_text(app))
        assert view.match is None
    await pilot.press("n", "N")
    await pilot.pause()
    assert view.match is None and "hunter2" not in screen_text(app)


async def test_o_opens_the_log_in_the_pager_and_comes_back(
    dashboard, tmp_path: Path, monkeypatch
) -> None:
    marker = tmp_path / "pager-ran"
    pager = tmp_path / "pager.sh"
    pager.write_text(f"#!/bin/sh\ncat > {marker}.part && mv {marker}.part {marker}\n")
    pager.chmod(0o755)
    monkeypatch.setenv("PAGER", str(pager))
    app, pilot = await dashboard()
    occ = await run_once(pilot)
    secret = "postgres://app:s3cret-pw@db.internal/x"
    Path(occ.log_path).write_text(
        f"connect {secret}\n\x1b[2J\x1b]0;pwned\x07 out\n\x1b[1;31mred\x1b[0m\x1b[8mshown\nlast"
    )
    screen = await open_from_occurrences(pilot, occ)
    await pilot.press("o")
    await until(pilot, lambda: marker.exists())
    paged = marker.read_text()
    # the pager gets what the view shows: redacted, colours as SGR for `less -R` (conceal
    # dropped), every other escape as text, every line
    assert "s3cret-pw" not in paged and "connect postgres://app:***@db.internal/x" in paged
    assert "\x1b[1;31mred\x1b[0mshown\n" in paged
    assert "\x1b" not in paged.replace("\x1b[1;31m", "").replace("\x1b[0m", "")
    assert "\\x1b[2J" in paged and "pwned" in paged
    assert paged.endswith("last\n")
    assert app.screen is screen  # back in the view


async def test_the_footer_shows_the_views_own_keys(dashboard) -> None:
    app, pilot = await dashboard(size=(160, 40))
    occ = await run_once(pilot)
    await open_from_occurrences(pilot, occ)

    def footer() -> str:
        return screen_text(app).splitlines()[-1]

    labels = ("Back", "Follow", "Search", "Next match", "Open in pager", "Top", "Bottom")
    await until(pilot, lambda: all(label in footer() for label in labels), timeout=5)
    assert "Run now" not in footer() and "Add" not in footer()


def test_run_output_view_snapshot(snap_compare, tmp_path: Path) -> None:
    app = sample.sample_app(tmp_path / "t.db")
    assert snap_compare(app, run_before=sample.run_output_scene, terminal_size=(130, 36))


async def test_a_long_line_is_marked_where_it_is_cut_and_scrolls_sideways(dashboard) -> None:
    app, pilot = await dashboard(size=(100, 30))
    occ = await run_once(pilot)
    Path(occ.log_path).write_text("A" * 50 + "B" * 100 + "C" * 150 + "END\nshort\n")
    screen = await open_from_occurrences(pilot, occ)
    view = screen.query_one("#run-log")

    def first_line() -> str:
        return next(line for line in screen_text(app).splitlines() if "AAA" in line
                    or "BBB" in line or "CCC" in line)  # fmt: skip

    await until(pilot, lambda: first_line().rstrip("│ ").endswith("B…"))  # marked where cut
    assert "END" not in first_line()
    await pilot.press(*["l"] * 10)  # 80 columns to the right
    await until(pilot, lambda: view.scroll_offset.x == 80)
    assert "1 …B" in first_line() and "A" not in first_line()  # cut at both edges
    await pilot.press("right", *["l"] * 30)
    await until(pilot, lambda: "END" in first_line())
    await pilot.press(*["h"] * 40)
    await until(pilot, lambda: view.scroll_offset.x == 0)
    assert "…" not in first_line().split("A", 1)[0]


@pytest.mark.parametrize("pager", ["no-such-pager-here", 'less "unclosed'])
async def test_a_pager_that_cannot_run_is_said_and_the_view_stays(
    dashboard, monkeypatch, pager: str
) -> None:
    monkeypatch.setenv("PAGER", pager)
    app, pilot = await dashboard(notifications=True)
    occ = await run_once(pilot)
    screen = await open_from_occurrences(pilot, occ)
    await pilot.press("o")
    await until(pilot, lambda: any("pager" in n.lower() for n in notes(app)))
    assert app.screen is screen and app.is_running


def test_the_log_index_keeps_one_newline_count_per_64_kib(tmp_path: Path) -> None:
    """README: the run view reads a log through an index of one newline count per 64 KiB:
    a log of 10 blocks and a bit has 10 counts past the first (zero), each the newlines
    before its block's start."""
    log = tmp_path / "run.log"
    line = b"x" * 99 + b"\n"  # 100 bytes a line
    log.write_bytes(line * (10 * 65536 // 100 + 7))
    fd = os.open(log, os.O_RDONLY)
    try:
        index = LineIndex(fd)
        while (step := index.scan()) is not None:
            index.apply(step)
        assert len(index.before) == 1 + 10
        assert list(index.before) == [block * 65536 // 100 for block in range(11)]
        assert index.lines == 10 * 65536 // 100 + 7
    finally:
        os.close(fd)

"""Pilot tests of the dashboard's view of workers: the Workers pane, the WORKER
columns, a remote run's output, the broker-down warning. Real SQLite, a manual clock;
workers, runs and their events are written through the store as the engine's Kafka
consumers write them (no broker here: the engine side has its own tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import T0
from tickui.common.clock import ManualClock
from tickui.common.timeutil import MICROS
from tickui.model.occurrence import RUN_COMPLETED, RUN_TRANSITION
from tickui.store import Beat, NewEvent, Store
from tickui.ui.screens.dashboard import NARROW
from tickui.ui.screens.detail import DetailScreen
from tickui.ui.screens.run import RunScreen
from tickui.ui.view.columns import OCCURRENCE_COLUMNS
from tickui.ui.view.layout import Column, layout_columns
from tickui.ui.widgets.log_view import LogView
from tickui.ui.widgets.panes import StatusLine
from tickui.ui.widgets.workers import WorkersPane
from ui_support import screen_text, until

SIZE = (140, 40)
PROBLEM = "kafka 127.0.0.1:9: broker down since 08:00:01"


def kafka(problem: str | None = None):
    """A host whose engine says it dispatches to workers (as KafkaDispatcher does)."""

    async def prepare(host) -> None:
        host.engine.dispatcher.remote = True
        if problem is not None:
            host.engine.dispatcher.dispatch_problem = problem

    return prepare


def beat(worker: str, state: str, seen: int, running=(), slots: int = 4) -> Beat:
    return Beat(worker, f"{worker}-host", slots, list(running), "0.13", state, seen, "/var/w")


def pane(app) -> WorkersPane:
    return app.dashboard.query_one(WorkersPane)


async def remote_run(app, worker: str, tail: str) -> int:
    """A manual run of alpha that worker `worker` started and finished, reported through
    events (ids and all) as the engine's consumer stores them; settled by the engine."""
    store, engine, now = app.host.store, app.host.engine, app.host.clock.now()
    task = await store.get_task("alpha")
    occ = await store.claim_manual(task, engine.owner, engine._lease.token, now)
    running = {"state": "running", "worker": worker, "log_path": "/var/w/logs/7.log", "pid": 9}
    done = {"exit_code": 0, "tail": tail, "worker": worker}
    await store.append_events(
        [
            NewEvent(now, RUN_TRANSITION, occ.command_id, "r1", running, event_id=f"t{occ.id}"),
            NewEvent(now, RUN_COMPLETED, occ.command_id, "r1", done, event_id=f"c{occ.id}"),
        ]
    )
    await store.set_workers([(occ.id, worker)])
    await engine.tick(now)
    app.live.mark(occurrences=[occ.id])
    return occ.id


# ---- the pane ----------------------------------------------------------------------------


async def test_local_dispatch_shows_no_workers_pane_and_no_worker_column(dashboard) -> None:
    app, pilot = await dashboard()
    await until(pilot, lambda: "Circuit breaker" in screen_text(app))
    assert not pane(app).display and "Workers" not in screen_text(app)
    assert app.board.occ_table.columns == OCCURRENCE_COLUMNS


async def test_kafka_dispatch_lists_workers_with_state_slots_and_last_heartbeat(dashboard) -> None:
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock, prepare=kafka())
    await until(pilot, lambda: "no worker has reported yet" in screen_text(app))
    now = clock.now()
    await app.host.store.record_heartbeats(
        [
            beat("w-busy", "alive", now - 2 * MICROS, ["c1", "c2"]),
            beat("w-gone", "alive", now - 15 * MICROS),
            beat("w-done", "drained", now - 200 * MICROS),
        ]
    )
    await app.host.store.mark_workers_lost(["w-gone"], now)
    # read once a second: a read between the two writes above shows w-gone alive a second
    await until(pilot, lambda: "Workers · 1 lost · 1 alive" in screen_text(app), timeout=5)
    text = screen_text(app)
    assert "Workers · 1 lost · 1 alive" in text  # what fits the border, trouble first
    rows = [line[line.index("│ w-") + 2 :] for line in text.splitlines() if "│ w-" in line]
    lines = {row.split()[0]: row for row in rows}
    assert "alive" in lines["w-busy"] and "2/4" in lines["w-busy"]
    assert "2s ago" in lines["w-busy"]
    assert "lost" in lines["w-gone"] and "15s ago" in lines["w-gone"]
    assert "drained" in lines["w-done"] and "3m20s ago" in lines["w-done"]
    order = [n for n in ("w-gone", "w-busy", "w-done") if n in text]
    assert [text.index(n) for n in order] == sorted(text.index(n) for n in order)
    clock.advance(5)  # no new heartbeat: the age moves with the clock
    await until(pilot, lambda: "7s ago" in screen_text(app), timeout=5)


async def test_workers_recorded_by_another_process_show_the_pane_in_local_dispatch(
    tmp_db: Path, dashboard
) -> None:
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock)
    assert not pane(app).display
    other = await Store.open(tmp_db)  # e.g. a `tickui run --dispatch kafka` elsewhere
    try:
        await other.record_heartbeats([beat("far-1", "alive", clock.now())])
    finally:
        await other.close()
    await until(pilot, lambda: pane(app).display and "far-1" in screen_text(app), timeout=5)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)])
async def test_the_workers_pane_follows_the_side_panes_layout_and_H(
    dashboard, size: tuple[int, int]
) -> None:
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock, prepare=kafka(), size=size)
    await app.host.store.record_heartbeats([beat(f"w{n}", "alive", clock.now()) for n in range(12)])
    # "w0 ", not "w0": under pytest-xdist the database path in the header holds "popen-gw0"
    await until(pilot, lambda: "w0 " in screen_text(app), timeout=5)
    side = app.dashboard.query_one("#side")
    tables = app.dashboard.query_one("#tables")
    workers = pane(app).region
    assert side.region.contains_region(workers) and workers.height >= 4
    if size[0] < NARROW:  # narrow: the side panes sit side by side under the tables
        assert side.region.y >= tables.region.bottom and workers.width >= 20
    else:  # wide: right of the tables, below ticks and breaker
        breaker = app.dashboard.query_one("#breaker").region
        assert side.region.x >= tables.region.right and workers.y >= breaker.bottom
        assert breaker.height >= 4  # the workers never squeeze the breaker out
    text = screen_text(app)
    shown = sum(1 for n in range(12) if f"w{n} " in text)
    if shown < 12:  # the rows that do not fit are counted, not cut off unsaid
        assert f"… {12 - shown} more" in text
    for line in text.splitlines():
        assert len(line) == size[0]
    await pilot.press("H")
    await until(pilot, lambda: "Workers" not in screen_text(app))
    assert tables.region.width == size[0]
    await pilot.press("H")
    await until(pilot, lambda: "Workers" in screen_text(app))


# ---- which worker ran what ---------------------------------------------------------------


async def test_a_run_on_a_worker_shows_its_worker_in_the_tables_and_its_tail(
    dashboard, tmp_path: Path, monkeypatch
) -> None:
    paged = tmp_path / "paged"
    pager = tmp_path / "pager.sh"
    pager.write_text(f"#!/bin/sh\ncat > {paged}.part && mv {paged}.part {paged}\n")
    pager.chmod(0o755)
    monkeypatch.setenv("PAGER", str(pager))
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock, prepare=kafka(), size=(200, 50))
    await app.host.engine.tick(clock.now())  # the lease
    assert "WORKER" not in [c.title for c in app.board.occ_table.columns]
    occ_id = await remote_run(app, "w-east-1", "line one\nsecret=hunter2 done\n")
    await until(pilot, lambda: "w-east-1" in screen_text(app), timeout=5)
    assert "WORKER" in screen_text(app) and "succeeded" in screen_text(app)
    # the run view: the worker's tail, its id and its log path on the worker
    app.board.occ_table.focus()
    app.board.occ_table.select_key(occ_id)
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, RunScreen))
    run = app.screen
    await until(pilot, lambda: run.query_one(LogView).count == 2, timeout=5)
    text = screen_text(app)
    assert "line one" in text and "hunter2" not in text
    assert "w-east-1" in text and "/var/w/logs/7.log (on w-east-1)" in text
    assert "worker's tail, 29 B, 2 lines" in text
    await pilot.press("o")  # the pager gets the tail, as the view shows it
    await until(pilot, paged.exists)
    assert paged.read_text() == "line one\nsecret=*** done\n"
    await pilot.press("escape")
    # the task's detail: a WORKER column and the worker's tail as the output
    app.board.tasks_table.focus()
    app.board.tasks_table.select_key(app.board.occ_rows.by_id[occ_id].task_id)
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, DetailScreen))
    await until(pilot, lambda: "line one" in screen_text(app), timeout=5)
    text = screen_text(app)
    assert "WORKER" in text and "on w-east-1" in text


async def test_at_120_columns_beside_the_side_panes_a_run_shows_its_worker(dashboard) -> None:
    """The common 120-column terminal with ticks, breaker and workers shown: the WORKER
    column gives way to KIND and LATE, not the other way round."""
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock, prepare=kafka(), size=(120, 40))
    await app.host.engine.tick(clock.now())  # the lease
    await remote_run(app, "w-east-1", "done\n")
    await until(pilot, lambda: "succeeded" in screen_text(app), timeout=5)
    assert pane(app).display  # the side panes are shown
    rows = [line for line in screen_text(app).splitlines() if "succeeded alpha" in line]
    assert rows and "w-east-1" in rows[0], rows


async def test_a_remote_run_still_running_says_its_tail_comes_with_its_end(dashboard) -> None:
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock, prepare=kafka())
    await app.host.engine.tick(clock.now())
    store, engine = app.host.store, app.host.engine
    task = await store.get_task("alpha")
    occ = await store.claim_manual(task, engine.owner, engine._lease.token, clock.now())
    running = {"state": "running", "worker": "w-2", "log_path": "/w/9.log", "pid": 3}
    await store.append_events(
        [NewEvent(clock.now(), RUN_TRANSITION, occ.command_id, "r", running, event_id="x")]
    )
    await store.set_workers([(occ.id, "w-2")])
    await engine.tick(clock.now())
    fresh = (await store.occurrences_by_id([occ.id]))[0]
    app.dashboard.actions.open_run(fresh)
    await until(pilot, lambda: isinstance(app.screen, RunScreen))
    await until(pilot, lambda: "comes with its end" in screen_text(app), timeout=5)
    assert "/w/9.log (on w-2)" in screen_text(app)


# ---- the broker is down ------------------------------------------------------------------


async def test_a_broker_that_is_down_is_said_in_the_header_and_the_workers_pane(dashboard) -> None:
    clock = ManualClock(T0)
    app, pilot = await dashboard(clock, prepare=kafka(PROBLEM), start_ticker=True, size=(200, 40))
    await app.host.engine.tick(clock.now())
    await until(pilot, lambda: "⚠ kafka 127.0.0.1:9: broker down" in screen_text(app))
    app.live.status_dirty = True
    await until(
        pilot, lambda: PROBLEM in str(app.dashboard.query_one(StatusLine)._shown), timeout=5
    )


def test_columns_that_cannot_be_dropped_keep_their_minimum_when_the_width_is_short() -> None:
    columns = [Column("WORKER", 6, 18, flex=True), Column("STATE", 8), Column("SEEN", 7)]
    # 23 needed, 20 given, nothing droppable: the flexible one is cut (its cells end in
    # "…") so the line fits, and none is squeezed to nothing as the first one once was
    assert layout_columns(columns, 20, {0: 12}) == [(0, 3), (1, 8), (2, 7)]
    # narrower still: the others are cut from the right, each keeping a few cells
    assert layout_columns(columns, 14, {0: 12}) == [(0, 3), (1, 6), (2, 3)]

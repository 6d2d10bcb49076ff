"""The dashboard's pure parts: cell text, row order and windows, the engine state word."""

from __future__ import annotations

from dataclasses import replace

import pytest

from helpers import T0
from tickui.common.timeutil import MICROS
from tickui.engine import EngineStatus
from tickui.model.records import Occurrence, Task
from tickui.model.spec import build_spec
from tickui.ui.view.cells import countdown, detail_text, lateness, outcome_code, span
from tickui.ui.view.rows import OccurrenceRows, TaskRows
from tickui.ui.widgets.panes import engine_state

S = MICROS


def occ(occ_id: int, **fields) -> Occurrence:
    base = {"task_id": 1, "task": "t", "kind": "scheduled", "scheduled_for": T0,
            "state": "succeeded", "claimed_at": T0}  # fmt: skip
    return Occurrence(id=occ_id, **{**base, **fields})


def task(task_id: int, name: str) -> Task:
    spec = build_spec({"name": name, "every": "1m", "command": ["true"]}, T0)
    return Task(task_id, name, spec, "cli", True, None, 1, T0, T0, T0, T0 + 60 * S, T0 + 60 * S)


@pytest.mark.parametrize(
    ("left", "shown"),
    [(1, "1s"), (S - 1, "1s"), (S, "1s"), (S + 1, "2s"), (59 * S, "59s"), (61 * S, "1m01s")],
)
def test_countdown_rounds_up_so_it_never_reads_0s_early(left: int, shown: str) -> None:
    assert countdown(T0 + left, T0) == shown


def test_countdown_at_or_past_the_moment_is_due_and_none_is_a_dash() -> None:
    assert countdown(T0, T0) == "due" and countdown(T0 - S, T0) == "due"
    assert countdown(None, T0) == "-"


@pytest.mark.parametrize(
    ("micros", "shown"),
    [(400_000, "0.4s"), (12 * S, "12s"), (185 * S, "3m05s"), (7440 * S, "2h04m"),
     ((6 * 86400 + 3 * 3600) * S, "6d03h"), (-S, "0.0s")],
)  # fmt: skip
def test_span_is_compact_at_every_scale(micros: int, shown: str) -> None:
    assert span(micros) == shown


def test_lateness_has_a_sign_and_needs_a_start() -> None:
    assert lateness(occ(1)) == "-"
    assert lateness(occ(1, started_at=T0 + 250_000)) == "+0.25s"
    assert lateness(occ(1, started_at=T0 - 100_000)) == "-0.10s"
    assert lateness(occ(1, started_at=T0 + 125 * S)) == "+2m05s"


def test_code_prefers_the_exit_code_and_detail_is_one_line_with_covers() -> None:
    assert outcome_code(occ(1, exit_code=3, error_code="EXIT_NONZERO")) == "3"
    assert outcome_code(occ(1, error_code="TIMEOUT")) == "TIMEOUT"
    assert outcome_code(occ(1)) == ""
    assert outcome_code(occ(1, exit_code=-15, error_code="TIMEOUT")) == "TIMEOUT"  # not -15
    assert detail_text(occ(1, detail="line one\nline two")) == "line one line two"
    assert detail_text(occ(1, covers=4)) == "covers 4 slots"
    assert detail_text(occ(1, detail="late", covers=2)) == "late · covers 2 slots"


def test_task_rows_with_one_next_time_stay_sorted_by_name_through_rename_remove_and_filter():
    """The default sort is NEXT; tasks due at the same moment are in name order."""
    rows = TaskRows()
    rows.load([task(1, "gamma"), task(2, "alpha"), task(3, "beta")])
    assert [rows.at(i).name for i in range(len(rows))] == ["alpha", "beta", "gamma"]
    rows.upsert(replace(rows.by_id[1], name="aardvark"))  # renamed: moves to the top
    assert rows.at(0).id == 1 and rows.index_of(2) == 1
    rows.set_filter(" BE ")
    assert len(rows) == 1 and rows.total == 3 and rows.at(0).name == "beta"
    assert rows.index_of(2) is None  # alpha is filtered out
    rows.upsert(task(4, "bee"))
    assert [rows.at(i).name for i in range(len(rows))] == ["bee", "beta"]
    rows.remove(3)
    rows.set_filter("")
    assert [rows.at(i).name for i in range(len(rows))] == ["aardvark", "alpha", "bee"]
    assert rows.at(3) is None and rows.at(-1) is None


def test_occurrence_rows_keep_the_newest_window_newest_first() -> None:
    rows = OccurrenceRows(window=3)
    rows.load([occ(5), occ(2), occ(9)])
    assert [rows.at(i).id for i in range(len(rows))] == [9, 5, 2] and rows.newest_id == 9
    assert rows.upsert(occ(11)) and 2 not in rows.by_id and len(rows) == 3
    assert not rows.upsert(occ(1))  # older than everything kept
    assert rows.upsert(occ(5, state="failed")) and rows.by_id[5].state == "failed"
    assert rows.index_of(5) == 2 and rows.index_of(2) is None
    rows.upsert(occ(12, state="running"))
    assert rows.active_ids() == [12]


def _status(**fields) -> EngineStatus:
    base = {"running": True, "owner": "me", "lease_state": "held", "holder": "me",
            "lease_expires_at": None, "last_scan_at": None, "result": "ok", "detail": None,
            "next_scan_at": None, "counts": {}, "coalesced": 0, "was_standby": False}  # fmt: skip
    return EngineStatus(**{**base, **fields})


def test_engine_state_names_each_case() -> None:
    assert engine_state(_status(), "running")[0] == "running"
    assert engine_state(None, "running")[0] == "stopped"
    assert engine_state(_status(running=False), "running")[0] == "stopped"
    standby = _status(lease_state="standby", holder="ops-box:4242")
    assert engine_state(standby, "running")[0] == "standby (lease held by ops-box:4242)"
    assert engine_state(_status(result="error", detail="disk I/O"), "running")[0] == (
        "error: disk I/O"
    )
    assert engine_state(_status(), "stopped")[0] == "waiting for ticks"
    assert engine_state(_status(lease_state="none"), "running")[0] == "waiting"

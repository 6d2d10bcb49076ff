"""The history grid's pure parts: outcomes, glyphs, fitting slots to a width, the title."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path

import pytest
from rich.cells import cell_len

from helpers import T0
from tickui.common.timeutil import MICROS
from tickui.model.occurrence import STATES
from tickui.model.records import Occurrence
from tickui.ui.view.grid import (
    LOADING,
    NAME_MAX,
    NAME_MIN,
    OUTCOMES,
    SLOT_WIDTH,
    Fit,
    cell_text,
    cell_x,
    fit_slots,
    header_text,
    legend,
    outcomes,
    row_cells,
    slot_at,
)

S = MICROS


def occ(occ_id: int, **fields) -> Occurrence:
    base = {"task_id": 1, "task": "t", "kind": "scheduled", "scheduled_for": T0 + occ_id * S,
            "state": "succeeded", "claimed_at": T0}  # fmt: skip
    return Occurrence(id=occ_id, **{**base, **fields})


def test_every_glyph_is_one_cell_wide_and_no_two_are_alike() -> None:
    glyphs = [glyph for glyph, _, _ in OUTCOMES.values()]
    assert all(cell_len(g) == 1 for g in glyphs), glyphs
    assert len(set(glyphs)) == len(glyphs)
    assert cell_len(LOADING[0]) == 1 and LOADING[0] not in glyphs
    assert legend() == [(g, meaning) for g, _, meaning in OUTCOMES.values()]


def test_readme_lists_the_legend() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for glyph, meaning in legend():
        assert f"| `{glyph}` | {meaning} |" in readme, glyph


def test_every_occurrence_state_has_an_outcome() -> None:
    for state in STATES:
        assert outcomes([occ(1, state=state)])[0] in OUTCOMES


def test_a_failed_attempt_followed_by_a_retry_reads_retried() -> None:
    first = occ(1, state="failed", scheduled_for=T0)
    second = occ(2, state="failed", scheduled_for=T0, attempt=2, retry_of=1)
    third = occ(3, state="succeeded", scheduled_for=T0, attempt=3, retry_of=1)
    other = occ(4, state="failed")
    # newest first, as the store gives them
    assert outcomes([other, third, second, first]) == ["failed", "succeeded", "retried", "retried"]
    # the last attempt failed too: it reads failed, the ones before it retried
    assert outcomes([second, first]) == ["failed", "retried"]
    queued = occ(5, state="queued", scheduled_for=T0, attempt=2, retry_of=1, retry_at=T0 + 9 * S)
    assert outcomes([queued, first]) == ["queued", "retried"]


def test_a_misfire_skip_reads_missed_and_other_skips_skipped() -> None:
    missed = occ(1, state="skipped", detail="misfire_skipped: 3 missed", missed=3)
    buffer = occ(2, state="skipped", detail="concurrency_buffer_full")
    assert outcomes([buffer, missed]) == ["skipped", "missed"]


@pytest.mark.parametrize("width", [0, 5, 20, 40, 79, 80, 150, 200, 400])
def test_fit_slots_shares_the_width_and_never_overflows(width: int) -> None:
    fit = fit_slots(width)
    assert fit.used <= max(width, 0)
    if width >= 40:
        assert NAME_MIN <= fit.name_width <= NAME_MAX
        assert width - fit.used < SLOT_WIDTH  # as many slots as fit
        assert fit.slots >= 10


def test_row_cells_put_the_newest_run_on_the_right() -> None:
    fit = Fit(8, 5)
    runs = [occ(3, state="running"), occ(2, state="failed"), occ(1)]  # newest first
    cells = row_cells("backup-db-nightly", runs, fit)
    assert cells[0] == ("backup-…", "bold")
    assert [c[0] for c in cells[1:]] == ["  ", "  ", " ■", " ✗", " ▶"]
    assert cells[-1][1] == OUTCOMES["running"][1]
    assert sum(cell_len(t) for t, _ in cells) == fit.used
    # more runs than slots: the newest fit.slots
    many = [occ(i) for i in range(20, 0, -1)]
    assert len(row_cells("a", many, fit)) == 1 + fit.slots
    assert row_cells("a", None, fit)[-1] == (" …", "bright_black")
    assert [c[0] for c in row_cells("a", [], fit)[1:]] == ["  "] * 5


def test_slot_at_and_cell_x_agree() -> None:
    fit = Fit(10, 6)
    for slot in range(fit.slots):
        assert slot_at(cell_x(slot, fit), fit) == slot
    assert slot_at(3, fit) is None and slot_at(fit.used, fit) is None
    assert cell_x(0, fit) == fit.used - 1  # the newest ends the line


def test_header_says_which_way_is_newer() -> None:
    fit = fit_slots(80)
    text = header_text(fit, 80)
    assert text.startswith("TASK") and text.endswith("newer →") and "← older" in text
    assert len(text) == 80
    assert header_text(Fit(8, 2), 12).startswith("TASK")
    assert len(header_text(Fit(8, 2), 12)) <= 12


def test_cell_text_says_slot_outcome_and_duration() -> None:
    failed = occ(7, state="failed", scheduled_for=T0, started_at=T0 + S, finished_at=T0 + 3 * S,
                 exit_code=3, error_code="EXIT_NONZERO")  # fmt: skip
    text = cell_text("export", 0, [failed], T0 + 60 * S, UTC)
    assert text == "export · run 7 · slot 08:00:00 · failed (exit 3) · took 2.0s"
    running = occ(8, state="running", started_at=T0, scheduled_for=T0)
    assert cell_text("x", 0, [running], T0 + 41 * S, UTC).endswith("running · for 41s")
    retry = occ(9, state="queued", attempt=2, retry_of=7, scheduled_for=T0, retry_at=T0 + 40 * S)
    text = cell_text("x", 1, [retry, failed], T0, UTC)
    assert "failed, retried (exit 3)" in text
    assert cell_text("x", 0, [retry, failed], T0, UTC).endswith("queued, attempt 2 · starts in 40s")
    missed = occ(2, state="skipped", detail="misfire_skipped: 4 missed", missed=4)
    assert cell_text("x", 0, [missed], T0, UTC).endswith("missed · 4 slots missed")
    assert cell_text("x", 3, [missed], T0, UTC) == "x · no run this far back"
    assert cell_text("x", 0, [], T0, UTC) == "x · no runs yet"
    assert cell_text("x", 0, None, T0, UTC) == "x · reading its runs"

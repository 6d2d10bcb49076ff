"""The Tasks pane's history grid: a row per task, a cell per recent run (an occurrence:
a retry is a cell of its own), newest on the right. A cell's glyph says its outcome
without colour; its colour says it again. Pure: runs and a width in, text out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import tzinfo

from rich.cells import cell_len

from tickui.common.redact import safe_text
from tickui.common.timeutil import span
from tickui.model.records import Occurrence
from tickui.ui.view.cells import Cell, countdown, outcome_code, when_text

# outcome: (glyph, colour word, what it means). Every glyph is one cell wide (a test
# measures them with rich's cell_len) and no two are alike.
OUTCOMES: dict[str, tuple[str, str, str]] = {
    "succeeded": ("■", "green", "succeeded"),
    "failed": ("✗", "bold red", "failed"),
    "retried": ("↻", "yellow", "failed, then retried (the next cell)"),
    "running": ("▶", "bold cyan", "running"),
    "starting": ("▷", "cyan", "claimed, starting"),
    "queued": ("◇", "cyan", "waiting to start (a retry, a buffered slot)"),
    "skipped": ("·", "bright_black", "skipped (still running, buffer full)"),
    "missed": ("○", "yellow", "missed (no engine ran the slot in time)"),
    "cancelled": ("⊘", "magenta", "cancelled or replaced"),
}
_BY_STATE = {
    "succeeded": "succeeded",
    "failed": "failed",
    "running": "running",
    "accepted": "running",
    "claimed": "starting",
    "queued": "queued",
    "skipped": "skipped",
    "cancelled": "cancelled",
}
SLOT_WIDTH = 2  # a gap, then the glyph: cells read apart, the newest ends the line
NAME_MIN, NAME_MAX = 8, 24
LOADING = ("…", "bright_black")  # a row whose runs are not read yet


def outcomes(runs: Sequence[Occurrence]) -> list[str]:
    """The outcome of each of a task's runs, given newest first. A failed attempt that a
    later attempt of the same slot followed is `retried`; a slot skipped by a misfire
    policy (the engine was down or behind) is `missed`."""
    later: dict[int, int] = {}  # first attempt's id: the highest attempt seen (newer)
    found = []
    for occ in runs:
        first = occ.retry_of or occ.id
        outcome = _BY_STATE.get(occ.state, "skipped")
        if outcome == "failed" and later.get(first, 0) > occ.attempt:
            outcome = "retried"
        elif outcome == "skipped" and (occ.detail or "").startswith("misfire"):
            outcome = "missed"
        later[first] = max(later.get(first, 0), occ.attempt)
        found.append(outcome)
    return found


@dataclass(frozen=True)
class Fit:
    """How a width is shared: the task names' column, then as many slots as fit."""

    name_width: int
    slots: int

    @property
    def used(self) -> int:
        return self.name_width + self.slots * SLOT_WIDTH


def fit_slots(width: int) -> Fit:
    """A quarter of the width for names (8 to 24 cells), the rest for cells."""
    name = max(NAME_MIN, min(NAME_MAX, width // 4))
    if width <= name:
        return Fit(max(0, width), 0)
    return Fit(name, (width - name) // SLOT_WIDTH)


def _name(text: str, width: int) -> str:
    text = safe_text(text)
    if cell_len(text) > width:
        text = text[: max(0, width - 1)] + "…"
    return text + " " * (width - cell_len(text))


def row_cells(name: str, runs: Sequence[Occurrence] | None, fit: Fit) -> list[Cell]:
    """One row: the name cell, then `fit.slots` cells left to right (oldest to newest),
    each SLOT_WIDTH wide; blank where the task has no run that old; a row whose runs are
    not read yet (None) shows one muted … at the newest end."""
    cells: list[Cell] = [(_name(name, fit.name_width), "bold")]
    pad = " " * (SLOT_WIDTH - 1)
    if runs is None:
        marks = [LOADING] if fit.slots else []
    else:
        marks = [(OUTCOMES[o][0], OUTCOMES[o][1]) for o in outcomes(runs[: fit.slots])]
    blanks = fit.slots - len(marks)
    cells.extend((" " * SLOT_WIDTH, "") for _ in range(blanks))
    cells.extend((pad + glyph, style) for glyph, style in reversed(marks))
    return cells


def slot_at(x: int, fit: Fit) -> int | None:
    """The slot (0 the newest) under screen column `x` of a row, if any."""
    if x < fit.name_width or x >= fit.used:
        return None
    return fit.slots - 1 - (x - fit.name_width) // SLOT_WIDTH


def cell_x(slot: int, fit: Fit) -> int:
    """The screen column of slot `slot`'s glyph (0 the newest)."""
    return fit.name_width + (fit.slots - 1 - slot) * SLOT_WIDTH + SLOT_WIDTH - 1


def header_text(fit: Fit, width: int) -> str:
    """TASK over the names; over the cells, which way is older and which newer."""
    left = "TASK".ljust(fit.name_width)
    room = width - fit.name_width
    older, newer = " ← older", "newer →"
    if room >= len(older) + len(newer) + 1:
        cells = older + " " * (room - len(older) - len(newer)) + newer
    else:
        cells = newer.rjust(room)[:room] if room > 0 else ""
    return (left + cells)[:width]


def cell_text(
    task_name: str,
    slot: int,
    runs: Sequence[Occurrence] | None,
    now: int,
    zone: tzinfo,
) -> str:
    """What the pane's title says of the cell under the cursor: the task, the run's slot
    time, its outcome and how long it took (or runs, or waits)."""
    name = safe_text(task_name)
    if runs is None:
        return f"{name} · reading its runs"
    if slot >= len(runs):
        older = "no runs yet" if not runs else "no run this far back"
        return f"{name} · {older}"
    occ = runs[slot]
    outcome = outcomes(runs[: slot + 1])[slot]
    parts = [name, f"run {occ.id}", f"slot {when_text(occ.scheduled_for, now, zone)}"]
    parts.append(_outcome_words(occ, outcome))
    took = _took(occ, outcome, now)
    if took:
        parts.append(took)
    return " · ".join(parts)


def _outcome_words(occ: Occurrence, outcome: str) -> str:
    words = {"starting": "starting", "missed": "missed"}.get(outcome, outcome)
    if outcome == "retried":
        words = "failed, retried"
    if outcome in ("failed", "retried", "succeeded", "cancelled"):
        code = outcome_code(occ)
        if code and code not in ("0", "CANCELLED"):
            words += f" ({'exit ' + code if code.lstrip('-').isdigit() else code})"
    if occ.attempt > 1:
        words += f", attempt {occ.attempt}"
    if occ.kind in ("manual", "backfill"):
        words += f", {occ.kind}"
    return words


def _took(occ: Occurrence, outcome: str, now: int) -> str:
    if outcome == "running" and occ.started_at is not None:
        return f"for {span(now - occ.started_at)}"
    if outcome == "queued":
        return f"starts in {countdown(occ.retry_at or occ.scheduled_for, now)}"
    if outcome == "missed":
        count = occ.missed or occ.covers  # a misfire skip stands for `covers` slots
        return f"{count} slot{'s' if count != 1 else ''} missed"
    if outcome == "skipped":
        return safe_text((occ.detail or "").split(" (")[0])
    if occ.started_at is not None and occ.finished_at is not None:
        return f"took {span(occ.finished_at - occ.started_at)}"
    return ""


def legend() -> list[tuple[str, str]]:
    """(glyph, meaning) of every outcome: the help screen's and README's legend."""
    return [(glyph, meaning) for glyph, _, meaning in OUTCOMES.values()]

"""What the run view says of a run: its facts pane and its output pane's subtitle. Pure: a
run, `now` and what the view holds in, text out."""

from __future__ import annotations

from bisect import bisect_left
from datetime import tzinfo

from rich.console import Group
from rich.table import Table
from rich.text import Text

from tickui.common.redact import safe_text
from tickui.model.records import Occurrence
from tickui.ui.view.cells import (
    STATE_STYLE,
    attempt_text,
    detail_text,
    duration,
    lateness,
    outcome_code,
    stamp_in,
)

KIND_WORD = {"manual": "manual", "scheduled": "scheduled", "backfill": "backfill"}
MATCH_COUNT_CAP = 10_000  # counted no further (vim's search count stops at >99)


def facts(
    occ: Occurrence,
    now: int,
    zone: tzinfo,
    retries: int | None,
    log_state: Text,
    log_path: str | None,
    worker: str | None,
) -> Group:
    """The facts pane: state, kind, times, exit, attempt and the output's state, then the
    log's path on a line of its own (the longest fact and the one to copy). `log_path` is
    shown as given (the caller labels it); a run a worker ran says which worker."""
    table = Table.grid(padding=(0, 1), expand=True)
    for style, least in (("bright_black", 9), ("", None), ("bright_black", 6), ("", None)):
        # a label is never cut: "sche…" says nothing; long values are cut instead
        table.add_column(
            style=style,
            no_wrap=True,
            overflow="ellipsis",
            min_width=least,
            ratio=None if least else 1,  # labels keep their width, values share the rest
        )
    code = outcome_code(occ) or "-"
    reason = detail_text(occ)
    slots = f"covers {occ.covers} slot{'s' if occ.covers != 1 else ''}"
    if occ.missed:
        slots += f", {occ.missed} missed"
    table.add_row(
        "state",
        Text(occ.state, STATE_STYLE.get(occ.state, "")),
        "kind",
        f"{KIND_WORD.get(occ.kind, occ.kind)} · {slots}",
    )
    table.add_row(
        "scheduled",
        stamp_in(occ.scheduled_for, zone),
        "started",
        f"{stamp_in(occ.started_at, zone)} ({lateness(occ)} late)"
        if occ.started_at is not None
        else "-",
    )
    # no code yet (running, skipped): the reason is a note, not an exit
    table.add_row(
        "took",
        duration(occ, now) + (" so far" if occ.active else ""),
        "note" if code == "-" and reason else "exit",
        Text(exit_text(code, reason), "red" if code not in ("0", "-") else "")
        if code != "-"
        else reason or "-",
    )
    attempt = attempt_text(occ, retries, now).removeprefix("attempt ") or "1"
    if occ.retry_of is not None:
        attempt += f" (retry of run {occ.retry_of})"
    table.add_row("attempt", attempt, "output", log_state)
    log = Table.grid(padding=(0, 1), expand=True)
    log.add_column(style="bright_black", no_wrap=True, min_width=9)
    log.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
    if worker is not None:  # the whole log is on the worker's machine
        log.add_row("worker", Text(safe_text(worker), "bold"))
        log.add_row("log", f"{safe_text(log_path)} (on {safe_text(worker)})" if log_path else "-")
    else:
        log.add_row("log", safe_text(log_path) if log_path else "-")
    return Group(table, log)


def exit_text(code: str, reason: str) -> str:
    """`3: disk full`, not `3: exit 3: disk full` when the reason names the code itself."""
    if not reason:
        return code
    return reason if reason.startswith(f"exit {code}") else f"{code}: {reason}"


def match_text(
    matched: list[int], counted_to: int, counted: bool, capped: bool, match: int | None
) -> str:
    """`match 3/812` (`3/…` while counting), or why there is none. `matched`: the lines
    matching counted so far (sorted), up to line `counted_to`; `match`: the line shown."""
    total = f"{len(matched):,}" if counted else "…"
    if capped:
        total = f">{MATCH_COUNT_CAP:,}"
    if match is None:
        return "no match" if counted and not matched else f"{total} matches"
    if match < counted_to or (counted and not capped):
        return f"match {bisect_left(matched, match) + 1:,}/{total}"
    return f"line {match + 1:,}, matches {total}"


def output_subtitle(
    first: int,
    bottom: int,
    count: int,
    state: list[str],
    searched: list[str],
    notice: str,
    room: int,
) -> str:
    """The output pane's subtitle in `room` columns: the long form, then shorter ones until
    it fits. The match count and the wrap notice are what a search is read for, so they
    are cut last. `state` and `searched`: each part's forms, longest first."""
    lines = [f"lines {first}-{bottom} of {count:,}", f"{first}-{bottom}/{count:,}"]
    notices = [notice, notice.replace("search hit ", "hit ")]
    subtitle = ""
    for variant in shorter_forms(lines, state, searched, notices):
        subtitle = " · ".join(part for part in variant if part)
        if len(subtitle) <= room:
            break
    return subtitle


def shorter_forms(*choices: list[str]) -> list[tuple[str, ...]]:
    """Each part's choices, longest first, shortened one step at a time from the first
    part on (a part out of shorter forms keeps its last): the variants from longest to
    shortest."""
    steps = [0] * len(choices)
    variants = [tuple(c[0] for c in choices)]
    for part, options in enumerate(choices):
        for step in range(1, len(options)):
            steps[part] = step
            variants.append(tuple(c[i] for c, i in zip(choices, steps, strict=True)))
    return variants

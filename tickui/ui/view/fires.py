"""The detail screen's fire times and why each is when it is (tickui.model.upcoming's
reasons): plain text, no widgets."""

from __future__ import annotations

from datetime import tzinfo

from rich.text import Text

from tickui.model.upcoming import Fire
from tickui.ui.view.cells import stamp_in

MARK = " •"  # a fire time with reasons, told in the pane below


def next_lines(fires: list[Fire], zone: tzinfo) -> str:
    """The next fire times (the slots not yet passed), one a line: the 19-character stamp
    (the zone is in the pane's title), marked when it has reasons."""
    return "\n".join(
        stamp_in(fire.at, zone).rsplit(" ", 1)[0] + (MARK if fire.reasons else "")
        for fire in fires
        if not fire.pending
    )


def why_text(fires: list[Fire], zone: tzinfo) -> Text | None:
    """Each fire time with reasons, then its reasons, one a line (a jittered one's planned
    time is in its jitter reason); None when no fire time has any (plain times need no
    telling)."""
    text = Text()
    for fire in fires:
        if not fire.reasons:
            continue
        if text:
            text.append("\n")
        text.append(stamp_in(fire.at, zone), "bold")
        if fire.pending:
            text.append(" (passed: the next scan)", "yellow")
        for reason in fire.reasons:
            text.append(f"\n  {reason}")
    return text or None

"""A task's recent audit entries as the detail screen shows them: one line each, newest
first (when, who, from where, what, the detail). Pure: no widgets, no I/O."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import tzinfo

from rich.text import Text

from tickui.common.redact import safe_text
from tickui.model.audit import AuditEntry
from tickui.ui.view.cells import when_text

AUDIT_SHOWN = 4  # lines on the detail screen


def audit_text(entries: Sequence[AuditEntry], now: int, zone: tzinfo) -> Text:
    if not entries:
        return Text("no actions recorded", "bright_black")
    text = Text()
    for index, entry in enumerate(entries[:AUDIT_SHOWN]):
        if index:
            text.append("\n")
        text.append(f"{when_text(entry.at, now, zone)}  ", "bright_black")
        text.append(safe_text(f"{entry.user}@{entry.host}"))
        text.append(f" ({entry.origin})  ", "bright_black")
        text.append(entry.action, "bold")
        if entry.detail:
            text.append(f"  {safe_text(entry.detail)}", "bright_black")
    return text

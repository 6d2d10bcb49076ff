"""The alert hooks' recent deliveries, newest first, with their outcome (key `h`).

The screen is given what it shows (a loader of deliveries, the service's counts, the
zone): it knows nothing of the app. It reads again each second while open, so deliveries
by another process on the same database (a `tickui run`) show too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, tzinfo
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from tickui.common.redact import safe_text
from tickui.store import Delivery
from tickui.ui.view.cells import Cell, stamp_in
from tickui.ui.view.columns import DELIVERY_COLUMNS
from tickui.ui.view.layout import FittedTable

OUTCOME_STYLE = {"delivered": "green", "failed": "bold red", "pending": "yellow"}
SHOWN = 50


def status_text(status: dict[str, Any] | None) -> Text:
    """The service's counts in one line, or why there are none."""
    if status is None:
        return Text("No [[hook]] in tickui.toml: this dashboard calls none.", "bright_black")
    parts = [f"{status['hooks']} hook{'s' if status['hooks'] != 1 else ''}"]
    for key in ("delivered", "failed", "waiting", "dropped", "errors"):
        if status.get(key) or key in ("delivered", "failed"):
            parts.append(f"{key} {status.get(key, 0)}")
    style = "bold red" if status.get("failed") or status.get("dropped") else ""
    return Text(" · ".join(parts) + " (since this dashboard started)", style)


def deliveries_table(deliveries: list[Delivery], zone: tzinfo = UTC) -> FittedTable | Text:
    if not deliveries:
        return Text("No deliveries recorded yet.", "bright_black")
    rows: list[list[Cell]] = [
        [
            (stamp_in(d.created_at, zone), ""),
            (safe_text(d.hook), ""),
            (d.event, ""),
            (safe_text(d.task or "-"), ""),
            (str(d.occurrence_id) if d.occurrence_id is not None else "-", ""),
            (d.outcome, OUTCOME_STYLE.get(d.outcome, "")),
            (str(d.attempts), ""),
            (safe_text(d.detail or "").replace("\n", " "), "bright_black"),
        ]
        for d in deliveries
    ]
    return FittedTable(DELIVERY_COLUMNS, rows)


class HooksScreen(ModalScreen[None]):
    """Recent hook deliveries; esc or h closes."""

    BINDINGS = [Binding("escape,h,q", "close", "Close")]
    DEFAULT_CSS = """
    HooksScreen { align: center middle; }
    HooksScreen > Vertical {
        width: 95%;
        height: 85%;
        border: round $primary;
        background: $surface;
        padding: 0 1;
    }
    HooksScreen #hooks-status { height: auto; margin-bottom: 1; }
    HooksScreen #hooks-list { height: 1fr; overflow-y: auto; }
    """

    def __init__(
        self,
        load: Callable[[int], Awaitable[list[Delivery]]],
        status: Callable[[], dict[str, Any] | None],
        zone: tzinfo = UTC,
    ) -> None:
        super().__init__()
        self._load = load
        self._status = status
        self._zone = zone
        self.deliveries: list[Delivery] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Alert hooks: recent deliveries (esc closes)", classes="dialog-title")
            yield Static(id="hooks-status")
            yield Static(id="hooks-list")

    async def on_mount(self) -> None:
        await self.reload()
        self.set_interval(1.0, self.reload)

    async def reload(self) -> None:
        try:
            deliveries = await self._load(SHOWN)
        except Exception as exc:  # the store went away: say so, keep the screen
            self.query_one("#hooks-list", Static).update(
                Text(safe_text(f"could not read deliveries: {exc}"), "red")
            )
            return
        self.query_one("#hooks-status", Static).update(status_text(self._status()))
        if deliveries != self.deliveries or not self.deliveries:
            self.deliveries = deliveries
            self.query_one("#hooks-list", Static).update(deliveries_table(deliveries, self._zone))

    def action_close(self) -> None:
        self.dismiss(None)

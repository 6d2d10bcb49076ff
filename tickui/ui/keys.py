"""Every key of the dashboard in one place: the bindings, the footer's order, the help
screen's groups, the palette and README's keys table all read this."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from textual.binding import Binding

from tickui.ui.view.grid import legend


@dataclass(frozen=True)
class Key:
    key: str
    action: str
    label: str  # in the footer and the palette
    text: str  # in the help screen
    rank: int  # the footer drops high ranks first when narrow; 0 always shows
    show: bool = True
    priority: bool = False  # before the focused widget's own (an input's ctrl+c copies)


KEY_GROUPS: list[tuple[str, list[Key]]] = [
    ("Runs", [
        Key("r", "run_now", "Run now", "Run the selected task now (its schedule does not move)", 2),
        Key("enter", "detail", "Open",
            "Open: a task's detail (Tasks pane) or a run's output (Occurrences pane)", 3),
        Key("c", "cancel_run", "Cancel run",
            "Cancel the selected running or waiting run (asks first); while quitting: all of them",
            4),
    ]),
    ("Tasks", [
        Key("a", "add_task", "Add",
            "Add a task (the form checks it as you type; enter saves it once valid)", 6),
        Key("E", "edit_task", "Edit", "Edit the selected task (the add form, filled in)", 9),
        Key("e", "toggle_enabled", "Enable/disable", "Enable or disable the selected task", 5),
        Key("d", "delete_task", "Delete", "Delete the selected task (asks first; history stays)",
            10),
    ]),
    ("View", [
        Key("slash", "filter", "Filter",
            "Filter the focused pane by task name (enter keeps it, esc clears it)", 7),
        Key("escape", "clear_filter", "Clear filter",
            "Clear the focused pane's filters (name, state, task)", 7, show=False),
        Key("F", "cycle_state", "State",
            "Occurrences: show all, failed, running or not skipped runs", 12),
        Key("T", "follow_task", "Only",
            "Occurrences: only the selected task's runs (again: every task's)", 13),
        Key("S", "cycle_sort", "Sort",
            "Tasks: sort by the next column; click a header to sort by it, again to reverse",
            11),
        Key("v", "cycle_view", "View",
            "Tasks pane: the table, a history grid of recent runs, or a day timeline", 11),
        Key("z", "cycle_zone", "Zone", "Times in local time, UTC or each task's own zone", 14),
        Key("H", "toggle_side", "Side panes",
            "Hide or show the side panes (ticks, breaker, workers)", 15),
        Key("h", "hooks", "Hooks",
            "Alert hooks: recent deliveries and their outcome (hook entries in tickui.toml)",
            18),
        Key("tab", "focus_next", "Next pane", "Move between the Tasks and Occurrences panes", 20,
            show=False),
    ]),
    ("Engine", [
        Key("s", "toggle_engine", "Start/stop engine",
            "Start or stop the engine (stopping asks first, except on the demo's database)", 8),
        Key("t", "toggle_ticker", "Start/stop ticker", "Start or stop the tick emitter", 16),
        Key("f", "toggle_failures", "Fail publishes",
            "Simulate publish failures (watch the breaker; asks first on a real database)", 17),
    ]),
    ("App", [
        Key("question_mark", "help", "Help", "This help", 0),
        Key("q", "quit", "Quit", "Quit (asks about active runs)", 0),
        Key("ctrl+c", "quit", "Quit", "Quit, as q does (also in a form: it asks first)", 0,
            show=False, priority=True),
    ]),
]  # fmt: skip
KEYS = [(k.key, k.action, k.label, k.text) for _, keys in KEY_GROUPS for k in keys]
RANKS = {k.action: k.rank for _, keys in KEY_GROUPS for k in keys}
SHOWN_KEY = {"question_mark": "?", "slash": "/", "escape": "esc"}

# Keys that act on the dashboard's panes: off under dialogs (the detail screen uses some).
TASK_ACTIONS = (
    "run_now", "toggle_enabled", "delete_task", "detail", "cancel_run", "add_task", "filter",
    "toggle_failures", "edit_task",
)  # fmt: skip
VIEW_ACTIONS = (
    "cycle_state", "follow_task", "cycle_sort", "cycle_zone", "toggle_side", "hooks",
    "clear_filter", "cycle_view",
)  # fmt: skip
DASHBOARD_GROUPS = ("Runs", "Tasks", "View")  # the dashboard screen's; the rest are the app's
DETAIL_DASHBOARD_ACTIONS = ("detail", "edit_task", "toggle_enabled")  # bound on a task's detail too
QUITTING_OFF = frozenset(TASK_ACTIONS + VIEW_ACTIONS + ("toggle_engine", "toggle_ticker")) - {
    "cancel_run"
}  # keys that mean nothing while quit waits for the runs


def bindings(*, groups: Iterable[str] = (), actions: Iterable[str] = ()) -> list[Binding]:
    """The Textual bindings of the keys in `groups` or acting with one of `actions`, in
    the order above (the footer's)."""
    groups, actions = set(groups), set(actions)
    return [
        Binding(
            k.key,
            k.action,
            k.label,
            show=k.show,
            key_display=SHOWN_KEY.get(k.key),
            priority=k.priority,
        )
        for title, keys in KEY_GROUPS
        for k in keys
        if title in groups or k.action in actions
    ]


def rank(action: str) -> int:
    """The footer drops high ranks first; a key not listed here goes last."""
    return RANKS.get(action, 50)


MOVING = [
    ("↑ ↓ pgup pgdn", "Move in a pane; mouse wheel and click work too"),
    (
        "home end",
        "First / last row. The Tasks order holds off the first row and for 5 s "
        "after a key (rows never move under the cursor); home resumes it",
    ),
    ("ctrl+p", "Command palette (all of the above, and themes)"),
]
# The history grid (v): its moves, then what each cell's glyph says (colour says it again).
GRID_KEYS = [
    ("← → enter", "An older / a newer run of the task (↑ ↓ another task); enter opens the run."
     " The pane's title says the run: its slot, outcome and duration"),
    *(
        (" ".join(glyph for glyph, _ in part), "; ".join(f"{g} {m}" for g, m in part))
        for part in (legend()[:4], legend()[4:])
    ),
]  # fmt: skip
APP_KEYS = [
    ("?", "This help"),
    ("q", "Quit (asks about active runs)"),
    ("ctrl+c", "Quit, as q does (also in a form: it asks first)"),
]

# The other screens' keys, for their help and README (tests check them against each
# screen's bindings, so neither can drift).
DETAIL_KEYS = [
    ("↑ ↓ k j", "Pick an older or newer run"),
    ("enter", "Open the picked run's output view"),
    ("r", "Run the task now"),
    ("c", "Cancel the picked run (asks first)"),
    ("e", "Enable or disable the task"),
    ("E", "Edit the task (the add form, filled in)"),
    ("esc", "Back to the dashboard"),
]
RUN_VIEW_KEYS = [
    ("g home / G end", "First line / last line and follow new lines (as less's F)"),
    ("↑ ↓ k j pgup pgdn b space", "Scroll; any move up stops following, new lines never move"
     " the view then"),
    ("← → h l", "Scroll sideways: a line cut at an edge of the view ends there in …"),
    ("f", "Follow new lines or stop (on while the run runs)"),
    ("/", "Search the whole log as shown (a hidden secret as ***) from the view's top:"
     " lowercase ignores case, a capital makes it case-sensitive, re:… is a regular"
     " expression; the status shows match 3/812"),
    ("n / N", "Next / previous match from the view (wraps at the end, and says so)"),
    ("y", "Copy the current match or the clicked line (OSC 52); shift-drag selects text in"
     " most terminals"),
    ("c", "Cancel this run while it runs (asks first)"),
    ("o", "Open the log in $PAGER (default less -R); the engine keeps running"),
    ("esc", "Back"),
]  # fmt: skip
SCREENS = {"dashboard": "Dashboard", "detail": "Task detail", "run": "Run output view"}


def help_groups(screen: str = "dashboard") -> list[tuple[str, list[tuple[str, str]]]]:
    """The help screen's sections for one screen: its keys grouped by purpose."""
    if screen == "detail":
        return [("Task detail", DETAIL_KEYS), ("App", APP_KEYS)]
    if screen == "run":
        return [("Run output view", RUN_VIEW_KEYS), ("App", APP_KEYS)]
    groups = [
        (title, [(SHOWN_KEY.get(k.key, k.key), k.text) for k in keys]) for title, keys in KEY_GROUPS
    ]
    return [*groups, ("History grid", GRID_KEYS), ("Moving", MOVING)]


def keys_markdown() -> str:
    """README's keys table, made from the same source as the help screens."""
    lines = ["| Key | What it does |", "| --- | --- |"]
    for screen, name in SCREENS.items():
        for title, keys in help_groups(screen):
            if screen != "dashboard" and title == "App":
                continue
            heading = title if screen == "dashboard" else name
            lines.append(f"| **{heading}** | |")
            for key, text in keys:
                shown = key.replace("|", "\\|")
                lines.append(f"| `{shown}` | {text} |")
    return "\n".join(lines) + "\n"

"""Small dialogs over the dashboard: help, a yes/no question, how to quit.

Each dialog has its own Footer: a modal screen's binding chain stops at the screen, so
the footer lists the dialog's keys, not the dashboard's. A destructive choice never has
the focus, so enter cannot delete, cancel or kill anything.
"""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Label, Static

KeyGroups = list[tuple[str, list[tuple[str, str]]]]


class HelpScreen(ModalScreen[None]):
    """Every key of the screen it was opened from, grouped by purpose; scrolls when tall."""

    DEFAULT_CSS = """
    HelpScreen {
        align: center middle;
    }
    HelpScreen #help-box {
        max-width: 95%;
        height: auto;
        max-height: 90%;
    }
    HelpScreen #help-body {
        height: auto;
    }
    """
    BINDINGS = [
        Binding("escape,question_mark,q", "dismiss", "Close", key_display="esc"),
        Binding("down,j", "scroll(1)", "Scroll", show=False),
        Binding("up,k", "scroll(-1)", "Scroll", show=False),
        Binding("pagedown,space", "scroll(10)", "Scroll", show=False),
        Binding("pageup", "scroll(-10)", "Scroll", show=False),
        Binding("end,G", "scroll(1_000_000)", "Scroll", show=False),
        Binding("home,g", "scroll(-1_000_000)", "Scroll", show=False),
    ]

    def __init__(self, groups: KeyGroups | list[tuple[str, str]]) -> None:
        super().__init__()
        # A flat (key, text) list is one group, so older callers keep working.
        if groups and isinstance(groups[0][1], str):
            groups = [("Keys", list(groups))]  # type: ignore[list-item]
        self.groups: KeyGroups = groups  # type: ignore[assignment]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box", classes="dialog") as box:
            box.styles.width = 110  # inline: wider than the app's .dialog rule
            yield Label("Keys", classes="dialog-title")
            yield Static(help_text(self.groups), id="help-body")
        yield Footer()

    def action_scroll(self, step: int) -> None:
        box = self.query_one("#help-box", VerticalScroll)
        box.scroll_to(y=max(0, box.scroll_y + step), animate=False)


def help_text(groups: KeyGroups) -> Table:
    """Group titles in bold, then one key and its description per line (no blank lines:
    at 120x40 every key of the dashboard shows without scrolling)."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for title, keys in groups:
        table.add_row(Text(title, "bold"), "")
        for key, description in keys:
            table.add_row(key, description)
    return table


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question for a destructive action: focus on No, enter answers No, `y` Yes."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No", key_display="n/esc"),
        Binding("enter", "answer(False)", "No", show=False, priority=True),
    ]

    def __init__(self, question: str, yes_label: str = "Yes (y)", no_label: str = "No (n)") -> None:
        super().__init__()
        self.question = question
        self.yes_label = yes_label
        self.no_label = no_label

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="dialog-title")
            with Horizontal(classes="buttons"):
                yes = Button(self.yes_label, variant="error", id="yes")
                yes.can_focus = False  # only `y` or a click confirms
                yield yes
                yield Button(self.no_label, id="no")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


class QuitScreen(ModalScreen[str | None]):
    """Asked on quit while runs are active: wait for them, cancel them, or stay."""

    BINDINGS = [
        Binding("w", "choose('wait')", "Wait for them"),
        Binding("c", "choose('cancel')", "Cancel them"),
        Binding("escape", "choose(None)", "Stay"),
    ]

    def __init__(self, active: int) -> None:
        super().__init__()
        self.active = active

    def compose(self) -> ComposeResult:
        runs = "1 run is" if self.active == 1 else f"{self.active} runs are"
        with Vertical(classes="dialog"):
            yield Label(f"{runs} still active. Quit how?", classes="dialog-title")
            with Horizontal(classes="buttons"):
                yield Button("Wait (w)", variant="primary", id="wait")
                cancel = Button("Cancel them (c)", variant="error", id="cancel")
                cancel.can_focus = False  # only `c` or a click cancels runs
                yield cancel
                yield Button("Stay (esc)", id="stay")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#stay", Button).focus()

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "stay" else event.button.id)

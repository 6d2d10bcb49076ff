"""Small dialogs over the dashboard: help, a yes/no question, how to quit."""

from __future__ import annotations

from rich.table import Table
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,question_mark,q", "dismiss", "Close")]

    def __init__(self, keys: list[tuple[str, str]]) -> None:
        super().__init__()
        self.keys = keys

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, description in self.keys:
            table.add_row(key, description)
        with Vertical(id="help-box", classes="dialog"):
            yield Label("Keys", classes="dialog-title")
            yield Static(table)
            yield Label("Also in the command palette (ctrl+p). Esc closes.", classes="hint")


class ConfirmScreen(ModalScreen[bool]):
    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, classes="dialog-title")
            with Horizontal(classes="buttons"):
                yield Button("Delete (y)", variant="error", id="yes")
                yield Button("Keep (n)", id="no")

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
                yield Button("Cancel them (c)", variant="error", id="cancel")
                yield Button("Stay (esc)", id="stay")

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)

    @on(Button.Pressed)
    def pressed(self, event: Button.Pressed) -> None:
        self.dismiss(None if event.button.id == "stay" else event.button.id)

"""The tickui dashboard: the engine and ticker in the UI's own loop, shown live.

The app makes the `Board` (what the dashboard shows), boots the host into it, and owns
the keys about the whole app (the engine, the ticker, help, quit); the dashboard screen
owns the keys that act on its panes, and its `LiveRefresh` keeps them current.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from textual import work
from textual.app import App, SystemCommand
from textual.driver import Driver
from textual.screen import ModalScreen, Screen
from textual.theme import Theme

from tickui.common.errors import BAD_INPUT, TickuiError
from tickui.common.redact import redact
from tickui.runtime.host import Host
from tickui.ticks.breaker import CLOSED
from tickui.ui.board import Board
from tickui.ui.keys import (
    DASHBOARD_GROUPS,
    KEY_GROUPS,
    KEYS,
    QUITTING_OFF,
    SHOWN_KEY,
    TASK_ACTIONS,
    bindings,
    help_groups,
)
from tickui.ui.screens.dashboard import Dashboard
from tickui.ui.screens.detail import DetailScreen
from tickui.ui.screens.dialogs import ConfirmScreen, HelpScreen, QuitScreen
from tickui.ui.screens.form import AddTaskScreen
from tickui.ui.screens.run import RunScreen

WAIT_FOREVER = 24 * 3600.0
WATCHING = (
    "this dashboard only watches (--watch): it hosts no engine or ticker; the lease holder runs"
)

HostFactory = Callable[[], Awaitable[Host]]
DETAIL_APP_ACTIONS = frozenset(
    {"help", "quit", "detail", "run_now", "pop_screen", "toggle_enabled", "edit_task"}
)  # what means something on a task's detail (the dashboard's as palette commands there)
DASHBOARD_ACTIONS = frozenset(
    k.action for title, keys in KEY_GROUPS if title in DASHBOARD_GROUPS for k in keys
)


class TickuiApp(App[int]):
    CSS_PATH = "tickui.tcss"
    TITLE = "tickui"
    BINDINGS = bindings(groups=[title for title, _ in KEY_GROUPS if title not in DASHBOARD_GROUPS])

    def __init__(
        self,
        factory: HostFactory,
        *,
        header_clock: bool = True,
        bell: bool = False,
        settings_file: Path | None = None,
        driver_class: type[Driver] | None = None,
    ) -> None:
        """`settings_file`: where view choices are kept (default: the user's config folder;
        fixed scenes such as screenshots give their own); `bell`: ring on a failed run."""
        super().__init__(driver_class=driver_class)
        self.factory = factory
        self.header_clock = header_clock
        self.board = Board(settings_file, self._settings_not_saved)
        self.dashboard = Dashboard(self.board, ring_bell=bell)
        self.live = self.dashboard.live
        self._leaving: asyncio.Task | None = None
        self._asking_to_discard: ConfirmScreen | None = None  # quit asked over a typed form
        self.failure: str | None = None
        if self.board.prefs.theme:
            with contextlib.suppress(Exception):  # a theme this Textual does not know
                self.theme = self.board.prefs.theme

    @property
    def host(self) -> Host | None:
        return self.board.host

    @property
    def ready(self) -> asyncio.Event:
        """Set once the host is up and the first picture is on the dashboard."""
        return self.board.ready

    # ---- start and stop ---------------------------------------------------------------

    def on_mount(self) -> None:
        self.push_screen(self.dashboard)
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        if self.board.prefs_problem:
            self.notify(self.board.prefs_problem, title="Settings", severity="warning")
        self.call_after_refresh(self.dashboard.show_titles)
        self.call_after_refresh(self.dashboard.show_side)
        self._boot()

    @work(exclusive=True, group="boot")
    async def _boot(self) -> None:
        try:
            host = await self.factory()
        except TickuiError as exc:  # bad input exits 2; a fault (a port in use, say) 1
            self.failure = redact(str(exc))
            self.exit(2 if isinstance(exc, BAD_INPUT) else 1)
            return
        self.board.host = host
        await self.live.start(host)
        await host.start()
        self.live.run_seconds()
        await self.live.drain()
        self.ready.set()
        self.dashboard.show_titles()  # an empty database's hint, at once
        self.refresh_bindings()

    async def on_unmount(self) -> None:
        if self.host is not None:
            await self.host.close()

    def _settings_not_saved(self, message: str) -> None:
        self.notify(message, title="Settings", severity="warning")

    def _theme_changed(self, theme: Theme) -> None:
        if theme.name != self.board.prefs.theme:
            self.board.remember(theme=theme.name)

    # ---- keys -------------------------------------------------------------------------

    def shown_screen_allows(self, action: str) -> bool:
        """The run view and a task's detail show their own keys (and help, quit)."""
        if isinstance(self.screen, RunScreen):
            return action in ("help", "quit")
        if isinstance(self.screen, DetailScreen):
            return action in DETAIL_APP_ACTIONS
        return True

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.shown_screen_allows(action):
            return False
        if self.board.quitting and action in QUITTING_OFF:
            return False
        if action in TASK_ACTIONS and isinstance(self.screen, ModalScreen):
            return False
        if action in TASK_ACTIONS or action in ("toggle_engine", "toggle_ticker"):
            return self.host is not None and self.ready.is_set()
        return True

    # ---- engine, ticker, simulated failures ----------------------------------------

    def action_toggle_engine(self) -> None:
        """Start at once; stop (no new runs start) only after a yes, as `f` asks, except
        on the demo's own database."""
        host = self.host
        if host.watch:
            self.notify(WATCHING, severity="warning")
            return
        if not host.engine.running or host.demo:
            self._toggle_engine()
            return

        def answered(yes: bool | None) -> None:
            if yes and host.engine.running:
                self._toggle_engine()

        active = host.engine.dispatcher.active()
        runs = f" The {active} active run(s) finish first." if active else ""
        self.push_screen(
            ConfirmScreen(
                f"Stop the engine? No run starts until you press s again.{runs}",
                yes_label="Stop the engine (y)",
                no_label="Keep it running (n)",
            ),
            answered,
        )

    @work(exclusive=True, group="engine")
    async def _toggle_engine(self) -> None:
        engine = self.host.engine
        if engine.running:
            active = engine.dispatcher.active()
            if active:
                self.notify(f"stopping the engine: waiting for {active} active run(s)")
            await engine.stop()
            self.notify("engine stopped")
        else:
            await engine.start()
            self.notify("engine started")
        self.live.status_dirty = True
        self.refresh_bindings()

    @work(exclusive=True, group="ticker")
    async def action_toggle_ticker(self) -> None:
        if self.host.watch:
            self.notify(WATCHING, severity="warning")
            return
        ticker = self.host.ticker
        if ticker.is_running:
            await ticker.stop()
            self.notify("ticker stopped: the engine waits for ticks")
        else:
            try:
                await ticker.start()
            except Exception as exc:
                self.notify(redact(f"ticker did not start: {exc}"), severity="error")
                return
            self.notify("ticker started")
        self.live.status_dirty = self.live.ticker_dirty = True

    def action_toggle_failures(self) -> None:
        """On the demo's own database at once; on a real one (its ticks matter to someone)
        only after a yes."""
        ticker = self.host.ticker
        if ticker.simulate_failures or self.host.demo:
            self._set_failures(not ticker.simulate_failures)
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self._set_failures(True)

        self.push_screen(
            ConfirmScreen(
                "Fail every tick publish on purpose? This is not the demo's database: "
                "consumers of these ticks miss them until you press f again.",
                yes_label="Fail publishes (y)",
                no_label="Keep publishing (n)",
            ),
            answered,
        )

    def _set_failures(self, on: bool) -> None:
        ticker = self.host.ticker
        ticker.simulate_failures = on
        if not on and ticker.breaker.state != CLOSED:
            self.live.failures_were_on = True
        self.notify(f"simulated publish failures {'on' if on else 'off'}", severity="warning")
        self.live.ticker_dirty = True
        self.live.show_ticker()

    # ---- help, palette, quitting --------------------------------------------------------

    def action_help(self) -> None:
        screen = self.screen
        kind = (
            "run"
            if isinstance(screen, RunScreen)
            else "detail"
            if isinstance(screen, DetailScreen)
            else "dashboard"
        )
        self.push_screen(HelpScreen(help_groups(kind)))

    async def action_help_quit(self) -> None:
        """Where Textual's own ctrl+c binding still answers: quit as `q` does, rather
        than say "press ctrl+q to quit"."""
        await self.action_quit()

    async def action_quit(self) -> None:
        """Quit, asking first when runs are active or a form holds what was typed (ctrl+c
        reaches here from inside a form's field too; pressed again while it asks, it is
        the yes)."""
        form = next(
            (s for s in self.screen_stack if isinstance(s, AddTaskScreen) and s.edited), None
        )
        if form is not None and not self.board.quitting:
            if self.screen is self._asking_to_discard:
                self.screen.dismiss(True)
                return

            async def answered(yes: bool | None) -> None:
                self._asking_to_discard = None
                if yes:
                    form.initial = None  # not asked again on the way out
                    await self._quit()

            self._asking_to_discard = ConfirmScreen(
                "Quit and discard the form? What you typed is lost.",
                "Quit (y)",
                "Keep editing (n)",
            )
            self.push_screen(self._asking_to_discard, answered)
            return
        await self._quit()

    async def _quit(self) -> None:
        if self.board.quitting:  # already on the way out: say so, and how to hurry it
            active = self.host.engine.dispatcher.active() if self.host else 0
            self.notify(f"already quitting: waiting for {active} run(s); c cancels them")
            return
        active = self.host.engine.dispatcher.active() if self.host else 0
        if not active:
            await self._leave(None)
            return

        def chosen(choice: str | None) -> None:
            if choice == "wait":
                self._wait_and_leave()
            elif choice is not None:
                self.call_later(self.hang_up)

        self.push_screen(QuitScreen(active), chosen)

    @work(exclusive=True, group="quit")
    async def _wait_and_leave(self) -> None:
        """Quit after the active runs end; meanwhile the header counts them down and `c`
        cancels them (the dashboard stays live: this waits in a worker)."""
        self.board.quitting = True
        self.live.status_dirty = True
        self.refresh_bindings()
        self.live.show_status()
        self._leaving = asyncio.current_task()
        await self.host.close(WAIT_FOREVER)
        self.exit(0)

    async def on_dashboard_hang_up(self, _message: Dashboard.HangUp) -> None:
        await self.hang_up()

    async def hang_up(self) -> None:
        """What `q` then "cancel them" does (also SIGHUP and SIGTERM): every active run
        cancelled and recorded, the host closed, exit 0."""
        host = self.host
        if host is not None and self.board.quitting:  # close() is already waiting for the runs
            ids = [o.id for o in await host.store.active_occurrences()]
            for occ_id in ids:
                with contextlib.suppress(Exception):
                    await host.engine.cancel(occ_id)
            waiter = self._leaving
            if waiter is not None and waiter is not asyncio.current_task():
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(asyncio.shield(waiter), 30)
            self.exit(0)
            return
        await self._leave(0.0)

    async def _leave(self, grace: float | None) -> None:
        if self.host is not None:
            await self.host.close(grace)
        self.exit(0)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's own (theme, quit, ...) once, then tickui's: no duplicates. Textual's
        "Keys" panel is left out: tickui's help (?) lists every key, grouped."""
        seen: set[str] = set()
        for command in super().get_system_commands(screen):
            if command.title == "Keys":
                continue
            seen.add(command.title.lower())
            yield command
        for key, action, label, text in KEYS:
            if action in ("focus_next", "quit") or label.lower() in seen:
                continue
            yield SystemCommand(f"{label} ({SHOWN_KEY.get(key, key)})", text, _runner(self, action))


def _runner(app: TickuiApp, action: str) -> Callable[[], Awaitable[None]]:
    """A palette command: the dashboard's keys act on the dashboard (a task's detail
    passes its own task), where the screen shown allows them."""

    async def run() -> None:
        if action not in DASHBOARD_ACTIONS:
            await app.run_action(action)
        elif app.shown_screen_allows(action):
            await app.run_action(action, app.dashboard)

    return run

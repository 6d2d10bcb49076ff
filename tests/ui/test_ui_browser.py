"""`tickui serve` in a real browser: headless Chromium opens the page, the dashboard shows
in its terminal, a key pressed in the page runs a task in the real SQLite file.

Chromium is driven over the Chrome DevTools Protocol (its websocket, aiohttp's client).
The page's xterm.js terminal draws on a canvas: a script installed before the page loads
keeps a reference to it, so that its text can be read back."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import pytest
from engine_procs import occurrences

from helpers import cli, wait_for
from services import free_port, services_required
from tickui.ui.keys import KEYS

pytestmark = pytest.mark.slow
RUN_NOW = next(key for key, action, *_ in KEYS if action == "run_now")

CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--remote-debugging-port=0", "--window-size=1400,900",
)  # fmt: skip
# textual-serve's page keeps its xterm.js Terminal in `this.terminal` of an object of its
# own; a setter on Object.prototype sees that assignment and keeps the terminal.
KEEP_TERMINAL = """
Object.defineProperty(Object.prototype, "terminal", {
  configurable: true,
  get() { return undefined; },
  set(value) {
    Object.defineProperty(this, "terminal", {value, writable: true, configurable: true});
    if (value && value.buffer && !window.tickuiTerminal) window.tickuiTerminal = value;
  },
});
"""
SCREEN_TEXT = """(() => {
  const term = window.tickuiTerminal;
  if (!term) return "";
  const buffer = term.buffer.active, rows = [];
  for (let i = 0; i < term.rows; i++) {
    const line = buffer.getLine(buffer.viewportY + i);
    rows.push(line ? line.translateToString(true) : "");
  }
  return rows.join("\\n");
})()"""


def chromium() -> str:
    found = shutil.which("chromium")
    if found is None:
        reason = "chromium is not installed (make test installs it)"
        if services_required():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return found


class DevTools:
    """One page of Chromium over the DevTools Protocol: commands by id, events passed over."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.last = 0

    async def call(self, method: str, **params: object) -> dict:
        self.last += 1
        wanted = self.last
        await self.ws.send_json({"id": wanted, "method": method, "params": params})
        async for message in self.ws:
            answer = message.json()
            if answer.get("id") == wanted:
                assert "error" not in answer, (method, answer["error"])
                return answer["result"]
        raise AssertionError(f"DevTools closed during {method}")

    async def text(self) -> str:
        found = await self.call("Runtime.evaluate", expression=SCREEN_TEXT, returnByValue=True)
        return found["result"].get("value") or ""

    async def press(self, key: str) -> None:
        code = f"Key{key.upper()}" if key.isalpha() else key
        said = {"key": key, "code": code, "windowsVirtualKeyCode": ord(key.upper())}
        await self.call("Input.dispatchKeyEvent", type="keyDown", text=key, **said)
        await self.call("Input.dispatchKeyEvent", type="keyUp", **said)


def children(pid: int) -> list[int]:
    """`pid`'s descendants, the deepest last."""
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [d for child in map(int, found) for d in (child, *children(child))]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def end(pids: list[int]) -> None:
    """Kill, by id, whatever of `pids` is still running."""
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def start_chromium(binary: str, profile: Path, log: Path) -> tuple[subprocess.Popen, int]:
    """Chromium on about:blank, and the port its DevTools listen on (from the profile)."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
        )  # fmt: skip
    active = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 20
    while not (active.exists() and active.read_text().count("\n") >= 1):
        assert proc.poll() is None, log.read_text()[-2000:]
        assert time.monotonic() < deadline, "Chromium did not open its DevTools port in 20 s"
        time.sleep(0.05)
    return proc, int(active.read_text().split()[0])


async def page_socket(session: aiohttp.ClientSession, port: int) -> str:
    async def listed() -> str | None:
        async with session.get(f"http://127.0.0.1:{port}/json/list") as reply:
            pages = [t for t in await reply.json() if t["type"] == "page"]
        return pages[0]["webSocketDebuggerUrl"] if pages else None

    return await wait_for(listed, timeout=10, what="Chromium's page")


async def test_the_served_dashboard_runs_a_task_from_a_key_pressed_in_the_browser(
    tmp_path: Path,
) -> None:
    binary = chromium()
    db = tmp_path / "served.db"
    added = cli("task", "add", "greet", "--cron", "0 0 1 1 *", "--", "sh", "-c", "echo hi", db=db)
    assert added.returncode == 0, added.stderr
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TICKUI_")}
    out, err = tmp_path / "serve.out", tmp_path / "serve.err"
    with open(out, "wb") as said, open(err, "wb") as complained:
        serve = subprocess.Popen(
            [sys.executable, "-m", "tickui", "--db", str(db), "serve", "--port", str(port)],
            stdin=subprocess.DEVNULL, stdout=said, stderr=complained, env=env, cwd=tmp_path,
        )  # fmt: skip
    browser: subprocess.Popen | None = None
    started: list[int] = [serve.pid]
    try:
        url = f"http://127.0.0.1:{port}"
        await wait_for(lambda: url in out.read_text(), timeout=15, what="serve to listen")
        assert out.read_text().splitlines() == [f"tickui: the dashboard at {url} (Ctrl-C stops it)"]
        profile, log = tmp_path / "profile", tmp_path / "chromium.log"
        browser, debug_port = start_chromium(binary, profile, log)
        started.append(browser.pid)
        async with aiohttp.ClientSession() as session:
            socket_url = await page_socket(session, debug_port)
            async with session.ws_connect(socket_url, max_msg_size=0) as ws:
                page = DevTools(ws)
                await page.call("Page.enable")  # for the script added to each new document
                await page.call("Network.enable")  # the page's web font: not fetched offline
                await page.call("Network.setBlockedURLs", urls=["*fonts.googleapis.com*"])
                await page.call("Page.addScriptToEvaluateOnNewDocument", source=KEEP_TERMINAL)
                await page.call("Page.navigate", url=url)

                async def shown(*words: str) -> str | None:
                    text = await page.text()
                    return text if all(w in text for w in words) else None

                words = ("Tasks", "greet", "Occurrences", "engine running")
                await wait_for(lambda: shown(*words), 20, "the Tasks pane, the engine running")
                dashboards = [p for p in children(serve.pid) if p not in started]
                started += dashboards
                assert dashboards, "serve runs the dashboard as its own process"
                command = " ".join(
                    Path(f"/proc/{p}/cmdline").read_text().replace("\0", " ") for p in dashboards
                )
                assert f"-m tickui --db {db}" in command, command
                shot = await page.call("Page.captureScreenshot", format="png")
                png = base64.b64decode(shot["data"])
                assert png.startswith(b"\x89PNG") and len(png) > 10_000
                (tmp_path / "served-dashboard.png").write_bytes(png)

                assert [occ for occ in occurrences(db) if occ.kind == "manual"] == []
                await page.call("Runtime.evaluate", expression="window.tickuiTerminal.focus()")
                await page.press(RUN_NOW)
                ran = await wait_for(
                    lambda: [o for o in occurrences(db) if o.kind == "manual"],
                    timeout=15,
                    what="the run-now key's run in the database",
                )
                assert len(ran) == 1 and ran[0].task == "greet", ran
                await wait_for(lambda: shown("succeeded"), 15, "the run in the page")
        serve.send_signal(signal.SIGTERM)
        assert serve.wait(30) == 0, err.read_text()
        await wait_for(lambda: not any(alive(p) for p in dashboards), 15, "the dashboard to end")
        assert "Traceback" not in err.read_text()
    finally:
        left = [p for proc in (serve, browser) if proc is not None for p in children(proc.pid)]
        for proc in (browser, serve):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
        end([*started, *left])

"""`tickui serve` as a process: where it listens, what it refuses, what it warns of, and
that a store's password reaches neither a command line nor the page. The browser's side
is tests/ui/test_ui_browser.py."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import aiohttp
import pytest

from helpers import cli, wait_for
from services import free_port


def start(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.Popen:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TICKUI_")}
    environ.update(env or {})
    with open(tmp_path / "serve.out", "wb") as out, open(tmp_path / "serve.err", "wb") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "tickui", *args],
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=environ, cwd=tmp_path,
        )  # fmt: skip


def descendants(pid: int) -> list[int]:
    try:
        found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    return [d for child in map(int, found) for d in (child, *descendants(child))]


def stop(proc: subprocess.Popen, also: list[int] = ()) -> int:
    """SIGTERM to serve, its exit code; whatever of `also` (its children) is left is
    killed by id."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(30)
    finally:
        for pid in also:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "example.com"])
def test_a_host_off_loopback_without_public_is_one_line_and_exit_2(tmp_path, host):
    done = cli("serve", "--host", host, "--port", str(free_port()), db=tmp_path / "t.db")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"tickui: --host: '{host}' is not a loopback address; the dashboard has no login,"
        " give --public to serve it to other machines anyway"
    ]
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("args", [["--port", "0"], ["--port", "x"], ["--host", "a b"]])
def test_a_bad_host_or_port_is_one_line_and_exit_2(tmp_path, args):
    done = cli("serve", *args, db=tmp_path / "t.db")
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1 and args[0] in done.stderr, done.stderr


def test_a_bad_serve_table_is_one_line_naming_its_line(tmp_path):
    (tmp_path / "tickui.toml").write_text('[serve]\nhost = "127.0.0.1"\nport = 70000\n')
    done = cli("serve", db=tmp_path / "t.db", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("tickui: tickui.toml line 3: serve.port: 70000 is")


def test_a_port_in_use_is_one_line_and_exit_1(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = cli("serve", "--port", str(port), db=tmp_path / "t.db")
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"tickui: serve: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]
    assert done.stdout == ""


async def test_public_warns_in_one_line_that_there_is_no_login(tmp_path):
    port = free_port()
    serve = start(tmp_path, "--db", str(tmp_path / "t.db"), "serve", "--host", "0.0.0.0",
                  "--port", str(port), "--public")  # fmt: skip
    try:
        said = tmp_path / "serve.out"
        await wait_for(lambda: said.read_text(), timeout=15, what="serve to listen")
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/") as reply,
        ):
            page = await reply.text()
    finally:
        code = stop(serve)
    assert code == 0
    assert said.read_text().splitlines() == [
        f"tickui: the dashboard at http://0.0.0.0:{port} (Ctrl-C stops it)"
    ]
    assert (tmp_path / "serve.err").read_text().splitlines() == [
        f"tickui: warning: http://0.0.0.0:{port} has no login: anyone who reaches it runs and"
        " edits tasks"
    ]
    # the page leads back to the address the browser used, not to 0.0.0.0
    assert f'data-session-websocket-url="ws://127.0.0.1:{port}/ws"' in page


async def test_a_store_password_is_on_no_command_line_and_not_in_the_page(tmp_path, pg_url):
    """A PostgreSQL store given with its password in the URL: the dashboard each page runs
    opens that store (the page's terminal shows its task), and neither its command line
    nor the page holds the password (PGPASSWORD is not set: only the URL has it)."""
    password = os.environ["PGPASSWORD"]
    parts = urlsplit(pg_url)
    netloc = f"{parts.username}:{quote(password, safe='')}@{parts.hostname}:{parts.port}"
    url = urlunsplit(parts._replace(netloc=netloc))
    added = cli("--store", url, "task", "add", "pgtask", "--every", "1h", "--", "true")
    assert added.returncode == 0, added.stderr
    port = free_port()
    os.environ.pop("PGPASSWORD")
    serve = start(tmp_path, "serve", "--store", url, "--watch", "--port", str(port))
    children: list[int] = []
    try:
        said = tmp_path / "serve.out"
        await wait_for(lambda: said.read_text(), timeout=15, what="serve to listen")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/") as reply:
                page = await reply.text()
            ws_url = f"ws://127.0.0.1:{port}/ws?width=140&height=40"
            async with session.ws_connect(ws_url) as ws:
                drawn = b""
                async with asyncio.timeout(20):
                    while b"pgtask" not in drawn:
                        message = await ws.receive()
                        assert message.type != aiohttp.WSMsgType.CLOSE, drawn[-2000:]
                        if message.type == aiohttp.WSMsgType.BINARY:
                            drawn += message.data
                children = descendants(serve.pid)
                lines = [Path(f"/proc/{p}/cmdline").read_bytes() for p in children]
                assert any(b"-m\0tickui\0--watch" in line for line in lines), lines
                assert all(password.encode() not in line for line in lines), "in ps"
                assert b"--store" not in b"".join(lines)
        assert password not in page and "postgresql" not in page
        assert password.encode() not in drawn
    finally:
        os.environ["PGPASSWORD"] = password
        code = stop(serve, children)
    assert code == 0, (tmp_path / "serve.err").read_text()
    assert password not in said.read_text() + (tmp_path / "serve.err").read_text()


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


async def session(port: int, client: aiohttp.ClientSession) -> aiohttp.ClientWebSocketResponse:
    """A page's websocket, once its dashboard has drawn the task."""
    ws = await client.ws_connect(f"ws://127.0.0.1:{port}/ws?width=120&height=30")
    drawn = b""
    async with asyncio.timeout(20):
        while b"greet" not in drawn:
            message = await ws.receive()
            assert message.type != aiohttp.WSMsgType.CLOSE, drawn[-2000:]
            if message.type == aiohttp.WSMsgType.BINARY:
                drawn += message.data
    return ws


async def test_a_closed_page_or_a_killed_server_leaves_no_dashboard_running(tmp_path):
    """Each page's dashboard (and the engine it hosts) ends with the page; and when serve
    itself is killed (SIGKILL: nothing it can do), with the pipe it read its page from."""
    db = tmp_path / "t.db"
    assert cli("task", "add", "greet", "--every", "1h", "--", "true", db=db).returncode == 0
    port = free_port()
    serve = start(tmp_path, "--db", str(db), "serve", "--port", str(port))
    children: list[int] = []
    try:
        said = tmp_path / "serve.out"
        await wait_for(lambda: said.read_text(), timeout=15, what="serve to listen")
        async with aiohttp.ClientSession() as client:
            ws = await session(port, client)
            first = descendants(serve.pid)
            children += first
            assert first
            await ws.close()
            await wait_for(lambda: not any(map(alive, first)), 15, "the closed page's dashboard")
            assert serve.poll() is None  # the server stays for the next page

            ws = await session(port, client)
            second = descendants(serve.pid)
            children += second
            serve.kill()
            serve.wait(10)
            await wait_for(lambda: not any(map(alive, second)), 15, "the orphaned dashboard")
            await ws.close()
    finally:
        stop(serve, [p for p in children if alive(p)])

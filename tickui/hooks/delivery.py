"""Sending one event to one hook, once: an HTTP POST (aiohttp) or a command (argv, the event
JSON on stdin and in TICKUI_EVENT). Each send is bounded by the hook's timeout; the caller
retries. What comes back is (ok, detail), the detail one redacted line."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from tickui.common.redact import safe_text
from tickui.hooks.config import HookConfig
from tickui.hooks.events import HookEvent

MAX_ERROR = 300  # characters of a failure kept in a delivery's detail
STDERR_KEEP = 4096  # bytes of a command's stderr read for its last line

if TYPE_CHECKING:  # aiohttp is imported when a URL hook first sends (0.14 s at start-up)
    import aiohttp


async def send(
    hook: HookConfig, event: HookEvent, session: aiohttp.ClientSession | None
) -> tuple[bool, str]:
    """One attempt. Never raises (but for cancellation)."""
    try:
        async with asyncio.timeout(hook.timeout_s):
            if hook.url is not None:
                assert session is not None
                return await _post(hook, event, session)
            return await _run(hook, event)
    except TimeoutError:
        return False, f"timed out after {hook.timeout_s:g}s"
    except OSError as exc:
        return False, _said(hook, f"{type(exc).__name__}: {exc.strerror or exc}")


async def _post(hook: HookConfig, event: HookEvent, session: aiohttp.ClientSession):
    import aiohttp

    assert hook.url is not None
    try:
        async with session.post(
            hook.url,
            data=event.body(hook.format),
            headers={"Content-Type": "application/json", "User-Agent": "tickui-hooks"},
            allow_redirects=False,
        ) as response:  # the status is the answer: a body is not waited for
            if 200 <= response.status < 300:
                return True, f"HTTP {response.status}"
            return False, _said(hook, f"HTTP {response.status} {response.reason or ''}".rstrip())
    except aiohttp.ClientError as exc:
        return False, _said(hook, f"{type(exc).__name__}: {exc}")


async def _run(hook: HookConfig, event: HookEvent) -> tuple[bool, str]:
    """The command in its own process group (so a timeout ends all of it), in tickui's
    session (so tickui's run containment never takes it for a run's orphan)."""
    assert hook.command is not None
    payload = event.body("json")
    env = dict(os.environ)
    for name in [n for n in env if n.startswith("TICKUI_")]:
        del env[name]  # never a run's marks
    env["TICKUI_EVENT"] = payload.decode()
    proc = await asyncio.create_subprocess_exec(
        *hook.command,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        process_group=0,
    )
    try:
        _, err, _ = await asyncio.gather(_feed(proc, payload), _tail(proc), proc.wait())
    except BaseException:  # timed out or cancelled: end the whole group, reap it
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            await asyncio.shield(proc.wait())
        raise
    if proc.returncode == 0:
        return True, "exit 0"
    last = err[-STDERR_KEEP:].decode("utf-8", "replace").strip().splitlines()
    tail = f": {last[-1]}" if last else ""
    return False, _said(hook, f"exit {proc.returncode}{tail}")


async def _feed(proc: asyncio.subprocess.Process, payload: bytes) -> None:
    """The event on stdin, then end of file; a command that does not read it is fine."""
    assert proc.stdin is not None
    try:
        proc.stdin.write(payload)
        await proc.stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        proc.stdin.close()


async def _tail(proc: asyncio.subprocess.Process) -> bytes:
    """The end of the command's stderr (its last line is the failure's detail), in bounded
    memory however much it writes."""
    assert proc.stderr is not None
    kept = b""
    while chunk := await proc.stderr.read(65536):
        kept = (kept + chunk)[-STDERR_KEEP:]
    return kept


def _said(hook: HookConfig, text: str) -> str:
    """A failure as one safe line: redacted, a URL's path (often the webhook's secret)
    never in it, cut to MAX_ERROR."""
    if hook.url is not None:
        text = text.replace(hook.url, hook.target)
        path = urlsplit(hook.url).path
        if len(path) > 1:
            text = text.replace(path, "/…")
    out = safe_text(text)
    return out if len(out) <= MAX_ERROR else out[: MAX_ERROR - 1] + "…"

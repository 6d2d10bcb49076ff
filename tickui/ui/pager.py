"""The pager a run's log opens in (`o` in the run view): fed the log as the view shows it
(its colours kept as SGR sequences for `less -R`, everything else made safe), chunk by
chunk, while the loop goes on."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil

from tickui.common.redact import safe_text
from tickui.ui.view.ansi import paged_line

PAGE_CHUNK = 256 * 1024  # bytes of log made safe at a time, off the loop, for the pager


def _safe_chunk(log, rest: bytes) -> tuple[bytes, bytes, bool]:
    """The next whole lines of `log` made safe (as the view shows them), what is left of
    a line cut by the chunk, and whether the file ended."""
    data = log.read(PAGE_CHUNK)
    if not data:
        tail = paged_line(rest.decode("utf-8", "replace")) + "\n" if rest else ""
        return tail.encode(), b"", True
    lines = (rest + data).split(b"\n")
    rest = lines.pop()
    shown = "".join(paged_line(line.decode("utf-8", "replace")) + "\n" for line in lines)
    return shown.encode(), rest, False


async def page(argv: list[str], path: str) -> None:
    """The pager runs while the loop goes on (the engine keeps its lease and runs); the
    log reaches it chunk by chunk as it reads (a 200 MB log is never held at once)."""
    process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE)
    stdin = process.stdin
    assert stdin is not None
    try:
        with open(path, "rb") as log:
            rest, done = b"", False
            while not done:
                shown, rest, done = await asyncio.to_thread(_safe_chunk, log, rest)
                stdin.write(shown)
                await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the pager was closed before the end of the log
    finally:
        with contextlib.suppress(OSError):
            stdin.close()
        await process.wait()


def pager_argv(pager: str | None = None) -> tuple[list[str], str | None]:
    """`$PAGER` (default `less -R`) as argv, or why it cannot run: found before the
    terminal is handed over, since a failure inside a suspend would leave the screen
    suspended with nothing running."""
    pager = pager if pager is not None else os.environ.get("PAGER") or "less -R"
    try:
        argv = shlex.split(pager)
    except ValueError as exc:  # an unmatched quote
        return [], safe_text(f"$PAGER cannot be read ({exc}): {pager}")
    if not argv or shutil.which(argv[0]) is None:
        return [], safe_text(f"pager not found: {pager}")
    return argv, None

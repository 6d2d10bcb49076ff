"""`tickui history --follow` and `tickui logs RUN [--follow]`: runs and their output as they
happen. Both look at the database (read-only) a few times a second, only read again when
it changed, and end cleanly on Ctrl-C or SIGTERM (exit 0)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from tickui.cli.output import say, with_store
from tickui.cli.run_report import end_text
from tickui.common import procs
from tickui.common.errors import NotFound
from tickui.common.procs import stop_on_signals
from tickui.common.redact import redact_data, safe_text
from tickui.model.records import Occurrence
from tickui.store import Store

POLL = 0.25  # seconds between looks at the database (and at a followed log file)
READ_CHUNK = 1 << 16
BATCH = 1000  # new rows read per look


async def until_stopped(work: Callable[[asyncio.Event], Awaitable[None]]) -> None:
    """Run `work(stop)` until it returns or SIGINT/SIGTERM sets `stop`."""
    stop = asyncio.Event()
    with stop_on_signals(asyncio.get_running_loop(), stop.set, [signal.SIGINT, signal.SIGTERM]):
        await work(stop)


async def _pause(stop: asyncio.Event) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), POLL)


# ---- history --follow --------------------------------------------------------------------


def _print_row(occ: Occurrence, as_json: bool) -> None:
    if as_json:
        print(json.dumps(redact_data(occ.to_json())), flush=True)
    else:
        say(end_text(occ), redacted=True)
        sys.stdout.flush()


async def follow_history(
    store: Store, name: str | None, task_id: int | None, shown: list[Occurrence], as_json: bool
) -> None:
    """After `shown` (the rows already printed, newest first): each run as it settles
    (succeeded, failed, cancelled, skipped), also one that was running when shown."""
    waiting = {o.id for o in shown if o.active or o.state == "queued"}
    # Nothing shown means there was nothing (of this task) when `shown` was read: every
    # row since is new, also one made between that read and this line.
    last = max((o.id for o in shown), default=0)

    async def work(stop: asyncio.Event) -> None:
        nonlocal last
        version = None
        while not stop.is_set():
            now = await store.data_version()
            if now != version:
                version = now
                new = await store.newest_occurrences(BATCH, last, task_id=task_id)
                new = [o for o in reversed(new) if name is None or o.task == name]
                if new:
                    last = max(last, *(o.id for o in new))
                settled = []
                if waiting:
                    for occ in await store.occurrences_by_id(sorted(waiting)):
                        if not occ.active and occ.state != "queued":
                            waiting.discard(occ.id)
                            settled.append(occ)
                for occ in new:
                    if occ.active or occ.state == "queued":
                        waiting.add(occ.id)
                    else:
                        settled.append(occ)
                for occ in sorted(settled, key=lambda o: o.finished_at or o.claimed_at):
                    _print_row(occ, as_json)
            await _pause(stop)

    await until_stopped(work)


# ---- logs ----------------------------------------------------------------------------------


class _Lines:
    """Bytes of a log to redacted, printable lines on stdout; a partial last line waits
    for its end (or for the end of the output)."""

    def __init__(self) -> None:
        self.rest = b""

    def feed(self, data: bytes) -> None:
        *lines, self.rest = (self.rest + data).split(b"\n")
        if len(self.rest) > READ_CHUNK:  # a huge line without a newline: show it in parts
            lines.append(self.rest)
            self.rest = b""
        for line in lines:
            self._say(line)
        sys.stdout.flush()

    def end(self) -> None:
        if self.rest:
            self._say(self.rest)
            self.rest = b""
        sys.stdout.flush()

    @staticmethod
    def _say(line: bytes) -> None:
        print(safe_text(line.decode("utf-8", "replace").rstrip("\r")))


def _read_from(path: str, offset: int) -> tuple[bytes, int, bool]:
    """What the file holds after `offset`, its size, and whether it shrank below `offset`
    (the log was compacted: its middle was dropped)."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < offset:
                return b"", size, True
            handle.seek(offset)
            data = handle.read(min(size - offset, 4 * READ_CHUNK))
            return data, offset + len(data), False
    except FileNotFoundError:
        return b"", offset, False


async def _print_file(path: str, lines: _Lines, offset: int = 0) -> int:
    """Print the file from `offset` to its end, in chunks read in a thread; the new offset."""
    while True:
        data, offset, shrank = await asyncio.to_thread(_read_from, path, offset)
        if shrank:
            lines.end()
            say("… (the log was compacted while followed: some output was dropped here)")
            continue
        if not data:
            return offset
        lines.feed(data)


def _status(occ: Occurrence) -> None:
    print(f"tickui: {end_text(occ)}", file=sys.stderr, flush=True)


async def show_logs(store: Store, run: int, follow: bool) -> int:
    try:
        occ = await store.get_occurrence(run)
    except NotFound:
        raise NotFound(f"no run {run} (tickui history lists them)") from None
    remote = await store.remote_output(run)
    if remote is not None:
        return await _remote_logs(store, occ, remote, follow)
    if occ.log_path is None and not follow:
        say_err(f"run {run} ({safe_text(occ.task)}) has no output: it is {occ.state}")
        return 0
    lines = _Lines()
    offset = 0
    if occ.log_path is not None:
        offset = await _print_file(occ.log_path, lines)
    if not follow or not (occ.active or occ.state == "queued"):
        lines.end()
        if occ.log_path is not None and not Path(occ.log_path).exists():
            host = occ.engine_host
            if host and host != procs.host():  # a store shared between hosts
                say_err(f"run {run}: its output is on host {safe_text(host)}, in"
                        f" {safe_text(occ.log_path)}")  # fmt: skip
            else:
                say_err(f"run {run}: its log {safe_text(occ.log_path)} is gone (pruned or moved)")
        if not (occ.active or occ.state == "queued"):
            _status(occ)
        return 0

    async def work(stop: asyncio.Event) -> None:
        nonlocal occ, offset
        while not stop.is_set():
            occ = await store.get_occurrence(run)
            if occ.log_path is not None:
                offset = await _print_file(occ.log_path, lines, offset)
            if not (occ.active or occ.state == "queued"):
                if occ.log_path is not None:  # what it wrote as it ended
                    await _print_file(occ.log_path, lines, offset)
                lines.end()
                _status(occ)
                return
            await _pause(stop)
        lines.end()

    await until_stopped(work)
    return 0


async def _remote_logs(store: Store, occ: Occurrence, remote, follow: bool) -> int:
    """A run on a worker: its full log is on the worker; the engine has the tail the
    worker reported when the run ended."""
    where = f" (its full log is {safe_text(remote.log_path)} there)" if remote.log_path else ""
    say_err(f"run {occ.id} ran on worker {safe_text(remote.worker)}{where}; its reported tail:")
    if follow and (occ.active or occ.state == "queued"):

        async def work(stop: asyncio.Event) -> None:
            nonlocal occ, remote
            while not stop.is_set() and (occ.active or occ.state == "queued"):
                await _pause(stop)
                occ = await store.get_occurrence(occ.id)
            remote = await store.remote_output(occ.id) or remote

        await until_stopped(work)
    lines = _Lines()
    lines.feed(remote.tail.encode())
    lines.end()
    if not (occ.active or occ.state == "queued"):
        _status(occ)
    return 0


def say_err(text: str) -> None:
    print(f"tickui: {text}", file=sys.stderr, flush=True)


async def cmd_logs(args: argparse.Namespace, path: Path | str) -> int:
    async def action(store: Store) -> int:
        return await show_logs(store, args.run, args.follow)

    from tickui.store import lookup

    if isinstance(path, Path) and lookup(path) is None:
        raise NotFound(f"no run {args.run} (no database at {path})")
    return await with_store(path, action, readonly=True)

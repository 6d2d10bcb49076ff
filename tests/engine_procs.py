"""Whole `tickui run` processes on one database, and what they left in it (for the two-engine
and chaos tests): start, signal, read the lease and every occurrence, check slot coverage."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from helpers import cli

MICROS = 1_000_000
TICK = "250ms"  # a standby looks at the lease every tick: a quick takeover


class Engine:
    """One `tickui run` process; its stderr goes to a file (read it any time)."""

    def __init__(self, db: Path | str, log: Path, *args: str, host: str | None = None) -> None:
        """`host`: the TICKUI_HOST it says it runs on (another host, played on this one)."""
        env = {k: v for k, v in os.environ.items() if k not in ("TICKUI_DB", "TICKUI_STORE")}
        if host is not None:
            env["TICKUI_HOST"] = host
        self.log = log
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tickui", "--db", str(db), "run", "--tick-interval", TICK,
                 *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=env,
            )  # fmt: skip

    @property
    def pid(self) -> int:
        return self.proc.pid

    def owns(self, owner: str | None) -> bool:
        """Whether an owner string (host:pid:nonce) is this process's."""
        return owner is not None and owner.split(":")[1:2] == [str(self.pid)]

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 20) -> int:
        """SIGTERM (a clean stop) and wait."""
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


def wait_for(predicate, timeout: float, what: str, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(step)


def rows(db: Path | str, sql: str) -> list[dict]:
    """The rows of a read-only query on either store (a SQLite file, a PostgreSQL URL), as
    dicts; [] while the table does not exist yet."""
    if isinstance(db, str):
        import psycopg
        from psycopg.rows import dict_row

        try:
            with psycopg.connect(db, autocommit=True, row_factory=dict_row) as conn:
                return list(conn.execute(sql).fetchall())
        except psycopg.errors.UndefinedTable:
            return []
    if not db.exists():
        return []
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in conn.execute(sql).fetchall()]
    except sqlite3.OperationalError:  # not created yet
        return []
    finally:
        conn.close()


def lease_owner(db: Path | str) -> str | None:
    """Who holds an unexpired lease now (None before the first engine, or when released)."""
    found = rows(db, "SELECT owner, expires_at FROM lease")
    now = time.time_ns() // 1000
    return found[0]["owner"] if found and found[0]["expires_at"] > now else None


@dataclass(frozen=True)
class Occ:
    id: int
    task: str
    kind: str
    scheduled_for: int
    covers: int
    state: str
    claimed_at: int
    started_at: int | None
    error_code: str | None
    detail: str | None
    owner: str | None

    def slots(self, every: int) -> list[int]:
        """The slots this occurrence stands for: itself and, when coalesced, those before."""
        return [self.scheduled_for - k * every for k in range(self.covers - 1, -1, -1)]


def occurrences(db: Path | str) -> list[Occ]:
    found = rows(
        db,
        "SELECT id, task, kind, scheduled_for, covers, state, claimed_at, started_at,"
        " error_code, detail, owner FROM occurrences ORDER BY id",
    )
    return [Occ(**row) for row in found]


def micros(text: str) -> int:
    """An ISO instant as written to $TICKUI_SCHEDULED_FOR, in UTC microseconds."""
    moment = datetime.fromisoformat(text)
    return round(moment.timestamp() * MICROS)


def iso_second(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def add_every_second(db: Path | str, name: str, out: Path, anchor: str, then: str = "") -> None:
    """A task every 1 s (overlap allowed) whose command appends its task, slot and
    occurrence id to `out` first thing, then runs the shell text `then` (to keep runs in
    flight a while)."""
    script = f'echo "$TICKUI_TASK $TICKUI_SCHEDULED_FOR $TICKUI_OCCURRENCE_ID" >> {out}' + (
        f"; {then}" if then else ""
    )
    added = cli(
        "task", "add", name, "--every", "1s", "--concurrency", "allow", "--anchor", anchor,
        "--", "sh", "-c", script,
        db=db,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr


def ran(out: Path) -> list[tuple[str, int]]:
    """(task, slot) for every line the commands wrote, in order."""
    if not out.exists():
        return []
    pairs = []
    for line in out.read_text().splitlines():
        task, slot = line.split()[:2]
        pairs.append((task, micros(slot)))
    return pairs


def ran_ids(out: Path) -> set[int]:
    """The occurrence ids whose commands wrote to `out` (add_every_second's tasks)."""
    if not out.exists():
        return set()
    return {int(line.split()[2]) for line in out.read_text().splitlines()}

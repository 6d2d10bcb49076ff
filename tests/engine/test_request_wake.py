"""A run-now left by another process is taken at once, not at the engine's next tick: the
command announces it (a SQLite file's bell, PostgreSQL's NOTIFY) and the lease holder
wakes. Here the engine ticks once a minute, and the command waits 5 s for its answer."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

import pytest
from engine_procs import Engine, lease_owner, rows, wait_for

from helpers import cli, rig
from helpers import wait_for as wait_for_async
from tickui.store import Store
from tickui.store.bell import address

pytestmark = pytest.mark.slow


def test_run_now_from_another_process_starts_between_ticks(tmp_path, store_target):
    added = cli("task", "add", "job", "--cron", "0 0 1 1 *", "--", "true", db=store_target)
    assert added.returncode == 0, added.stderr
    engine = Engine(store_target, tmp_path / "engine.err", "--tick-interval", "60s")
    try:
        wait_for(lambda: engine.owns(lease_owner(store_target)), 30, "the engine's lease")
        # Two in a row: a tick could fall in the first's wait, never in both (60 s apart).
        for turn in (1, 2):
            asked = cli("task", "run-now", "job", db=store_target)
            assert asked.returncode == 0, asked.stderr
            assert "started job: occurrence" in asked.stdout, (turn, asked.stdout)
            wait_for(
                lambda t=turn: [r["state"] for r in rows(store_target, "SELECT state FROM"
                                " occurrences ORDER BY id")] == ["succeeded"] * t,
                30, f"run {turn} to succeed",
            )  # fmt: skip
    finally:
        engine.kill()


def bell_holder(db: Path) -> int | None:
    """The pid of the process bound to the SQLite file's bell (from /proc), or None."""
    name = address(db)
    assert name is not None
    wanted = "@" + name[1:].decode()
    inodes = {line.split()[6] for line in Path("/proc/net/unix").read_text().splitlines()[1:]
              if line.split()[-1] == wanted}  # fmt: skip
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        with contextlib.suppress(OSError):
            for fd in fd_dir.iterdir():
                with contextlib.suppress(OSError):
                    link = os.readlink(fd)
                    if link.startswith("socket:[") and link[8:-1] in inodes:
                        return int(fd_dir.parent.name)
    return None


def test_the_bell_goes_with_the_lease(tmp_path, tmp_db):
    """Only the lease holder listens on a SQLite file's bell: a standby does not, and the
    one that takes the lease over does. A request then goes to the holder."""
    added = cli("task", "add", "job", "--cron", "0 0 1 1 *", "--", "true", db=tmp_db)
    assert added.returncode == 0, added.stderr
    first = Engine(tmp_db, tmp_path / "first.err", "--tick-interval", "60s")
    second = None
    try:
        wait_for(lambda: first.owns(lease_owner(tmp_db)), 30, "the first engine's lease")
        wait_for(lambda: bell_holder(tmp_db) == first.pid, 30, "the holder on the bell")
        second = Engine(tmp_db, tmp_path / "second.err", "--tick-interval", "1s")
        wait_for(lambda: "standby" in second.stderr(), 30, "the second engine on standby")
        asked = cli("task", "run-now", "job", db=tmp_db)
        assert "started job: occurrence" in asked.stdout, asked.stdout
        assert first.owns(rows(tmp_db, "SELECT owner FROM occurrences")[0]["owner"])
        assert bell_holder(tmp_db) == first.pid
        assert first.stop() == 0
        wait_for(lambda: second.owns(lease_owner(tmp_db)), 30, "the second engine's lease")
        wait_for(lambda: bell_holder(tmp_db) == second.pid, 30, "the new holder on the bell")
    finally:
        first.kill()
        if second is not None:
            second.kill()


async def test_a_run_that_ends_while_its_request_is_answered_is_settled_without_a_tick(
    tmp_path, monkeypatch
):
    """The run-now's command ends before the engine has finished answering the request
    (the scan's lock still held): its end is settled as soon as the answer is done, not
    at the next tick (none comes here: the clock stands still)."""
    db = tmp_path / "t.db"
    async with rig(db) as r:
        await r.add("job", cron="0 0 1 1 *", command=["sleep", "0.2"])
        await r.engine.start()
        store, answered = r.engine.store, r.engine.store.get_occurrence

        async def after_the_run_ended(occurrence_id: int):
            """The answer's last step waits until the run's end is in the event log."""
            before = await store.last_event_seq()

            async def ended() -> bool:
                return not r.engine.dispatcher.active() and await store.last_event_seq() > before

            await wait_for_async(ended, 10, "the run's end recorded")
            for _ in range(10):  # the engine's other tasks hear of it, the lock still held
                await asyncio.sleep(0)
            return await answered(occurrence_id)

        monkeypatch.setattr(store, "get_occurrence", after_the_run_ended)
        other = await Store.open(db)  # another process's command
        try:
            await other.add_request(await other.get_task("job"), "run_now", r.clock.now())
            await other.announce_request()
        finally:
            await other.close()

        async def settled() -> bool:
            return [o.state for o in await r.history("job")] == ["succeeded"]

        await wait_for_async(settled, 10, "the run-now's run settled succeeded")

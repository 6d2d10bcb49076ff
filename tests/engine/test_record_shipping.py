"""A run's record reaches the store from its host: a standby engine on the host of an
engine that went silent sends the outcomes its journals hold, so that a holder on another
host settles those runs as they really ended, not "outcome unknown". Real store (SQLite
file and PostgreSQL), real journal and lease files, engines with a manual clock."""

from __future__ import annotations

import os
import time
from pathlib import Path

from helpers import rig
from tickui.common import procs
from tickui.common.timeutil import MICROS
from tickui.dispatch import SubprocessDispatcher
from tickui.engine import EngineConfig, SchedulerEngine
from tickui.model.occurrence import RUN_TRANSITION
from tickui.store import NewEvent
from tickui.supervisor import journal as j
from tickui.supervisor.lease import write_lease

TTL = 600 * MICROS


async def _silent_engines_run(r, host: str, lease_deadline: float, exit_code: int = 7):
    """A run claimed by an engine of `host` (this test's own process: alive, as a frozen
    engine is) that holds the lease for 10 minutes; its
    journal says the command ended with `exit_code`, under a runs' lease file with
    `lease_deadline` (time.monotonic())."""
    await r.add("job", every="1h", command=["true"])
    pid = os.getpid()
    owner = f"{host}:{pid}:0000gone"
    now = r.clock.now()
    got = await r.store.acquire_lease(
        owner, now, TTL, (host, pid, procs.start_ticks(pid)), lambda *_: False
    )
    assert got.held and got.lease is not None
    task = await r.store.get_task("job")
    claimed = await r.store.claim_manual(task, owner, got.lease.token, now)
    folder = Path(r.store.log_dir)
    folder.mkdir(parents=True, exist_ok=True)
    lease = folder / "engine-4242-1.lease"
    write_lease(str(lease), lease_deadline)
    started = {"state": "running", "pid": 4243, "pgid": 4243, "pid_start": 1}
    await r.store.append_events(
        [NewEvent(now, RUN_TRANSITION, claimed.command_id, "run-1", started)]
    )
    await r.engine.reconcile()  # as the silent engine did before it went silent
    writer = j.JournalWriter(str(folder / f"{claimed.id}.journal"))
    supervisor = {"pid": 4243, "start": 1, "boot_id": j.boot_id()}
    writer.write(j.WAITING, durable=False, supervisor=supervisor, lease=str(lease), grace=3.0)
    writer.write(j.RUNNING, command={"pid": 4244, "start": 2, "started_us": now})
    writer.write(j.ENDED, exit_code=exit_code, status=exit_code, ended_us=now + MICROS,
                 fenced=False, cancelled=False, output_bytes=0, output_lost=False)  # fmt: skip
    writer.close()
    return claimed


async def _events_of(r, occurrence_id: int) -> list:
    """The events appended for an occurrence that no reconcile has folded yet."""
    pending, _ = await r.store.unreconciled(0, 100)
    return [e for progress, events in pending if progress.id == occurrence_id for e in events]


async def _take_over_from_another_host(r, monkeypatch):
    """An engine on host `elsewhere` takes the lease once it has run out and recovers."""
    monkeypatch.setenv("TICKUI_HOST", "elsewhere")
    dispatcher = SubprocessDispatcher(r.store, r.clock, kill_grace=1.0)
    other = SchedulerEngine(
        r.store, dispatcher, r.clock, EngineConfig(owner="elsewhere:99:x", lease_ttl=TTL)
    )
    r.clock.advance(TTL / MICROS + 1)
    await other.start()
    assert other.holds_lease
    return other


async def test_a_standby_on_the_silent_engines_host_sends_its_record(
    store_target, tmp_path, monkeypatch
):
    async with rig(store_target, lease_ttl=TTL) as r:
        here = procs.host()
        claimed = await _silent_engines_run(r, here, lease_deadline=time.monotonic() - 1)
        await r.engine.start()  # a standby: the silent engine's lease has 10 minutes left
        assert not r.engine.holds_lease
        sent = await _events_of(r, claimed.id)
        assert sent and sent[-1].type == "run.failed", sent
        assert sent[-1].payload["exit_code"] == 7, sent
        other = await _take_over_from_another_host(r, monkeypatch)
        try:
            (run,) = [o for o in await r.history("job") if o.id == claimed.id]
        finally:
            await other.stop(grace=0)
    assert run.state == "failed" and run.exit_code == 7, run
    assert "outcome unknown" not in (run.detail or ""), run


async def test_a_record_is_not_sent_while_its_engine_still_renews_its_runs_lease(
    store_target, tmp_path, monkeypatch
):
    """Its engine may be slow, not gone: it records its own runs. A holder on another
    host that takes over later finds no record and says the outcome is unknown."""
    async with rig(store_target, lease_ttl=TTL) as r:
        claimed = await _silent_engines_run(r, procs.host(), lease_deadline=time.monotonic() + 600)
        await r.engine.start()
        assert not r.engine.holds_lease
        assert await _events_of(r, claimed.id) == []
        other = await _take_over_from_another_host(r, monkeypatch)
        try:
            (run,) = [o for o in await r.history("job") if o.id == claimed.id]
        finally:
            await other.stop(grace=0)
    assert run.state == "failed" and run.error_code == "INTERRUPTED", run
    assert "outcome unknown" in (run.detail or ""), run

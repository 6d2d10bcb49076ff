"""A lease holder frozen (SIGSTOP) with runs in flight, a standby taking over: the frozen
holder's runs end by themselves (their supervisors fence them) before the standby may
claim anything, and the standby records how each really ended. Whole `tickui run`
processes; the commands write their own start and end times."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import sqlite3
import time
from collections import defaultdict

import pytest
from engine_procs import Engine, iso_second, lease_owner, micros, wait_for

from helpers import cli
from tickui.common.timeutil import MICROS
from tickui.model.spec import build_spec
from tickui.store import Store

BURST = 300  # slots due at once
TTL = 12.0  # s; the runs' fence is 12 - (3 s grace + 0.2 s + 1 s) = 7.8 s after a renewal


def config(tmp_path, **engine: str) -> str:
    path = tmp_path / "tickui.toml"
    path.write_text("[engine]\n" + "".join(f'{k} = "{v}"\n' for k, v in engine.items()))
    return str(path)


def marked(out, body: str) -> str:
    """A shell line that writes `start <slot> <occurrence> <time>` first, runs `body`, and
    writes `end <slot> <occurrence> <time> <status>` when it ends, killed by SIGTERM too."""
    mark = '"$TICKUI_SCHEDULED_FOR $TICKUI_OCCURRENCE_ID $(date +%s.%N)"'
    return (
        f'trap \'trap "" TERM; echo "end "{mark}" term" >> {out}; exit 143\' TERM; '
        f'echo "start "{mark} >> {out}; {body}; s=$?; echo "end "{mark}" $s" >> {out}; exit $s'
    )


def add(db, name: str, out, body: str, *flags: str) -> None:
    added = cli("task", "add", name, *flags, "--", "sh", "-c", marked(out, body), db=db)
    assert added.returncode == 0, added.stderr


def add_many(db, out, bodies: dict[str, str], every: str, anchor: str) -> None:
    """One task a body, added through the store in one go (the command line takes a
    process a task)."""

    async def seed() -> None:
        store = await Store.open(db)
        try:
            now = int(time.time() * MICROS)
            for name, body in bodies.items():
                raw = {"name": name, "every": every, "anchor": anchor}
                raw["command"] = ["sh", "-c", marked(out, body)]
                await store.add_task(build_spec(raw, now), now)
        finally:
            await store.close()

    asyncio.run(seed())


def marks(out) -> dict[tuple[int, int], dict[str, float]]:
    """(slot, occurrence) -> {"start": t, "end": t, "status": s} from the commands' lines."""
    found: dict[tuple[int, int], dict] = defaultdict(dict)
    for line in out.read_text().splitlines() if out.exists() else ():
        kind, slot, occ, at, *rest = line.split()
        found[(micros(slot), int(occ))][kind] = float(at)
        if rest:
            found[(micros(slot), int(occ))]["status"] = rest[0]
    return dict(found)


def children(engine: Engine) -> bool:
    """Whether a run's supervisor is below the engine now."""
    return bool(_supervisors(engine.pid))


def frozen(engine: Engine, db):
    """SIGSTOP `engine` at a moment it holds no write transaction on the SQLite file: a
    process frozen inside one blocks every other writer, a limit of the file store (on
    PostgreSQL the server ends such a session)."""
    for _ in range(100):
        os.kill(engine.pid, signal.SIGSTOP)
        if _writable(db):
            break
        os.kill(engine.pid, signal.SIGCONT)
        time.sleep(0.01)
    else:
        raise AssertionError("the engine held the file's write lock at every try")
    return lambda: os.kill(engine.pid, signal.SIGCONT)


def _writable(db) -> bool:
    conn = sqlite3.connect(db, timeout=0.2)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.rollback()
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def engines(tmp_path, db, cfg) -> tuple[Engine, Engine]:
    holder = Engine(db, tmp_path / "holder.err", "--config", cfg, "--stop-grace", "1s")
    wait_for(lambda: holder.owns(lease_owner(db)), 15, "the first engine to hold the lease")
    standby = Engine(db, tmp_path / "standby.err", "--config", cfg, "--stop-grace", "1s")
    wait_for(lambda: "standby: lease held by" in standby.stderr(), 15, "the standby")
    return holder, standby


def outcomes(db) -> dict[int, tuple[str, int | None, str | None, str | None]]:
    """occurrence id -> (state, exit code, error code, detail)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute(
            "SELECT id, state, exit_code, error_code, detail FROM occurrences"
        ).fetchall()
    finally:
        conn.close()
    return {row[0]: tuple(row[1:]) for row in rows}


@pytest.mark.slow
def test_a_frozen_holders_runs_end_before_their_slots_run_again(tmp_path):
    """Retries on: a run the frozen holder cannot watch is fenced, the standby records it
    INTERRUPTED and retries it, and no two attempts of one slot ever run side by side."""
    db, out = tmp_path / "t.db", tmp_path / "marks.txt"
    cfg = config(tmp_path, lease_ttl=f"{TTL:g}s")
    anchor = iso_second(time.time() + 2)
    # longer than the fence's reach (7.8 s after the last renewal): every run in flight
    # when the holder freezes is fenced, none ends by itself
    add(db, "work", out, "sleep 20", "--every", "2s", "--concurrency", "allow",
        "--anchor", anchor, "--retries", "2", "--retry-delay", "1s",
        "--retry-on", "interrupted")  # fmt: skip
    holder, standby = engines(tmp_path, db, cfg)
    thaw = None
    try:
        wait_for(lambda: len(marks(out)) >= 2, 20, "two runs started by the holder")
        holder_owner = lease_owner(db)
        thaw = frozen(holder, db)
        frozen_at = time.time()
        wait_for(lambda: standby.owns(lease_owner(db)), TTL + 10, "the standby to take over")
        took = time.time() - frozen_at
        retried = lambda: [  # noqa: E731
            slot for slot in {s for s, _ in marks(out)}
            if sum(1 for s, _ in marks(out) if s == slot) >= 2
        ]  # fmt: skip
        wait_for(retried, 40, "a slot of the frozen holder run again")
        assert standby.stop() == 0, standby.stderr()
    finally:
        if thaw is not None:
            thaw()
        holder.kill()
        standby.kill()
    assert took <= TTL + 1, f"the standby took {took:.1f} s"
    attempts: dict[int, list[dict]] = defaultdict(list)
    for (slot, _occ), seen in marks(out).items():
        assert "end" in seen, f"an attempt of {slot} has no end: {seen}"
        attempts[slot].append(seen)
    for slot, runs in attempts.items():
        runs.sort(key=lambda seen: seen["start"])
        for before, after in itertools.pairwise(runs):
            assert after["start"] >= before["end"], f"two attempts of slot {slot} overlapped"
    said = outcomes(db)
    fenced = [o for o in said.values() if o[2] == "INTERRUPTED" and "fenced" in (o[3] or "")]
    assert fenced, said
    gone = f"engine {holder_owner} is gone; its run was fenced (its lease ran out)"
    assert all(o[3] == gone for o in fenced), "a run of the standby was fenced"


@pytest.mark.slow
@pytest.mark.parametrize("freeze_at", ["first-spawn", "first-start"])
def test_a_holder_frozen_after_claiming_a_burst(tmp_path, freeze_at):
    """300 slots due at once; the holder is frozen as it forks the first of their
    supervisors (nothing has started yet) or as the first command starts. Within the misfire
    grace, the standby runs each slot exactly once: those the holder never started go
    back to their tasks, those that ran during the freeze keep their real exit codes."""
    db, out = tmp_path / "t.db", tmp_path / "marks.txt"
    cfg = config(tmp_path, lease_ttl=f"{TTL:g}s", misfire_grace="60s")
    codes = {f"t{k:03d}": k % 5 for k in range(BURST)}
    holder, standby = engines(tmp_path, db, cfg)
    thaw = None
    try:  # added once both engines are up: the holder takes them from the store
        add_many(db, out, {name: f"sleep 0.5; exit {code}" for name, code in codes.items()},
                 "1h", iso_second(time.time() + 3))  # fmt: skip
        first = (lambda: children(holder)) if freeze_at == "first-spawn" else (lambda: marks(out))
        wait_for(first, 30, "the burst to start", step=0.001)
        thaw = frozen(holder, db)
        wait_for(lambda: standby.owns(lease_owner(db)), TTL + 10, "the standby to take over")
        wait_for(
            lambda: (
                len(marks(out)) == len(codes)
                and all(
                    o[0] not in ("claimed", "accepted", "running") for o in outcomes(db).values()
                )
            ),
            40,
            "every slot to run and be recorded",
        )
        assert standby.stop() == 0, standby.stderr()
    finally:
        if thaw is not None:
            thaw()
        holder.kill()
        standby.kill()
    seen = marks(out)
    assert len(seen) == len(codes), seen  # one attempt each: none ran twice
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        rows = conn.execute(
            "SELECT task, state, exit_code, owner, detail FROM occurrences"
            " WHERE state NOT IN ('skipped')"
        ).fetchall()
        skipped = conn.execute(
            "SELECT task, detail FROM occurrences WHERE state = 'skipped'"
        ).fetchall()
    finally:
        conn.close()
    assert sorted(task for task, *_ in rows) == sorted(codes), (rows, skipped)
    for task, state, exit_code, _owner, detail in rows:
        assert exit_code == codes[task], (task, state, exit_code, detail)
        assert state == ("succeeded" if codes[task] == 0 else "failed"), (task, state, detail)
    by_holder = [task for task, _, _, owner, _ in rows if holder.owns(owner)]
    if freeze_at == "first-start":  # it ran during the freeze: the standby recorded it
        assert by_holder, rows
    else:  # frozen in the burst: what it had not started went back, run by the standby
        assert skipped and len(by_holder) < len(codes), (rows, skipped)
        assert {task for task, _ in skipped}.isdisjoint(by_holder), (rows, skipped)
    for _task, detail in skipped:  # never started by the frozen holder: handed back
        assert "never started" in detail or "not_started" in detail, detail


@pytest.mark.slow
def test_a_run_whose_supervisor_was_killed_is_ended_and_interrupted(tmp_path):
    """The holder frozen and its run's supervisor SIGKILLed: nothing fences the command
    and its journal says `running` with no end. The standby ends what is left of it (found
    by its session and its TICKUI_* marks) and records it INTERRUPTED, not a made-up end."""
    db, out = tmp_path / "t.db", tmp_path / "marks.txt"
    cfg = config(tmp_path, lease_ttl=f"{TTL:g}s")
    add(db, "long", out, "sleep 60", "--every", "1h", "--anchor", iso_second(time.time() + 2))
    holder, standby = engines(tmp_path, db, cfg)
    thaw = None
    try:
        wait_for(lambda: marks(out), 20, "the run to start")
        (supervisor,) = _supervisors(holder.pid)
        (command,) = _children(supervisor)
        thaw = frozen(holder, db)
        os.kill(supervisor, signal.SIGKILL)
        wait_for(lambda: standby.owns(lease_owner(db)), TTL + 10, "the standby to take over")
        wait_for(lambda: not _running(command), 20, "the command to be ended")
        wait_for(
            lambda: all(o[0] == "failed" for o in outcomes(db).values()), 10, "the run recorded"
        )
        assert standby.stop() == 0, standby.stderr()
    finally:
        if thaw is not None:
            thaw()
        holder.kill()
        standby.kill()
    ((state, exit_code, error_code, detail),) = outcomes(db).values()
    assert (state, exit_code, error_code) == ("failed", None, "INTERRUPTED"), detail
    assert "its run supervisor vanished without recording the end" in detail, detail
    assert "what was left was killed" in detail, detail


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        return []


def _supervisors(pid: int) -> list[int]:
    """The runs' supervisors below `pid` at any depth (the engine's children, or its
    supervisor server's): the processes there that lead a session of their own."""
    found, stack = [], _children(pid)
    while stack:
        child = stack.pop()
        with contextlib.suppress(OSError):
            if os.getsid(child) == child:
                found.append(child)
                continue  # what a supervisor runs is below it
        stack.extend(_children(child))
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (the frozen holder, its subreaper, cannot reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

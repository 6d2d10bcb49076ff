"""Reconcile's events served from what the SQLite store appended itself
(tickui.store.appended) are, at every step of seeded random sequences of claims,
appends, receipts, reconciles, failures, prunes and another connection's writes, what
the read of the events table finds for the same page."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3

import pytest

from helpers import LEASE_OWNER, T0, one_slot_plan, store_holding_lease
from tickui.common.timeutil import MICROS
from tickui.engine.settle import Settlement
from tickui.model.occurrence import RUN_COMPLETED, RUN_TRANSITION
from tickui.model.spec import build_spec
from tickui.store import NewEvent, Store
from tickui.store.abc import LeaseLost

TASKS = "abcdef"
STEPS = {  # operation -> weight
    "claim": 16,
    "append": 24,
    "append with a dropped row": 2,
    "cancelled append": 3,
    "other's append": 4,
    "other's task": 2,
    "read during an append": 6,
    "other's swap": 3,
    "other's exchange": 3,
    "ends": 10,
    "receipt": 6,
    "failed run": 3,
    "all failed": 2,
    "prune": 3,
    "reopen": 1,
    "reconcile": 24,
}
RUNS = ["run-1", "run-2", "run-3", "run-4", None]


class Walk:
    """One seeded sequence of operations on one store, checked after each step."""

    def __init__(self, seed: int, path) -> None:
        self.rng = random.Random(seed)
        self.path = path
        self.served = 0  # pages answered from the store's own events
        self.compared = 0
        self.seen: int | None = None

    async def setup(self) -> None:
        self.store, self.token, _ = await store_holding_lease(self.path, TASKS)
        self.other = await Store.open(self.path)  # another writer on the same file
        # events from before any claim, naming commands receipts give runs later
        early = [
            NewEvent(T0, RUN_TRANSITION, f"cmd-r{n}", None, {"state": "running"}) for n in range(3)
        ]
        await self.other.append_events(early)
        self.spy()

    def spy(self) -> None:
        own = self.store._own
        events_for = own.events_for

        def counted(*args):
            found = events_for(*args)
            self.served += found is not None
            self.seen = args[2] if found is not None else None  # the read's last seq
            return found

        own.events_for = counted

    # ---- what is compared ----------------------------------------------------------

    async def page(self, after: int, limit: int, fast: bool):
        store = self.store
        if not fast:
            store._own_events = False  # the read of the events table, for this page alone
        try:
            found, then = await store.unreconciled(after, limit)
        finally:
            store.__dict__.pop("_own_events", None)
        shown = [
            (p.id, p.state, p.command_id, p.run_id, p.cursor, [_event(e) for e in events])
            for p, events in found
        ]
        return shown, then

    async def check(self, step: str) -> None:
        last = (await self.store._one("SELECT coalesce(max(id), 0) FROM occurrences"))[0]
        windows = [(0, 1000), (self.rng.randint(0, last), self.rng.randint(1, 4))]
        for after, limit in windows:
            fast = await self.page(after, limit, True)
            read = await self.page(after, limit, False)
            assert fast == read, f"after {step}: page ({after}, {limit}) differs"
            self.compared += 1

    # ---- what is done ----------------------------------------------------------------

    async def active(self) -> list[tuple[int, str | None]]:
        return await self.store._all(
            "SELECT id, command_id FROM occurrences WHERE state IN ('claimed', 'accepted',"
            " 'running') ORDER BY id"
        )

    async def command(self) -> str | None:
        """A command id to name: an active run's, an ended run's, one not claimed yet."""
        rng = self.rng
        roll = rng.random()
        if roll < 0.15:
            return None
        last = (await self.store._one("SELECT coalesce(max(id), 0) FROM occurrences"))[0]
        if roll < 0.3:
            return f"cmd-{last + rng.randint(1, 3)}"  # before its run is claimed
        active = await self.active()
        if active and roll < 0.85:
            return rng.choice(active)[1]
        return f"cmd-{rng.randint(1, max(last, 1))}"

    async def events(self) -> list[NewEvent]:
        rng = self.rng
        made = []
        for _ in range(rng.randint(1, 4)):
            command, run = await self.command(), rng.choice(RUNS)
            cause = None
            if rng.random() < 0.3:  # ksadk: the command as the cause, no command id
                command, cause = rng.choice(["", None]), await self.command()
            if rng.random() < 0.5:
                kind, payload = RUN_TRANSITION, {"state": rng.choice(["running", "starting"])}
            else:
                kind, payload = RUN_COMPLETED, {"exit_code": rng.choice([0, 0, 1])}
            event_id = f"e{rng.randint(1, 40)}" if rng.random() < 0.2 else None
            made.append(NewEvent(T0, kind, command, run, payload, cause, event_id))
        return made

    async def claim(self) -> None:
        rng = self.rng
        tasks = [await self.store.get_task(n) for n in rng.sample(TASKS, rng.randint(1, 3))]
        plans = [one_slot_plan(t, t.next_run_at) for t in tasks]
        if rng.random() < 0.15:  # a stale plan: the careful path claims the others
            plans[0] = one_slot_plan(tasks[0], tasks[0].next_run_at - 60 * MICROS)
        token = self.token if rng.random() < 0.9 else self.token + 1
        try:
            await self.store.claim(plans, LEASE_OWNER, token, T0)
        except LeaseLost:
            assert token != self.token

    async def step(self) -> str:
        """One operation, drawn by weight; returns its name."""
        rng, store, other = self.rng, self.store, self.other
        (done,) = rng.choices(list(STEPS), weights=list(STEPS.values()))
        active = await self.active()
        if done == "claim":
            await self.claim()
        elif done == "append":
            await store.append_events(await self.events())
        elif done == "append with a dropped row":  # NOT NULL: the row is ignored
            bad = NewEvent(None, RUN_COMPLETED, await self.command(), None)  # type: ignore[arg-type]
            await store.append_events([*await self.events(), bad])
        elif done == "cancelled append":  # stored or undone, whichever the write reached
            task = asyncio.create_task(store.append_events(await self.events()))
            for _ in range(rng.randint(0, 6)):
                await asyncio.sleep(0)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif done == "other's append":
            await other.append_events(await self.events())
        elif done == "read during an append":  # the page read while the events go in
            self.seen = None
            turns = rng.randint(0, 4)

            async def read():
                for _ in range(turns):
                    await asyncio.sleep(0)
                return await self.page(0, 1000, True)

            _, fast = await asyncio.gather(store.append_events(await self.events()), read())
            if self.seen is not None:  # served: as the table was up to the read's last seq
                rows, then = await self.page(0, 1000, False)
                upto = [(*r[:5], [e for e in r[5] if e[0] <= self.seen]) for r in rows]
                assert fast == ([r for r in upto if r[5]], then), "read during an append"
        elif done == "other's swap":  # as many events deleted as appended: the count holds
            count = "SELECT count(*) FROM events"
            before = (await other._one(count))[0]
            await other.prune(keep=1)
            gone = before - (await other._one(count))[0]
            if gone:
                made = [NewEvent(T0, RUN_COMPLETED, c, None) for _, c in active[:gone]]
                made += [NewEvent(T0, RUN_COMPLETED, None, "run-1")] * (gone - len(made))
                await other.append_events(made)
        elif done == "other's exchange":  # the last event replaced: count and seqs hold
            await self.claim()  # (tracking starts again at a claim)
            active = await self.active()
            if active:
                newest, command = active[-1]
                await store.append_events([NewEvent(T0, RUN_TRANSITION, command, "run-9")])
                await asyncio.to_thread(_exchange, self.path, command)
                fast = await self.page(newest - 1, 1, True)
                assert fast == await self.page(newest - 1, 1, False), "after an exchange"
        elif done == "other's task":
            spec = build_spec(
                {"name": f"x{rng.randint(0, 10**9)}", "every": "1h", "command": ["true"]}, T0
            )
            await other.add_task(spec, T0)
        elif done == "ends":  # runs' ends, as a worker reports them
            ends = [c for _, c in active if c and rng.random() < 0.7]
            code = rng.choice([0, 1])
            await store.append_events(
                [NewEvent(T0, RUN_COMPLETED, c, None, {"exit_code": code}) for c in ends]
            )
        elif done == "receipt" and active:
            chosen = rng.sample(active, min(len(active), rng.randint(1, 2)))
            renamed = rng.random() < 0.5  # a dispatcher's receipt naming its own command
            await store.mark_accepted(
                [(i, f"cmd-r{rng.randint(0, 2)}" if renamed else None, None) for i, _ in chosen],
                T0,
            )
        elif done == "failed run" and active:
            writer = store if rng.random() < 0.6 else other
            await writer.fail_occurrences([(rng.choice(active)[0], "lost", "lost")], T0)
        elif done == "all failed" and active:
            await store.fail_occurrences([(i, "lost", "lost") for i, _ in active], T0)
        elif done == "prune":
            writer = store if rng.random() < 0.5 else other
            await writer.prune(keep=rng.randint(1, 3))
            if writer is other and rng.random() < 0.5:
                await other.append_events(await self.events())  # as many back, maybe
        elif done == "reopen":
            await store.close()
            self.store = await Store.open(self.path)
            self.spy()
        elif done == "reconcile":
            settlement = Settlement(self.store, rng.randint(1, 4), lambda _: None)
            for i, _ in active:  # receipts, some naming the dispatcher's own command
                if rng.random() < 0.3:
                    receipt: dict[str, object] = {"accepted_at": T0}
                    if rng.random() < 0.5:
                        receipt["command_id"] = f"cmd-r{rng.randint(0, 2)}"
                    settlement.accepted(i, receipt)
            await settlement.reconcile()
        return done

    async def run(self, steps: int) -> None:
        await self.setup()
        try:
            for n in range(steps):
                done = await self.step()
                await self.check(f"step {n} ({done})")
        finally:
            await self.store.close()
            await self.other.close()


def _exchange(path, command: str | None) -> None:
    """Another program's write: the newest event deleted, one naming `command` appended."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA busy_timeout = 5000")
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM events WHERE seq = (SELECT max(seq) FROM events)")
        conn.execute(
            "INSERT INTO events (at, command_id, type, payload) VALUES (?, ?, ?, ?)",
            (T0, command, RUN_COMPLETED, '{"exit_code": 1}'),
        )
        conn.execute("COMMIT")


def _event(e) -> tuple:
    return (e.seq, e.at, e.command_id, e.run_id, e.type, e.payload, e.causation_id)


@pytest.mark.parametrize("seed", range(6))
def test_events_served_from_what_the_store_appended_are_what_the_read_finds(tmp_path, seed):
    walk = Walk(seed, tmp_path / "t.db")
    asyncio.run(walk.run(400))
    assert walk.compared == 800
    assert walk.served > 10  # the fast path was taken, not only the read

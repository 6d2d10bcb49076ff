"""What the engine makes of its workers' heartbeats: the workers table, counts they refused
told as they go up, outcomes asked for again when a worker stops listing a run, and which
workers (and so which runs) are lost. Silence means a lost worker only while the engine
could hear: never during a broker outage or just after the engine itself was away."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from tickui.common.timeutil import MICROS
from tickui.dispatch.messages import Heartbeat
from tickui.model.coordination import WorkerInfo
from tickui.model.records import Occurrence
from tickui.store import Beat, Store

log = logging.getLogger("tickui.dispatch.kafka")

RESEND_AFTER = 2  # heartbeats of its worker not naming a running command: ask again

# (kind, command id, worker or None for any, reason): a control message to send
Ask = Callable[[str, str, str | None, str], Awaitable[None]]
# (who, kind, count so far, the last detail): a refusal to tell
Tell = Callable[[str, str, int, str], None]


class WorkerSupervisor:
    """Hears heartbeats (`record_beats`, `hearing`) and judges on each engine tick which
    workers are lost and which runs will never be reported."""

    def __init__(self, store: Store, clock, worker_timeout: int, ask: Ask, tell: Tell) -> None:
        self.store = store
        self.clock = clock
        self.worker_timeout = worker_timeout  # microseconds
        self.ask = ask
        self.tell = tell
        self._beat_at: dict[str, tuple[int, int]] = {}  # worker -> its newest heartbeat's order
        self._worker_refused: dict[str, dict[str, int]] | None = None  # as last heard
        self._heard_since: int | None = None  # engine clock: heartbeats read since then
        self._misses: dict[str, int] = {}  # command id -> heartbeats of its worker without it
        self._tended_at: int | None = None  # engine clock: the last tick's `tend`
        self._tend_gap = 0  # between the two ticks before it

    # ---- heartbeats ------------------------------------------------------------------------

    def hearing(self) -> None:
        """Heartbeats are read (again) from now on."""
        self._heard_since = self.clock.now()

    async def record_beats(self, beats: list[Heartbeat]) -> None:
        """A heartbeat counts only when it is newer than the last one of its worker (its
        signed process start and count): an old one sent again cannot keep a gone worker
        alive, nor bring back a state, a running list or counts it has left behind."""
        fresh = []
        for beat in beats:
            if beat.order > self._beat_at.get(beat.worker, (-1, -1)):
                self._beat_at[beat.worker] = beat.order
                fresh.append(beat)
        beats = fresh
        if not beats:
            return
        now = self.clock.now()
        if any(b.refused for b in beats):
            await self._workers_refusals(beats)
        back = await self.store.record_heartbeats(
            [
                Beat(
                    b.worker,
                    b.host,
                    b.slots,
                    b.running,
                    b.version,
                    b.state,
                    now,
                    b.log_dir,
                    b.group,
                    b.refused,
                    b.insecure,
                )
                for b in beats
            ]
        )
        for worker in back:
            log.warning("worker %s is heard again", worker)
        await self._check_running(beats)

    async def _workers_refusals(self, beats: list[Heartbeat]) -> None:
        """Counts a worker's heartbeat says it refused that went up: told to the listeners
        (the first heartbeats after a start are compared with what the store last had)."""
        if self._worker_refused is None:
            self._worker_refused = {w.id: dict(w.refused) for w in await self.store.list_workers()}
        for beat in beats:
            before = self._worker_refused.get(beat.worker, {})
            for kind, count in beat.refused.items():
                if count > before.get(kind, 0):
                    self.tell(f"worker {beat.worker}", kind, count, "told by its heartbeat")
            self._worker_refused[beat.worker] = dict(beat.refused)

    async def _check_running(self, beats: list[Heartbeat]) -> None:
        """A run its worker no longer lists, with no outcome heard: after RESEND_AFTER
        heartbeats, ask that worker for the outcome again (lost with a broker restart)."""
        beats = [b for b in beats if b.state in ("alive", "draining")]
        if not beats:
            return
        by_worker: dict[str, list] = {}
        for occ in await self.store.remote_active():
            if occ.state == "running" and occ.worker and occ.command_id:
                by_worker.setdefault(occ.worker, []).append(occ)
        for beat in beats:  # in order: one batch may hold several of one worker's
            for occ in by_worker.get(beat.worker, ()):
                command_id = occ.command_id
                if command_id in beat.running or (occ.started_at or 0) >= beat.at:
                    self._misses.pop(command_id, None)
                    continue
                misses = self._misses.get(command_id, 0) + 1
                self._misses[command_id] = misses
                if misses >= RESEND_AFTER:
                    self._misses[command_id] = 0
                    log.warning(
                        "asking worker %s to resend the outcome of %s", beat.worker, command_id
                    )
                    await self.ask("resend", command_id, beat.worker, "no outcome heard")

    def forget_runs(self, keep: set[str] | None = None) -> None:
        """Forget the misses of runs but those in `keep` (all of them when None)."""
        if keep is None:
            self._misses.clear()
            return
        for command_id in [c for c in self._misses if c not in keep]:
            del self._misses[command_id]

    # ---- on each tick ----------------------------------------------------------------------

    def after_a_gap(self, now: int) -> bool:
        """No tick for longer than worker_timeout, and far longer than usual: the engine was
        not listening (a machine asleep, a paused VM, a stopped process). Its workers' silence
        meanwhile says nothing, and their reports may still be on the way: for worker_timeout
        it calls no worker lost (a retry would start a run still going on its worker). True
        then: the caller fails no sent command as never started either, as after a broker
        outage."""
        gap_seen = False
        if self._tended_at is not None:
            gap = now - self._tended_at
            if gap > self.worker_timeout and gap > 3 * self._tend_gap:
                gap_seen = True
                if self._heard_since is not None:
                    self._heard_since = now
                log.warning(
                    "no tick for %ds: workers get %ds to be heard before one is called lost",
                    gap // MICROS, self.worker_timeout // MICROS,
                )  # fmt: skip
            self._tend_gap = gap
        self._tended_at = now
        return gap_seen

    def can_tell_lost(self, now: int, listening: bool) -> bool:
        """Silence means a lost worker only while heartbeats can be heard (`listening`: the
        broker is up and the heartbeats feed reads), and have been for worker_timeout: a
        broker outage silences every worker at once."""
        if not listening:
            return False
        return self._heard_since is not None and self._heard_since <= now - self.worker_timeout

    async def mark_silent_lost(self, now: int) -> None:
        """Workers silent for longer than worker_timeout are lost (ask `can_tell_lost` first)."""
        silent = await self.store.silent_workers(now - self.worker_timeout)
        if silent:
            await self.store.mark_workers_lost([w.id for w in silent], now)
            for worker in silent:
                log.warning(
                    "worker %s lost: silent for %ds", worker.id, (now - worker.last_seen) // MICROS
                )

    def lost_detail(
        self, occ: Occurrence, workers: dict[str, WorkerInfo], now: int, can_tell: bool
    ) -> str | None:
        """Why a run on a worker will never be reported, or None while it still may be:
        its worker was declared lost; or, while heartbeats can be heard, its worker was
        never heard from at all (a row older than worker_timeout), or it said it drained
        and stopped more than worker_timeout ago without reporting this run."""
        if occ.state != "running" or not occ.worker:
            return None
        worker = workers.get(occ.worker)
        if worker is not None and worker.state == "lost":
            return f"worker {worker.id} silent for {(now - worker.last_seen) // MICROS}s"
        if not can_tell:
            return None
        if worker is None:
            since = occ.started_at or occ.claimed_at
            if since < now - self.worker_timeout:
                return f"worker {occ.worker} never heard from ({(now - since) // MICROS}s running)"
        elif worker.state == "drained" and worker.last_seen < now - self.worker_timeout:
            silent_for = (now - worker.last_seen) // MICROS
            return f"worker {worker.id} stopped {silent_for}s ago without reporting this run"
        return None

"""Settlement: moving active occurrences by their receipts and runtime events. A part
of SchedulerEngine (tickui/engine.py holds the state)."""

from __future__ import annotations

import asyncio

from tickui.engine.records import EngineChange
from tickui.model.occurrence import Change, Progress, fold_events


class Settling:
    """reconcile() and the loop that runs it when events arrive."""

    async def reconcile(self) -> list[int]:
        """Move active occurrences by receipts and the runtime events after their cursors.

        Receipts held since dispatch are written here, in the same update as whatever the
        events already say, so a run that is accepted and finished costs one write.
        """
        changed: list[int] = []
        async with self._reconciling:
            receipts, self._receipts = self._receipts, {}
            self._in_flight.difference_update(receipts)
            after: int | None = 0
            while after is not None:
                pending, after = await self.store.unreconciled(after, self.config.batch)
                flying = self._in_flight  # dispatched, receipt not in hand: left alone
                changes = [
                    c
                    for p, events in pending
                    if p.id not in flying and (c := _fold(p, events, receipts))
                ]
                await self.store.apply_changes(changes)
                changed.extend(c.id for c in changes if c.state)
                if after is not None:
                    await asyncio.sleep(0)
            if receipts:  # accepted, nothing heard yet
                await self.store.mark_accepted(
                    [(i, r.get("command_id"), r.get("log_path")) for i, r in receipts.items()],
                    min(r["accepted_at"] for r in receipts.values()),
                )
                changed.extend(receipts)
        if changed:
            self._notify(EngineChange(occurrences=frozenset(changed)))
        return changed

    async def _reconcile_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._scanning.locked():
                self._wake_after_scan = True  # the scan reconciles as it ends
                continue
            try:
                changed = await self.reconcile()
                self._recovered("reconcile")
                # E: a run that ended may free a queued one (buffer_one's waiting slot, a
                # retry, a backfill): scan now rather than at the next tick.
                if (
                    self.config.scan_on_end
                    and changed
                    and await self.store.has_due_queued(self.clock.now())
                ):
                    await self.tick(self.clock.now())
            except Exception as exc:
                self._faulted("reconcile", exc)


def _fold(progress: Progress, events: list, receipts: dict[int, dict]) -> Change | None:
    """Events folded into an occurrence, with its dispatch receipt when one is pending."""
    receipt = receipts.pop(progress.id, None)
    if receipt is None:
        return fold_events(progress, events)
    accepted = progress.state == "claimed"
    start = (
        Progress(progress.id, "accepted", progress.command_id, progress.run_id, progress.cursor)
        if accepted
        else progress
    )
    change = fold_events(start, events) or Change(progress.id, progress.cursor)
    state = change.state or ("accepted" if accepted else None)
    return Change(change.id, change.cursor, state, {**receipt, **change.fields})

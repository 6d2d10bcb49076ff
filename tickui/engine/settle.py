"""Settlement: moving active occurrences by their dispatch receipts and runtime events."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from tickui.common.tasks import outlive
from tickui.engine.records import EngineChange
from tickui.model.occurrence import Change, Progress, fold_events
from tickui.store import Store


class Settlement:
    """The receipts held since dispatch, the runs handed out whose receipts are not in
    hand yet, and `reconcile()`, which writes both with what the events say."""

    def __init__(self, store: Store, batch: int, notify: Callable[[EngineChange], None]) -> None:
        self.store = store
        self.batch = batch
        self.notify = notify
        self._lock = asyncio.Lock()
        self._receipts: dict[int, dict[str, object]] = {}  # occurrence id -> not yet written
        # Occurrences handed to the dispatcher whose receipts no reconcile holds yet: a
        # reconcile that runs meanwhile (a run-now's, a cancel's) leaves them alone, or it
        # could fold a run's end into a row still `claimed` and move its cursor past it.
        self._in_flight: set[int] = set()

    @property
    def holds_receipts(self) -> bool:
        return bool(self._receipts)

    def handing_out(self, ids: Iterable[int]) -> None:
        """These runs go to the dispatcher: left alone until a reconcile takes their receipts."""
        self._in_flight.update(ids)

    def not_handed_out(self, ids: Iterable[int]) -> None:
        """These runs did not start (failed, fenced, or the dispatch was cut short)."""
        self._in_flight.difference_update(ids)

    def accepted(self, occurrence_id: int, receipt: dict[str, object]) -> None:
        self._receipts[occurrence_id] = receipt

    async def reconcile(self) -> list[int]:
        """Move active occurrences by receipts and the runtime events after their cursors.

        Receipts held since dispatch are written here, in the same update as whatever the
        events already say, so a run that is accepted and finished costs one write.
        """
        changed: list[int] = []
        async with self._lock:
            receipts, self._receipts = self._receipts, {}
            self._in_flight.difference_update(receipts)
            after: int | None = 0
            writing: asyncio.Task[None] | None = None
            try:
                while after is not None:
                    # the next page is read and folded while this one is written: the
                    # store's thread writes while the loop folds (their rows are apart)
                    pending, after = await self.store.unreconciled(after, self.batch)
                    flying = self._in_flight  # dispatched, receipt not in hand: left alone
                    changes = [
                        c
                        for p, events in pending
                        if p.id not in flying and (c := _fold(p, events, receipts))
                    ]
                    if writing is not None:
                        await writing
                    writing = asyncio.create_task(self.store.apply_changes(changes))
                    changed.extend(c.id for c in changes if c.state)
                await writing
            finally:
                await outlive(writing)  # a write under way ends first
            if receipts:  # accepted, nothing heard yet
                await self.store.mark_accepted(
                    [(i, r.get("command_id"), r.get("log_path")) for i, r in receipts.items()],
                    min(r["accepted_at"] for r in receipts.values()),
                )
                changed.extend(receipts)
        if changed:
            self.notify(EngineChange(occurrences=frozenset(changed)))
        return changed


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
    change = fold_events(start, events)
    if change is None:
        return Change(progress.id, progress.cursor, "accepted" if accepted else None, receipt)
    if change.state is None and accepted:
        change.state = "accepted"
    change.fields = {**receipt, **change.fields}
    return change

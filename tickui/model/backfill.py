"""Backfill: run a task's past slots in a range (`tickui task backfill NAME --from --to`).
Pure: which slots, checked against `now` and the --max bound; the store queues them as
occurrences of kind `backfill` (state `queued`), which the engine's scan starts oldest
first under the task's overlap policy (never misfire-skipped: they are past by design).

The range is (from, to]: a slot at `from` is not in it, one at `to` is. Refused (BadInput,
exit 2): `--from` after `--to`, an empty range, a `--to` in the future, no slot in the
range, and more slots than --max (the message gives the count). An interval's grid
(anchor + k * every) is followed back before its anchor, so a task added today can
backfill yesterday."""

from __future__ import annotations

from tickui.common.errors import BadInput
from tickui.common.timeutil import iso

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from tickui.schedules.triggers import Schedule

DEFAULT_MAX = 100
MAX_MAX = 5000  # below schedules.COUNT_CAP, so a cron's count is exact up to it


def backfill_slots(schedule: Schedule, start: int, end: int, now: int, limit: int) -> list[int]:
    """The schedule's slots in (start, end], oldest first, at most `limit` of them."""
    from tickui.schedules.triggers import IntervalSchedule  # --max's bounds are read without it

    if not 1 <= limit <= MAX_MAX:
        raise BadInput("--max", f"{limit} is out of range (1 to {MAX_MAX})")
    if start > end:
        raise BadInput("--from", f"{iso(start)} is after --to {iso(end)}")
    if start == end:
        raise BadInput("--from", "equals --to: the range (from, to] is empty")
    if end > now:
        raise BadInput("--to", f"{iso(end)} is in the future (a backfill runs past slots)")
    if isinstance(schedule, IntervalSchedule) and start < schedule.anchor:
        # The grid goes back past the task's first slot: a task made today backfills
        # yesterday on the same grid.
        back = -(-(schedule.anchor - start) // schedule.every)
        schedule = IntervalSchedule(schedule.every, schedule.anchor - back * schedule.every)
    window = schedule.slots(start + 1, end, limit)
    if window.count > limit:
        more = "+" if window.capped else ""
        raise BadInput(
            "--max",
            f"the range holds {window.count}{more} slots, more than --max {limit}",
        )
    if window.count == 0:
        raise BadInput("--from", f"no slot of the schedule in ({iso(start)}, {iso(end)}]")
    return list(window.newest)

"""Who did what to which task: the operator audit's values.

An `Actor` is a person's process acting on tickui (the OS user, the host in tickui's
sense, where from: the command line or the dashboard, and its pid); an `AuditEntry` is
one action of theirs as the store keeps it. The store writes an entry in the transaction
of the change it records; what the engine does by itself (scheduled runs, retries, a
pause) is not a person's action and has none.
"""

from __future__ import annotations

from dataclasses import dataclass

from tickui.common.timeutil import iso

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Any

ORIGINS = ("cli", "dashboard")
# The actions recorded, as they are named in the audit.
ACTIONS = (
    "add", "edit", "delete", "enable", "disable", "clear-pause", "run-now", "cancel",
    "backfill", "backfill-cancel",
)  # fmt: skip
AUDIT_KEPT = 10_000  # the newest entries kept; older ones are pruned as new ones come
MAX_DETAIL = 500


@dataclass(frozen=True, slots=True)
class Actor:
    user: str
    host: str
    origin: str  # one of ORIGINS
    pid: int | None = None

    @classmethod
    def here(cls, origin: str) -> Actor:
        """This process's user, host (TICKUI_HOST or the machine's name) and pid."""
        from tickui.common import procs

        assert origin in ORIGINS
        user, host, pid = procs.whoami()
        return cls(user, host, origin, pid)

    @property
    def shown(self) -> str:
        return f"{self.user}@{self.host}"


@dataclass(frozen=True, slots=True)
class AuditEntry:
    id: int
    at: int
    user: str
    host: str
    origin: str
    pid: int | None
    action: str
    task: str | None
    occurrence_id: int | None
    detail: str | None

    @property
    def actor(self) -> Actor:
        return Actor(self.user, self.host, self.origin, self.pid)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": iso(self.at),
            "user": self.user,
            "host": self.host,
            "origin": self.origin,
            "pid": self.pid,
            "action": self.action,
            "task": self.task,
            "occurrence_id": self.occurrence_id,
            "detail": self.detail,
        }


AUDIT_COLUMNS = "id, at, user_name, host, origin, pid, action, task, occurrence_id, detail"


def entry_from_row(row: Any) -> AuditEntry:
    return AuditEntry(*row)


def clipped(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_DETAIL:
        return text
    return text[: MAX_DETAIL - 1] + "…"


def changed_fields(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The build_spec fields an edit changed (given, dropped or given another value)."""
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))

"""An occurrence's states: what the state machine (tickui.model.occurrence) moves between,
named apart from it for the records and the listings' reads, which need no machine."""

ACTIVE = ("claimed", "accepted", "running")
TERMINAL = ("succeeded", "failed", "cancelled", "skipped")
# Waiting to start (a retry, buffer_one's slot, a backfill's): not active, not finished.
QUEUED = "queued"
STATES = (QUEUED, *ACTIVE, *TERMINAL)

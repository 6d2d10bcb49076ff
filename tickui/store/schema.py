"""The SQLite schema as numbered migrations; `PRAGMA user_version` says which have run."""

from __future__ import annotations

APPLICATION_ID = 0x7469636B  # "tick": marks a file as tickui's

# The occurrences table's columns up to schema 6, in order (schema 7 copies them over).
OCCURRENCE_COLUMNS_6 = """id, task_id, task, kind, scheduled_for, state, claimed_at, covers,
    missed, accepted_at, started_at, finished_at, exit_code, error_code, detail, command_id,
    run_id, owner, lease_token, pid, pgid, pid_start, event_cursor, generation, log_path"""

AUDIT_TABLE = """CREATE TABLE audit (
    id BIGINT PRIMARY KEY,
    at BIGINT NOT NULL,
    user_name TEXT NOT NULL,
    host TEXT NOT NULL,
    origin TEXT NOT NULL,
    pid BIGINT,
    action TEXT NOT NULL,
    task TEXT,
    occurrence_id BIGINT,
    request_id BIGINT,
    detail TEXT,
    told BIGINT
)"""
AUDIT_INDEXES = (
    "CREATE INDEX audit_task ON audit(task, id)",
    "CREATE INDEX audit_untold ON audit(id) WHERE told IS NULL",
    "CREATE INDEX audit_request ON audit(request_id) WHERE request_id IS NOT NULL",
)

MIGRATIONS: list[tuple[str, ...]] = [
    (  # 1: tasks, occurrences, the runtime event log and the lease
        """CREATE TABLE tasks (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            spec TEXT NOT NULL,
            definition_hash TEXT NOT NULL,
            source TEXT NOT NULL DEFAULT 'cli',
            enabled INTEGER NOT NULL DEFAULT 1,
            note TEXT,
            generation INTEGER NOT NULL DEFAULT 1,
            created_at INTEGER NOT NULL,
            updated_at INTEGER NOT NULL,
            anchor INTEGER NOT NULL,
            next_run_at INTEGER,
            due_at INTEGER
        )""",
        "CREATE INDEX tasks_due ON tasks(due_at) WHERE enabled = 1 AND due_at IS NOT NULL",
        """CREATE TABLE occurrences (
            id INTEGER PRIMARY KEY,
            task_id INTEGER NOT NULL,
            task TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('scheduled', 'manual')),
            scheduled_for INTEGER NOT NULL,
            state TEXT NOT NULL,
            claimed_at INTEGER NOT NULL,
            covers INTEGER NOT NULL DEFAULT 1,
            missed INTEGER NOT NULL DEFAULT 0,
            accepted_at INTEGER,
            started_at INTEGER,
            finished_at INTEGER,
            exit_code INTEGER,
            error_code TEXT,
            detail TEXT,
            command_id TEXT,
            run_id TEXT,
            owner TEXT,
            lease_token INTEGER,
            pid INTEGER,
            pgid INTEGER,
            pid_start INTEGER,
            event_cursor INTEGER NOT NULL DEFAULT 0,
            generation INTEGER NOT NULL DEFAULT 0
        )""",
        """CREATE UNIQUE INDEX occurrences_slot ON occurrences(task_id, scheduled_for)
            WHERE kind = 'scheduled'""",
        # Keyed on id, not state: moving between active states leaves the index alone.
        """CREATE INDEX occurrences_active ON occurrences(id)
            WHERE state IN ('claimed', 'accepted', 'running')""",
        "CREATE INDEX occurrences_task ON occurrences(task, id)",
        """CREATE TABLE events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            at INTEGER NOT NULL,
            command_id TEXT,
            run_id TEXT,
            type TEXT NOT NULL,
            payload TEXT NOT NULL DEFAULT '{}'
        )""",
        "CREATE INDEX events_command ON events(command_id, seq)",
        # Events that name only a run (a remote worker's) are found by run id.
        "CREATE INDEX events_run ON events(run_id, seq) WHERE command_id IS NULL",
        """CREATE TABLE lease (
            name TEXT PRIMARY KEY,
            owner TEXT NOT NULL,
            token INTEGER NOT NULL,
            expires_at INTEGER NOT NULL,
            host TEXT,
            pid INTEGER,
            pid_start INTEGER
        )""",
    ),
    (  # 2: run-now requests from other processes, per-occurrence log files
        """CREATE TABLE requests (
            id INTEGER PRIMARY KEY,
            task_id INTEGER NOT NULL,
            task TEXT NOT NULL,
            kind TEXT NOT NULL,
            created_at INTEGER NOT NULL,
            handled_at INTEGER,
            outcome TEXT,
            occurrence_id INTEGER,
            reason TEXT
        )""",
        "CREATE INDEX requests_pending ON requests(id) WHERE handled_at IS NULL",
        "ALTER TABLE occurrences ADD COLUMN log_path TEXT",
    ),
    (  # 3: the ticker's reserved sequence numbers
        "CREATE TABLE sequences (key TEXT PRIMARY KEY, value INTEGER NOT NULL)",
    ),
    (  # 4: per-task stats for a few ids; occurrences_slot is partial, so it cannot serve them
        "CREATE INDEX occurrences_task_id ON occurrences(task_id, id)",
    ),
    (  # 5: a slot recorded `skipped` (never run) no longer blocks running it later: an
        # engine that lost its lease before starting a claimed slot hands the slot back.
        "DROP INDEX occurrences_slot",
        """CREATE UNIQUE INDEX occurrences_slot ON occurrences(task_id, scheduled_for)
            WHERE kind = 'scheduled' AND state <> 'skipped'""",
    ),
    (  # 6: ksadk-style runtimes name the command as an event's causation, not its command
        "ALTER TABLE events ADD COLUMN causation_id TEXT",
        """CREATE INDEX events_causation ON events(causation_id, seq)
            WHERE command_id IS NULL AND causation_id IS NOT NULL""",
    ),
    (  # 7: failure handling. Retries are new occurrences of a slot (attempt 2, 3, ...,
        # retry_of the first attempt's id) that wait in state `queued` until retry_at;
        # buffer_one's waiting slot and a backfill's slots wait there too. `backfill` is a
        # kind (the CHECK on kind is why the table is rebuilt; its columns keep their
        # order, the new ones come last). A slot is unique per attempt. Tasks count their
        # consecutive failed slots (pause_after) and say whether a config task was edited
        # by hand (overridden). Hook deliveries are recorded.
        """CREATE TABLE occurrences_new (
            id INTEGER PRIMARY KEY,
            task_id INTEGER NOT NULL,
            task TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('scheduled', 'manual', 'backfill')),
            scheduled_for INTEGER NOT NULL,
            state TEXT NOT NULL,
            claimed_at INTEGER NOT NULL,
            covers INTEGER NOT NULL DEFAULT 1,
            missed INTEGER NOT NULL DEFAULT 0,
            accepted_at INTEGER,
            started_at INTEGER,
            finished_at INTEGER,
            exit_code INTEGER,
            error_code TEXT,
            detail TEXT,
            command_id TEXT,
            run_id TEXT,
            owner TEXT,
            lease_token INTEGER,
            pid INTEGER,
            pgid INTEGER,
            pid_start INTEGER,
            event_cursor INTEGER NOT NULL DEFAULT 0,
            generation INTEGER NOT NULL DEFAULT 0,
            log_path TEXT,
            attempt INTEGER NOT NULL DEFAULT 1,
            retry_of INTEGER,
            retry_at INTEGER
        )""",
        """INSERT INTO occurrences_new (COLS)
            SELECT COLS FROM occurrences""".replace("COLS", OCCURRENCE_COLUMNS_6),
        "DROP TABLE occurrences",
        "ALTER TABLE occurrences_new RENAME TO occurrences",
        """CREATE UNIQUE INDEX occurrences_slot ON occurrences(task_id, scheduled_for, attempt)
            WHERE kind IN ('scheduled', 'backfill') AND state <> 'skipped'""",
        """CREATE INDEX occurrences_active ON occurrences(id)
            WHERE state IN ('claimed', 'accepted', 'running')""",
        "CREATE INDEX occurrences_queued ON occurrences(task_id, id) WHERE state = 'queued'",
        "CREATE INDEX occurrences_task ON occurrences(task, id)",
        "CREATE INDEX occurrences_task_id ON occurrences(task_id, id)",
        "ALTER TABLE tasks ADD COLUMN failures INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE tasks ADD COLUMN overridden INTEGER NOT NULL DEFAULT 0",
        """CREATE TABLE hook_deliveries (
            id INTEGER PRIMARY KEY,
            hook TEXT NOT NULL,
            event TEXT NOT NULL,
            task TEXT,
            occurrence_id INTEGER,
            created_at INTEGER NOT NULL,
            finished_at INTEGER,
            attempts INTEGER NOT NULL DEFAULT 0,
            outcome TEXT NOT NULL DEFAULT 'pending',
            detail TEXT
        )""",
        "CREATE INDEX hook_deliveries_recent ON hook_deliveries(id)",
    ),
    (  # 8: runs on workers (Kafka). An occurrence says which worker started it and, once
        # handed to Kafka, the deadline after which no worker may start it (kept here so an
        # engine restart still fails it DISPATCH_TIMEOUT). Events from workers carry an id:
        # a redelivered one is stored once. Workers heard from, by their heartbeats.
        "ALTER TABLE occurrences ADD COLUMN worker TEXT",
        "ALTER TABLE occurrences ADD COLUMN deadline INTEGER",
        """CREATE INDEX occurrences_remote ON occurrences(id)
            WHERE deadline IS NOT NULL AND state IN ('claimed', 'accepted', 'running')""",
        "ALTER TABLE events ADD COLUMN event_id TEXT",
        "CREATE UNIQUE INDEX events_event_id ON events(event_id) WHERE event_id IS NOT NULL",
        """CREATE TABLE workers (
            id TEXT PRIMARY KEY,
            host TEXT NOT NULL,
            slots INTEGER NOT NULL,
            running TEXT NOT NULL DEFAULT '[]',
            version TEXT,
            state TEXT NOT NULL,
            last_seen INTEGER NOT NULL,
            first_seen INTEGER NOT NULL,
            log_dir TEXT,
            grp TEXT,
            lost_at INTEGER
        )""",
    ),
    (  # 9: signed dispatch. What each worker refused (from its heartbeats) and whether it
        # runs without a key; the same for each engine that dispatched, by its name.
        "ALTER TABLE workers ADD COLUMN refused TEXT NOT NULL DEFAULT '{}'",
        "ALTER TABLE workers ADD COLUMN insecure INTEGER NOT NULL DEFAULT 0",
        """CREATE TABLE dispatch_security (
            name TEXT PRIMARY KEY,
            insecure INTEGER NOT NULL,
            key_id TEXT,
            refused TEXT NOT NULL DEFAULT '{}',
            updated_at INTEGER NOT NULL
        )""",
    ),
    (  # 10: the operator audit: who (OS user, host, the command line or the dashboard)
        # did what to which task, written in the transaction of the change itself. A
        # run-now names its request (the lease holder fills in the run it started);
        # `told` is when the lease holder's hooks were told of it.
        AUDIT_TABLE.replace("BIGINT", "INTEGER"),
        *AUDIT_INDEXES,
    ),
]

VERSION = len(MIGRATIONS)

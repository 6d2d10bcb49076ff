"""engine_throughput.py's PostgreSQL mode: the databases, the seeding, the raw-claims side and
APScheduler 4's environment. Each round's side gets a database of its own, made on the
server as bench_<uuid> and dropped after.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from tickui.model.spec import build_spec

HERE = Path(__file__).resolve().parent
APS4_VENV = HERE / ".venv-aps4"
APS4_REQUIREMENTS = ("apscheduler==4.0.0a6", "sqlalchemy[asyncio]", "asyncpg", "sniffio")
HOUR = 3600 * 1_000_000


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


@contextmanager
def fresh_database(url: str) -> Iterator[str]:
    """A new, empty database on the server at `url`, dropped on the way out."""
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_database(url, name)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def seed(url: str, tasks: int, history: int, t0: int, retries: int = 0) -> None:
    """Tasks due at t0 and `history` settled occurrences, copied into tickui's tables (the
    schema made by opening the store once), then analysed as a running store's would be."""
    per_task = history // tasks
    with psycopg.connect(url, autocommit=False) as conn:
        with conn.cursor() as cur:
            with cur.copy(
                "COPY tasks (id, name, spec, definition_hash, created_at, updated_at, anchor,"
                " next_run_at, due_at) FROM STDIN"
            ) as copy:
                for i in range(tasks):
                    raw = {"name": f"job-{i:05d}", "every": "1h", "command": ["true"]}
                    if retries:
                        raw["retries"] = retries
                    spec = build_spec(raw, t0 - 1)
                    copy.write_row(
                        (i + 1, spec.name, spec.to_json(), spec.definition_hash()) + (t0,) * 5
                    )
            with cur.copy(
                "COPY occurrences (id, task_id, task, kind, scheduled_for, state, claimed_at)"
                " FROM STDIN"
            ) as copy:
                occ_id = 0
                for i in range(tasks):
                    for k in range(per_task):
                        occ_id += 1
                        at = t0 - (k + 1) * HOUR
                        copy.write_row(
                            (occ_id, i + 1, f"job-{i:05d}", "scheduled", at, "succeeded", at)
                        )
        conn.commit()
        conn.autocommit = True
        conn.execute("ANALYZE tasks")
        conn.execute("ANALYZE occurrences")


# ---- raw batched claims: the same table shape and writes, no engine --------------------------

_CLAIM = """
WITH picked AS (
    SELECT id FROM tasks WHERE enabled = 1 AND due_at IS NOT NULL AND due_at <= %(now)s
    ORDER BY due_at LIMIT %(batch)s FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE tasks t SET next_run_at = t.next_run_at + %(hour)s, due_at = t.due_at + %(hour)s
    FROM picked WHERE t.id = picked.id
    RETURNING t.id, t.name, t.next_run_at - %(hour)s AS slot, t.generation
), first AS (
    SELECT coalesce(max(id), 0) AS id FROM occurrences
)
INSERT INTO occurrences (id, task_id, task, kind, scheduled_for, state, claimed_at, owner,
    lease_token, generation, command_id)
SELECT first.id + n, m.id, m.name, 'scheduled', m.slot, 'claimed', %(now)s, 'raw', 1,
    m.generation, 'cmd-' || (first.id + n)
FROM first, (SELECT moved.*, row_number() OVER (ORDER BY moved.id) AS n FROM moved) m
RETURNING id, command_id
"""

_SETTLE_EVENTS = """
INSERT INTO events (at, command_id, run_id, type, payload)
SELECT %(now)s, c, 'run-' || c, 'run.completed', '{"exit_code": 0}' FROM unnest(%(cmds)s::text[]) c
"""

_SETTLE = """
UPDATE occurrences SET state = 'succeeded', accepted_at = %(now)s, finished_at = %(now)s,
    exit_code = 0, run_id = 'run-' || command_id
WHERE id = ANY(%(ids)s) AND state = 'claimed'
"""


def raw_side(url: str, tasks: int, now: int, batch: int = 500) -> tuple[float, int]:
    """Claim every due row in batches (one transaction each: move the task rows, insert their
    occurrences), then settle each batch (one transaction: its events and the occurrences
    marked succeeded). Returns the seconds taken and the succeeded rows in the table."""
    done = 0
    with psycopg.connect(url, autocommit=True) as conn:
        start = time.perf_counter()
        while True:
            params = {"now": now, "batch": batch, "hour": HOUR}
            with conn.transaction():
                rows = conn.execute(_CLAIM, params).fetchall()
            if not rows:
                break
            ids = [r[0] for r in rows]
            cmds = [r[1] for r in rows]
            with conn.transaction():
                conn.execute(_SETTLE_EVENTS, {"now": now, "cmds": cmds})
                settled = conn.execute(_SETTLE, {"now": now, "ids": ids}).rowcount
            assert settled == len(ids), (settled, len(ids))
            done += settled
        elapsed = time.perf_counter() - start
        succeeded = conn.execute(
            "SELECT count(*) FROM occurrences WHERE state = 'succeeded'"
        ).fetchone()[0]
    assert done == tasks, (done, tasks)
    return elapsed, succeeded


# ---- APScheduler 4, in a venv of its own ------------------------------------------------------


def aps4_python(venv: Path = APS4_VENV) -> Path:
    """The python of a venv holding APScheduler 4 (made once, then reused)."""
    python = venv / "bin" / "python"
    marker = venv / "requirements.txt"
    wanted = "\n".join(APS4_REQUIREMENTS) + "\n"
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    print(f"making {venv} ({', '.join(APS4_REQUIREMENTS)})", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--pre", *APS4_REQUIREMENTS], check=True
    )
    marker.write_text(wanted)
    return python


def aps4_child(python: Path, url: str, tasks: int) -> dict:
    result = subprocess.run(
        [str(python), str(HERE / "engine_throughput_aps4.py"), url, str(tasks)],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SystemExit(f"APScheduler 4 side failed: {result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])

"""The query groups' batch writes as one statement per batch, on PostgreSQL.

A batch the query groups write with `executemany` (a claim's task moves and occurrence
rows, a settlement's updates, appended events) runs there as one statement a row. On
PostgreSQL each of those is a statement executed on its own, however well pipelined and
prepared; here the same statement text is turned, once, into one that takes the batch's
rows as one value, a JSON array of arrays, and writes them all in one execution:

- `INSERT [OR IGNORE] INTO t (cols) VALUES (?, 'literal', ...)` into
  `INSERT INTO t (cols) SELECT v.p1, 'literal', ... FROM (rows) AS v`
  (`ON CONFLICT DO NOTHING` for OR IGNORE). Rows go in in the batch's order; a unique key
  refuses the statement as it refused its row (the caller's transaction ends alike), and
  OR IGNORE leaves out a row whose key the table or an earlier row of the batch holds.
- `UPDATE t SET c = ?, d = coalesce(?, d) WHERE id = ? AND ...` into
  `UPDATE t SET c = v.p1, ... FROM (rows) AS v WHERE id = v.p3 AND ...`, when the
  batch's ids are distinct: then no row of the batch sees another's write, and the rows
  changed are those the statement a row would have changed.

`(rows)` is `SELECT (r->>0)::bigint AS p1, r->>1 AS p2, ... FROM jsonb_array_elements(?)`:
each value typed as its column (every integer a bigint, texts text), so NULLs and the
WHERE's comparisons are typed as the column is. JSON rather than an array a column: the
client encodes the batch in one C call (psycopg dumps an array element by element). A
statement of another shape, or a batch whose values are not plainly ints and strings as
their columns hold, runs as before, a statement a row.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tickui.store import pgschema
from tickui.store.base import StoreBase

_TABLE = re.compile(r"\s*CREATE TABLE (\w+) \((.*)\)\s*$", re.S)
_COLUMN = re.compile(r"(\w+) (BIGINT|TEXT)\b")
_INSERT = re.compile(r"INSERT (OR IGNORE )?INTO (\w+) \(([\w, ]+)\) VALUES \(([^()]*)\)", re.S)
_UPDATE = re.compile(r"UPDATE (\w+) SET (.*?) WHERE (.*)", re.S)
_QUOTED = re.compile(r"'[^']*'")
_LITERAL = re.compile(r"'[^',]*'|-?\d+|NULL")
_EQUALS = re.compile(r"(?<![.\w])(\w+) = $")  # `col = ?`, the column not qualified
_COALESCE_HEAD = re.compile(r"(?<![.\w])coalesce\($", re.IGNORECASE)
_COALESCE_TAIL = re.compile(r"^, (\w+)\)")
_PY_TYPES = {"bigint": {int, type(None)}, "text": {str, type(None)}}
_encode = json.JSONEncoder().encode  # tuples as arrays, None as null


@functools.cache
def column_types() -> dict[str, dict[str, str]]:
    """Per table, its columns' types ("bigint" or "text"), from the schema's migrations."""
    found: dict[str, dict[str, str]] = {}
    for step in pgschema.MIGRATIONS:
        for statement in step:
            table = _TABLE.match(statement)
            if table:
                columns = _COLUMN.findall(table.group(2))
                found[table.group(1)] = {name: kind.lower() for name, kind in columns}
    return found


@dataclass(frozen=True)
class SetBased:
    """One batch statement's set-based form: its text (one placeholder, the rows as a
    JSON array of arrays), its values' types in order, and the value that must be
    distinct across the batch's rows (an UPDATE's `id = ?`), if any."""

    text: str
    types: tuple[str, ...]
    key: int | None

    def params(self, rows: Sequence[Sequence[Any]]) -> tuple[str] | None:
        """The rows as the statement takes them, or None when they do not fit this form:
        a row of another width, a value that is neither None nor its column's Python
        type (an int for a bigint, a str for a text), a key twice."""
        width = len(self.types)
        if any(len(row) != width for row in rows):
            return None
        columns = list(zip(*rows, strict=True))
        for values, kind in zip(columns, self.types, strict=True):
            if not set(map(type, values)) <= _PY_TYPES[kind]:
                return None
        if self.key is not None:
            keys = columns[self.key]
            if None in keys or len(set(keys)) != len(keys):
                return None
        return (_encode(rows),)


def _placeholders(sql: str) -> list[int]:
    """Where each `?` is, outside quoted literals."""
    spots: list[int] = []
    quote = ""
    for at, ch in enumerate(sql):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "?":
            spots.append(at)
    return spots


def _depth(sql: str) -> int:
    """How many brackets are open at the end of `sql`, quoted literals left out."""
    bare = _QUOTED.sub("", sql)
    return bare.count("(") - bare.count(")")


def _rows(types: Sequence[str]) -> str:
    """The batch's rows as a relation v(p1, p2, ...), each value typed as its column."""
    values = ", ".join(
        f"r->>{n} AS p{n + 1}" if kind == "text" else f"(r->>{n})::{kind} AS p{n + 1}"
        for n, kind in enumerate(types)
    )
    return f"(SELECT {values} FROM jsonb_array_elements(?::jsonb) AS r) AS v"


def _insert(sql: str) -> SetBased | None:
    found = _INSERT.fullmatch(sql.strip())
    if not found:
        return None
    table = column_types().get(found.group(2))
    columns = [c.strip() for c in found.group(3).split(",")]
    values = [v.strip() for v in found.group(4).split(",")]
    if table is None or len(columns) != len(values) or any(c not in table for c in columns):
        return None
    select, types = [], []
    for column, value in zip(columns, values, strict=True):
        if value == "?":
            types.append(table[column])
            select.append(f"v.p{len(types)}")
        elif _LITERAL.fullmatch(value):
            select.append(value)
        else:
            return None
    text = (
        f"INSERT INTO {found.group(2)} ({', '.join(columns)}) SELECT {', '.join(select)}"
        f" FROM {_rows(types)}"
    )
    if found.group(1):
        text += " ON CONFLICT DO NOTHING"
    return SetBased(text, tuple(types), None)


def _update(sql: str) -> SetBased | None:
    text = sql.strip()
    found = _UPDATE.fullmatch(text)
    if (
        not found
        or "SELECT" in found.group(2).upper()
        or re.search(r"\bOR\b", found.group(3), re.I)
    ):
        return None
    table = column_types().get(found.group(1))
    if table is None:
        return None
    pieces: list[str] = []
    types: list[str] = []
    key, last = None, 0
    for at in _placeholders(text):
        equals = _EQUALS.search(text[:at])
        tail = _COALESCE_TAIL.match(text[at + 1 :])
        if at > found.start(3) and _depth(text[found.start(3) : at]):
            return None  # a value inside a subquery or a bracket: not the row's own
        if equals and equals.group(1) in table:
            column = equals.group(1)
            if at > found.start(3) and re.search(r"(WHERE|AND) id = $", text[:at]):
                key = len(types)
        elif _COALESCE_HEAD.search(text[:at]) and tail and tail.group(1) in table:
            column = tail.group(1)
        else:
            return None
        types.append(table[column])
        pieces.append(f"{text[last:at]}v.p{len(types)}")
        last = at + 1
    if key is None:
        return None
    head, where = ("".join(pieces) + text[last:]).split(" WHERE ", 1)
    return SetBased(f"{head} FROM {_rows(types)} WHERE {where}", tuple(types), key)


@functools.lru_cache(maxsize=256)
def set_based(sql: str) -> SetBased | None:
    """The set-based form of a batch statement, or None for a shape it has none."""
    return _insert(sql) or _update(sql)


class BulkWrites(StoreBase):
    """A store's batch writes, one statement a batch where the statement has the form."""

    async def _many(self, sql: str, rows: Sequence[Sequence[Any]]) -> Any:
        form = set_based(sql) if len(rows) > 1 else None
        params = form.params(rows) if form is not None else None
        if form is None or params is None:
            return await super()._many(sql, rows)
        return await self._conn.executemany(form.text, [params])

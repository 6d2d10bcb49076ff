"""The query groups' batch writes as one statement per batch, on PostgreSQL.

A batch the query groups write with `executemany` (a claim's task moves and occurrence
rows, a settlement's updates, appended events) runs there as one statement a row. On
PostgreSQL each of those is a statement executed on its own, however well pipelined and
prepared; here the same statement text is turned, once, into one that takes each of its
values as an array (`unnest`) and writes the whole batch in one execution:

- `INSERT [OR IGNORE] INTO t (cols) VALUES (?, 'literal', ...)` into
  `INSERT INTO t (cols) SELECT v.p1, 'literal', ... FROM unnest(?::bigint[], ...) AS v(p1, ...)`
  (`ON CONFLICT DO NOTHING` for OR IGNORE). Rows go in in the batch's order; a unique key
  refuses the statement as it refused its row (the caller's transaction ends alike), and
  OR IGNORE leaves out a row whose key the table or an earlier row of the batch holds.
- `UPDATE t SET c = ?, d = coalesce(?, d) WHERE id = ? AND ...` into
  `UPDATE t SET c = v.p1, ... FROM unnest(...) AS v(p1, ...) WHERE id = v.p3 AND ...`,
  when the batch's ids are distinct: then no row of the batch sees another's write, and
  the rows changed are those the statement a row would have changed.

Each value's array type is its column's (every integer a bigint, texts text), so NULLs
and the WHERE's comparisons are typed as the column is. A statement of another shape, or
a batch whose values are not plainly ints and strings as their columns hold, runs as
before, a statement a row.
"""

from __future__ import annotations

import functools
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
_LITERAL = re.compile(r"'[^',]*'|-?\d+|NULL")
_EQUALS = re.compile(r"(?<![.\w])(\w+) = $")  # `col = ?`, the column not qualified
_COALESCE_HEAD = re.compile(r"(?<![.\w])coalesce\($", re.IGNORECASE)
_COALESCE_TAIL = re.compile(r"^, (\w+)\)")
_PY_TYPES = {"bigint": int, "text": str}


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
    """One batch statement's set-based form: its text (placeholders `?`, one array
    each), the array types in order, and the value that must be distinct across the
    batch's rows (an UPDATE's `id = ?`), if any."""

    text: str
    types: tuple[str, ...]
    key: int | None

    def params(self, rows: Sequence[Sequence[Any]]) -> tuple[list[Any], ...] | None:
        """The arrays for `rows`, or None when they do not fit this form: a row of another
        width, a value that is neither None nor its column's Python type, a key twice."""
        width = len(self.types)
        if any(len(row) != width for row in rows):
            return None
        arrays = tuple(list(values) for values in zip(*rows, strict=True))
        for values, kind in zip(arrays, self.types, strict=True):
            wanted = _PY_TYPES[kind]
            if any(value is not None and type(value) is not wanted for value in values):
                return None
        if self.key is not None:
            keys = arrays[self.key]
            if None in keys or len(set(keys)) != len(keys):
                return None
        return arrays


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


def _unnest(types: Sequence[str]) -> str:
    arrays = ", ".join(f"?::{kind}[]" for kind in types)
    names = ", ".join(f"p{n + 1}" for n in range(len(types)))
    return f"unnest({arrays}) AS v({names})"


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
        f" FROM {_unnest(types)}"
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
    return SetBased(f"{head} FROM {_unnest(types)} WHERE {where}", tuple(types), key)


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

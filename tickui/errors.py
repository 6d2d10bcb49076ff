"""Error types that carry a user-facing, one-line message."""

from __future__ import annotations


class TickuiError(Exception):
    """Base for errors that tickui reports to a user in one line."""


class BadInput(TickuiError, ValueError):
    """Input a user gave is wrong; `field` names what, so the message can say where."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field
        self.message = message


class StoreError(TickuiError):
    """The database cannot be used (foreign, newer, corrupt); nothing was written."""


class NotFound(TickuiError, LookupError):
    """A named task or occurrence does not exist."""


class Unavailable(TickuiError):
    """A file or the database cannot be used now: missing, locked, full, on read-only
    media, in a folder that cannot be written, or not the user's. Not bad input (exit 1)."""

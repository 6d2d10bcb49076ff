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


class NotSetUp(Unavailable):
    """Read-only, there is no tickui database there yet: no file, an empty one, or a
    PostgreSQL database tickui never set up."""


# What is the user's to fix (exit 2); every other TickuiError is a fault (exit 1).
BAD_INPUT = (BadInput, NotFound, StoreError)


# ---- the ticker's typed errors, named after ONEX's (omnibase_infra.errors) ------------------


class SchedulerConfigError(TickuiError, ValueError):
    """A scheduler built without a config or an event bus, or with a config it cannot use.

    Mirrors ONEX's `ProtocolConfigurationError`."""


class TickTimeError(TickuiError, TypeError, ValueError):
    """`emit_tick(now=...)` got a naive datetime or something that is not a datetime.

    Raised before any sequence number is used (ONEX 0.38.6 fails later, with a pydantic
    `ValidationError`, after using one; 0.38.76 publishes the naive time)."""


class TickPublishError(TickuiError):
    """A tick that did not reach the event bus. Mirrors ONEX's `RuntimeHostError` base:
    `error_code` carries ONEX's code, `correlation_id` the tick's, `context` the details.
    The tick used its sequence number (as in ONEX): consumers see a gap."""

    error_code = "ONEX_CORE_205_SERVICE_UNAVAILABLE"

    def __init__(
        self,
        message: str,
        *,
        topic: str = "",
        scheduler_id: str = "",
        sequence_number: int | None = None,
        correlation_id: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.topic = topic
        self.scheduler_id = scheduler_id
        self.sequence_number = sequence_number
        self.correlation_id = correlation_id
        self.reason = reason
        self.context = {
            "topic": topic,
            "scheduler_id": scheduler_id,
            "sequence_number": sequence_number,
            "reason": reason,
        }


class InfraTimeoutError(TickPublishError, TimeoutError):
    """The publish did not finish within the publish timeout.

    Mirrors ONEX's `InfraTimeoutError` ("Timeout emitting tick to topic <t>")."""

    error_code = "ONEX_CORE_092_TIMEOUT_ERROR"


class InfraConnectionError(TickPublishError, ConnectionError):
    """The bus raised while publishing (broker down, refused, simulated failure).

    Mirrors ONEX's `InfraConnectionError` ("Failed to emit tick to topic <t>")."""


class InfraUnavailableError(TickPublishError):
    """Nothing was sent: the circuit breaker is open (or the publish backlog is full).

    Mirrors ONEX's `InfraUnavailableError` ("Circuit breaker is open -
    runtime-scheduler.<id> temporarily unavailable")."""

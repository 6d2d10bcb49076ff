"""How every tickui Kafka client reaches the broker: the bootstrap and the security
settings (TLS, SASL), in one object whose `options()` each client is built with, so no
client can be made plaintext by forgetting a setting. The password is read once, kept
out of every repr, and hidden wherever text leaves tickui (redact.hide)."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tickui.common.errors import BadInput, Unavailable
from tickui.common.options import MECHANISMS, PROTOCOLS
from tickui.common.redact import hide, printable, redact

if TYPE_CHECKING:
    import ssl  # loaded by the clients that use TLS: the settings readers do not need it


@dataclass(frozen=True)
class KafkaAccess:
    bootstrap: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @classmethod
    def of(cls, value: str | KafkaAccess) -> KafkaAccess:
        """A bare bootstrap is plaintext, without a login."""
        return value if isinstance(value, KafkaAccess) else cls(value)

    def __str__(self) -> str:
        return self.bootstrap

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def described(self) -> str:
        """What this connection is, for a log line: never the password."""
        said = self.security_protocol
        if self.uses_sasl:
            said += f" {self.sasl_mechanism} as {self.sasl_username}"
        return said

    def check(self) -> None:
        """Every setting that goes together is there: bad input (exit 2) otherwise."""
        if self.security_protocol not in PROTOCOLS:
            raise BadInput("security_protocol", f"{self.security_protocol!r} is not one of "
                           + ", ".join(PROTOCOLS))  # fmt: skip
        if self.uses_sasl:
            if self.sasl_mechanism not in MECHANISMS:
                raise BadInput("sasl_mechanism", "give one of " + ", ".join(MECHANISMS))
            if not self.sasl_username:
                raise BadInput("sasl_username", f"{self.security_protocol} needs a user name")
            if not self.sasl_password:
                raise BadInput(
                    "sasl_password_file",
                    f"{self.security_protocol} needs a password: sasl_password_file"
                    " or TICKUI_KAFKA_PASSWORD",
                )
        if self.ssl_keyfile and not self.ssl_certfile:
            raise BadInput("ssl_keyfile", "goes with ssl_certfile (the client's certificate)")
        if self.uses_tls:
            self.ssl_context()

    def ssl_context(self) -> ssl.SSLContext | None:
        """The CA to trust (the system's when none is given) and the client's own
        certificate when one is given; None without TLS. A file that cannot be read is bad
        input. Made once per process for the same files."""
        if not self.uses_tls:
            return None
        return _ssl_context(self.ssl_cafile, self.ssl_certfile, self.ssl_keyfile)

    def options(self) -> dict[str, Any]:
        """The keyword arguments every aiokafka client (producer, consumer, admin) takes."""
        _topics_made_only_on_purpose()
        opts: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": self.security_protocol,
        }
        if self.uses_tls:
            opts["ssl_context"] = self.ssl_context()
        if self.uses_sasl:
            opts["sasl_mechanism"] = self.sasl_mechanism
            opts["sasl_plain_username"] = self.sasl_username
            opts["sasl_plain_password"] = self.sasl_password
        return opts

    def refusal(self, exc: BaseException) -> str | None:
        """When `exc` says the broker refused us (a login, a certificate), one line naming
        which; None for anything else (a broker that is down, a timeout)."""
        import ssl

        text = f"{type(exc).__name__}: {exc}"
        cause = exc.__cause__ or exc.__context__
        if cause is not None:
            text += f" ({type(cause).__name__}: {cause})"
        lowered = text.lower()
        name = type(exc).__name__
        where = f"kafka {self.bootstrap}"
        if isinstance(exc, ssl.SSLCertVerificationError) or "certificate verify failed" in lowered:
            trusted = self.ssl_cafile or "the system's CAs"
            return f"{where}: the broker's TLS certificate is not trusted ({trusted})"
        if name == "SaslAuthenticationFailed" or "authentication failed" in lowered:
            return (
                f"{where}: login refused for user {self.sasl_username}"
                f" ({self.sasl_mechanism}): wrong user name or password?"
            )
        if name == "UnsupportedSaslMechanismError":
            return f"{where}: the broker does not take {self.sasl_mechanism} logins"
        if isinstance(exc, ssl.SSLError):
            return f"{where}: TLS failed: {redact(str(exc))[:200]}"
        return None


@functools.cache
def _topics_made_only_on_purpose() -> None:
    """aiokafka's clients ask for metadata allowing the broker to make a missing topic
    with its default partitions (Tansu 4, Kafka 1). A reader that asked before tickui
    made its topics again on a broker that came back empty would leave a topic with too
    few partitions for good (the commands keyed to the others never sent). tickui makes
    its topics itself, with their partitions (create_topics); its clients never do."""
    import aiokafka.client
    from aiokafka.protocol.metadata import MetadataRequest

    class NeverCreating(MetadataRequest):
        def __init__(self, topics: list[str] | None = None, allow_auto_topic_creation=False):
            super().__init__(topics, allow_auto_topic_creation)

    aiokafka.client.MetadataRequest = NeverCreating  # the one name its clients build with


@functools.lru_cache(maxsize=8)
def _ssl_context(cafile: str | None, certfile: str | None, keyfile: str | None) -> ssl.SSLContext:
    import ssl

    try:
        context = ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        raise BadInput("ssl_cafile", f"{cafile}: {_why(exc)}") from None
    if certfile:
        try:
            context.load_cert_chain(certfile, keyfile)
        except (OSError, ssl.SSLError) as exc:
            raise BadInput("ssl_certfile", f"{certfile}: {_why(exc)}") from None
    return context


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return redact(str(exc))[:200] or type(exc).__name__


def read_password(path: str, name: str) -> str:
    """A password file: its first line, and the file must be the owner's alone."""
    try:
        info = os.stat(path)
        if info.st_mode & 0o077:
            raise BadInput(name, f"{path} is open to group or others: chmod 600 it")
        text = Path(path).read_text("utf-8")
    except OSError as exc:
        raise BadInput(name, f"{path}: {(exc.strerror or 'cannot be read').lower()}") from None
    except UnicodeDecodeError:
        raise BadInput(name, f"{path} is not UTF-8 text") from None
    password = text.splitlines()[0] if text else ""
    if not password:
        raise BadInput(name, f"{path} is empty")
    hide(password)
    return password


async def preflight(access: KafkaAccess, timeout: float = 5.0) -> None:
    """With TLS or a login, try one connection to each bootstrap server at start: a refused
    login or an untrusted certificate is Unavailable (exit 1) at once, naming which, not a
    retry loop. A broker that does not answer is left to the caller's own handling. (A
    client's start() hides the reason behind "Unable to bootstrap"; one connection of its
    own says it.)"""
    import asyncio

    if access.security_protocol == "PLAINTEXT":
        return
    from aiokafka.conn import create_conn

    opts = access.options()
    del opts["bootstrap_servers"]
    for server in access.bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            conn = await asyncio.wait_for(
                create_conn(
                    host.strip("[]"), int(port), request_timeout_ms=int(timeout * 1000), **opts
                ),
                timeout,
            )
        except Exception as exc:
            said = access.refusal(exc)
            if said is not None:
                raise Unavailable(said) from None
            continue
        conn.close()
        return


# ---- what every Kafka client of tickui shares ------------------------------------------------

EXISTS = 36  # Kafka's TOPIC_ALREADY_EXISTS: a topic another client made first is no failure
# How often a consumer's background fetcher looks at its partitions when nothing else wakes
# it (aiokafka's consumer_timeout_ms, 200 by default). An answered fetch, records taken, a
# pause, a resume or a rebalance each wake it at once: a longer look costs no latency, only
# fewer wakeups of an idle process.
FETCHER_LOOK_MS = 1000


def describe(exc: BaseException, bootstrap: str | None = None) -> str:
    """One redacted line for a Kafka failure: aiokafka's messages carry newlines and
    indentation, and often start with their class name already."""
    name = type(exc).__name__
    text = " ".join(redact(str(exc)).split())  # a secret is found before spaces move
    text = text if text.startswith(name) else f"{name}: {text}" if text else name
    if bootstrap is not None:
        text = f"kafka {bootstrap}: {text}"
    return printable(redact(text))[:300]


async def start_producer(access: KafkaAccess, request_timeout_ms: int, **options: Any):
    """A started producer: acks from all replicas, no idempotence (Tansu refuses it), sent
    at once (no linger). Nothing is left open when it cannot start."""
    from aiokafka import AIOKafkaProducer

    settings: dict[str, Any] = {
        "acks": "all",
        "enable_idempotence": False,
        "linger_ms": 0,
        "retry_backoff_ms": 100,
        **options,
    }
    producer = AIOKafkaProducer(
        **access.options(), request_timeout_ms=request_timeout_ms, **settings
    )
    try:
        await producer.start()
    except BaseException:
        await quietly_stop(producer)
        raise
    return producer


class TopicError(Exception):
    """The broker refused to make a topic (an error other than "it exists")."""


async def create_topics(
    access: KafkaAccess, topics: dict[str, int], request_timeout_ms: int
) -> set[str]:
    """Make the topics (name -> partitions) that do not exist yet, one replica each; the
    names made now (the others existed). TopicError when the broker refuses one."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(**access.options(), request_timeout_ms=request_timeout_ms)
    try:
        await admin.start()
        response = await admin.create_topics([NewTopic(t, n, 1) for t, n in topics.items()])
        made = set()
        for topic, code, *_ in getattr(response, "topic_errors", []):
            if code not in (0, EXISTS):
                raise TopicError(f"kafka: creating topic {topic} failed (error {code})")
            if code == 0:
                made.add(topic)
        return made
    finally:
        await quietly_stop(admin, "close")


async def quietly_stop(client: Any, method: str = "stop", timeout: float = 3.0) -> None:
    """Stop a Kafka client, bounded (a stop can hang while the broker is down); a failure
    is logged at debug. Cancelling the caller still cancels."""
    import asyncio
    import logging

    try:
        await asyncio.wait_for(getattr(client, method)(), timeout)
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise
        logging.getLogger("tickui.kafka").debug("stopping a kafka client was cut short")
    except Exception:
        logging.getLogger("tickui.kafka").debug("stopping a kafka client failed", exc_info=True)


def set_fetch_wait(consumer: Any, wait_ms: int) -> None:
    """How long the broker may hold `consumer`'s next fetches (a started aiokafka consumer).
    aiokafka takes fetch_max_wait_ms only when it is made, but reads it anew for each fetch
    its background fetcher sends: the fetch in flight keeps the wait it was sent with."""
    consumer._fetcher._fetch_max_wait_ms = int(wait_ms)

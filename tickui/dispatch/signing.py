"""Who may speak on the dispatch topics: every message the engine and its workers send is
signed with HMAC-SHA256 under a shared key, and what does not check is refused.

The signature covers the exact bytes sent: a domain tag, the topic, the message key, the
value and, for run commands, the partition (each length-prefixed), so a message cannot be
moved to another topic, key or partition: a copy of a run command can only land where the
original did, before the one worker that reads that partition and remembers it.
It travels in two Kafka headers, `tickui-kid` (which key) and `tickui-sig` (hex). A key
file may hold several keys: the first signs, all are accepted, so keys rotate without a
moment when old and new do not understand each other. Pure: no I/O here (see keyfile.py).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

KID_HEADER = "tickui-kid"
SIG_HEADER = "tickui-sig"
_TAG = b"tickui-dispatch-sig-v1"

# Why a message was refused; the kinds the counters and the dashboard name.
UNSIGNED = "unsigned"
UNKNOWN_KEY = "unknown key"
BAD_SIGNATURE = "bad signature"


@dataclass(frozen=True)
class Key:
    kid: str
    secret: bytes = field(repr=False)


def _signed_bytes(topic: str, key: bytes | None, value: bytes, partition: int | None) -> bytes:
    where = b"" if partition is None else str(partition).encode()
    parts = (_TAG, topic.encode(), key or b"", value, where)
    return b"".join(struct.pack(">I", len(p)) + p for p in parts)


def _mac(secret: bytes, topic: str, key: bytes | None, value: bytes, partition: int | None) -> str:
    signed = _signed_bytes(topic, key, value, partition)
    return hmac.new(secret, signed, hashlib.sha256).hexdigest()


class Keyring:
    """The keys a process signs and checks with. Empty: `--insecure`, nothing is signed
    and nothing is checked (the process says so wherever it shows its state)."""

    def __init__(self, keys: Sequence[Key] = ()) -> None:
        self.keys = tuple(keys)
        self._by_kid = {k.kid: k for k in self.keys}

    @property
    def insecure(self) -> bool:
        return not self.keys

    @property
    def signing_kid(self) -> str | None:
        return self.keys[0].kid if self.keys else None

    def seal(
        self, topic: str, key: bytes | None, value: bytes, partition: int | None = None
    ) -> list[tuple[str, bytes]]:
        """The headers to send with this message (bound to `partition` when given)."""
        if not self.keys:
            return []
        signer = self.keys[0]
        mac = _mac(signer.secret, topic, key, value, partition)
        return [(KID_HEADER, signer.kid.encode()), (SIG_HEADER, mac.encode())]

    def check(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[tuple[str, bytes]] | None,
        partition: int | None = None,
    ) -> str | None:
        """None when the message may be believed; else why not (UNSIGNED, UNKNOWN_KEY or
        BAD_SIGNATURE). Insecure: everything may."""
        if not self.keys:
            return None
        kid = sig = None
        for name, raw in headers or ():
            if name == KID_HEADER:
                kid = raw
            elif name == SIG_HEADER:
                sig = raw
        if kid is None or sig is None:
            return UNSIGNED
        try:
            signer = self._by_kid.get(kid.decode())
            given = sig.decode("ascii")
        except (UnicodeDecodeError, AttributeError):
            return BAD_SIGNATURE
        if signer is None:
            return UNKNOWN_KEY
        expected = _mac(signer.secret, topic, key, value or b"", partition)
        return None if hmac.compare_digest(expected, given) else BAD_SIGNATURE

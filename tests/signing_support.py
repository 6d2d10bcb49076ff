"""The key the tests' engines and workers sign with: one key file per test process, made at
import and named in TICKUI_KEY_FILE (so every `tickui run --dispatch kafka` and `tickui
worker` the tests start finds it), and what a test producing by hand needs to sign."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tickui.dispatch import keyfile
from tickui.dispatch.signing import Keyring

_folder = Path(tempfile.mkdtemp(prefix="tickui-test-key-"))
KEY_FILE = _folder / "dispatch.key"
keyfile.write(KEY_FILE, [keyfile.new_key()], new=True)
os.environ["TICKUI_KEY_FILE"] = str(KEY_FILE)
KEYRING: Keyring = keyfile.read(KEY_FILE)


def headers(
    topic: str, key: bytes | str | None, value: bytes, partition: int | None = None
) -> list[tuple[str, bytes]]:
    """The headers that make a hand-made message one the engine or a worker believes (a run
    command's name the partition it is sent to: `runs_partition`)."""
    raw = key.encode() if isinstance(key, str) else key
    return KEYRING.seal(topic, raw, value, partition)


def runs_partition(key: bytes | str, partitions: int = 12) -> int:
    """The partition the engine sends a run command with this key to (the default
    partitioner's choice, which the engine makes itself to sign it)."""
    from aiokafka.partitioner import DefaultPartitioner

    raw = key.encode() if isinstance(key, str) else key
    return DefaultPartitioner()(raw, list(range(partitions)), list(range(partitions)))

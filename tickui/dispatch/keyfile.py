"""Key files: one key a line (`KID SECRET`, the secret in URL-safe base64), the first
signs and every one is accepted. A key file readable or writable by anyone but its owner
is refused: whoever can read it can command every worker."""

from __future__ import annotations

import base64
import os
import re
import secrets
import stat
import time
from pathlib import Path

from tickui.common.errors import BadInput
from tickui.common.redact import hide
from tickui.dispatch.signing import Key, Keyring

KID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SECRET_BYTES = 32
MIN_SECRET_BYTES = 16
HEADER = (
    "# tickui dispatch keys: the first line signs, every line is accepted.\n"
    "# Keep this file private (mode 600): whoever reads it can command every worker.\n"
)
HOW_TO_MAKE = "make one with 'tickui key new PATH'"


def new_key() -> Key:
    kid = time.strftime("k%Y%m%d-", time.gmtime()) + secrets.token_hex(3)
    return Key(kid, secrets.token_bytes(SECRET_BYTES))


def _encode(key: Key) -> str:
    return f"{key.kid} {base64.urlsafe_b64encode(key.secret).decode().rstrip('=')}"


def parse(text: str, where: str) -> list[Key]:
    keys: list[Key] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2 or not KID.fullmatch(parts[0]):
            raise BadInput(where, f"line {number} is not 'KEY_ID SECRET'")
        try:
            secret = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        except ValueError:
            raise BadInput(where, f"line {number}: the secret is not base64") from None
        if len(secret) < MIN_SECRET_BYTES:
            raise BadInput(where, f"line {number}: the secret is shorter than 16 bytes")
        if any(k.kid == parts[0] for k in keys):
            raise BadInput(where, f"line {number}: key id {parts[0]} is there twice")
        keys.append(Key(parts[0], secret))
        hide(parts[1])
    if not keys:
        raise BadInput(where, f"holds no key ({HOW_TO_MAKE})")
    return keys


def read(path: Path, where: str = "key_file") -> Keyring:
    """The keys of a key file; BadInput (one line, never a secret) when it cannot be used. A
    link is followed (mounted secrets are links): the file it leads to must be private."""
    label = f"{where} {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise BadInput(label, f"does not exist ({HOW_TO_MAKE})") from None
    except OSError as exc:
        raise BadInput(label, exc.strerror or "cannot be opened") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BadInput(label, "is not a regular file")
        if info.st_mode & 0o077:
            mode = stat.S_IMODE(info.st_mode)
            raise BadInput(
                label,
                f"is open to group or others (mode {mode:o}): chmod 600 it;"
                " whoever reads it can command every worker",
            )
        data = os.read(fd, 64 * 1024)
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(label, "is not a tickui key file (not UTF-8 text)") from None
    return Keyring(parse(text, label))


def write(path: Path, keys: list[Key], *, new: bool) -> None:
    """Write the keys, mode 600: a new file only when `new` (never over another), else in
    place of the old one, atomically."""
    text = HEADER + "".join(_encode(k) + "\n" for k in keys)
    if new:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        return
    temp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise


def keyring_for(key_file: Path | None, origin: str, insecure: bool, who: str) -> Keyring:
    """The keys a Kafka-dispatch engine or worker signs with. Secure by default: no key
    file and no `--insecure` is bad input (exit 2), saying how to make a key. A key given
    is used even with `--insecure`."""
    if key_file is None and insecure:
        return Keyring()
    if key_file is None:
        raise BadInput(
            "--key-file",
            f"{who} signs every message on Kafka and needs a key: {HOW_TO_MAKE}, then give"
            " --key-file PATH ([dispatch] key_file, TICKUI_KEY_FILE) to the engine and every"
            " worker; --insecure runs without (anyone who can write to the topics could"
            " then run commands on the workers)",
        )
    return read(key_file, origin)

"""Keep credentials out of everything tickui shows or writes, and keep terminals safe.

`redact` hides passwords; `printable` makes control characters visible; `safe_text` is
both, and every path where text leaves tickui (terminal, JSON, logs, the dashboard,
Kafka errors) goes through one of them.
"""

from __future__ import annotations

import functools
import re

TYPE_CHECKING = False  # typing is not loaded: --help and the listings start without it
if TYPE_CHECKING:
    from typing import Any


@functools.cache
def _pattern(source: str) -> re.Pattern[str]:
    """The patterns below, each compiled when first used (compiling them all costs
    milliseconds, and most text holds no marker word: only the marker and control patterns
    are needed for it)."""
    return re.compile(source)


# A URL's or a bare `user:password@host` form's password. The password runs to the last
# `@` of the word, so one holding `@` or `/` (`redis://u:ab@pw@h`, `redis://:p/w@h`) is
# hidden whole; when in doubt more is hidden, never less.
_USERINFO = (
    r"(?<![^\s:/@'\"<>()\[\]{},;=])"  # from the start of a word only: linear on a long one
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)?(?P<user>[^\s:/@'\"<>()\[\]{},;=]*):(?P<pw>[^\s'\"<>]*)@"
)
_SECRET_WORD = (
    r"(?:password|passwd|passphrase|pwd|secret|token|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|credentials?)"
)
# An Authorization header's value is hidden whole, whatever its scheme (`token abc`).
_AUTHORIZATION = (
    r"""(?i)(?P<key>\b(?:proxy-)?authorization['"]?)(?P<sep>\s*[=:]\s*)(?P<quote>['"]?)"""
    r"""(?P<value>(?<=')[^'\n]*|(?<=")[^"\n]*|[^'"\n]+)"""
)
# Short words are secret names only as a whole part of a name (`DB_PASS`, `STRIPE_KEY`,
# `x-api-key`, `auth`, `session`), not inside another word (`monkey`, `author`).
_SHORT_WORD = r"(?<![A-Za-z])(?:pass|pw|key|auth|cookie|session|creds?)(?![A-Za-z])"
# A pair's value: quoted, it runs to the closing quote (spaces and all; to the end when
# the quote is never closed); bare, to the next space or separator (`\ ` escapes kept).
_VALUE = r"""(?P<value>(?<=')[^']*|(?<=")[^"]*|(?:\\.|[^\s&;,'"\\])+)"""
_KEY_VALUE = (
    rf"(?i)(?P<key>(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]*{_SECRET_WORD}[A-Za-z0-9_.-]*['\"]?)(?P<sep>\s*[=:]\s*)"
    rf"(?P<quote>['\"]?){_VALUE}"
)
_SHORT_KEY_VALUE = (
    rf"(?i)(?P<key>(?<![A-Za-z0-9_.-])[A-Za-z0-9_.-]*{_SHORT_WORD}[A-Za-z0-9_.-]*['\"]?)(?P<sep>\s*=\s*)"
    rf"(?P<quote>['\"]?){_VALUE}"
)
_BEARER = r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{6,}"
# Names whose value is hidden whole: environment variables and flags (`--password X`).
SECRET_NAME = (
    r"(?i)-{0,2}[A-Za-z0-9_.-]*(?:pass|pw|secret|token|key|auth|cred|cookie|session)[A-Za-z0-9_.-]*"
)
_SECRET_FLAG = (
    r"(?i)(?P<key>(?<![A-Za-z0-9_-])--?[A-Za-z0-9_-]*(?:pass|secret|token|key|auth|cred)[A-Za-z0-9_-]*)"
    r"""(?P<sep>\s+|=)(?P<quote>['"]?)(?P<value>(?<=')[^']*|(?<=")[^"]*|[^\s'"-][^\s'"]*)"""
)
# curl's and wget's `-u user:password` / `--user=user:password`: the part after the colon.
_USER_FLAG = (
    r"""(?P<key>(?<![\w-])(?:-u|--user|--proxy-user))(?P<sep>\s+|=)(?P<quote>['"])?"""
    r"""(?P<user>[^\s:'"]*):(?P<value>(?(quote)[^'"]*|[^\s'"]+))"""
)
USER_FLAGS = ("-u", "--user", "--proxy-user")
MASK = "***"

# C0 controls, DEL, C1 controls, and the invisible formatting characters that can reorder
# or hide text on a terminal (bidi overrides, zero-width ones, line/paragraph separators).
_CONTROL = "[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
_CONTROL_KEEP_NEWLINE = "[\x00-\x09\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"


def _hide_userinfo(match: re.Match[str]) -> str:
    return f"{match['scheme'] or ''}{match['user']}:{MASK}@"


_WORD = r"[^\s'\"<>]+"  # what a password in a URL can span


def _userinfo_in_word(match: re.Match[str]) -> str:
    """Only a word holding both `:` and `@` can hold `user:pw@`: the others (a long line of
    base64, timestamps) are passed over at once rather than searched from each colon."""
    word = match.group()
    if "@" not in word or ":" not in word:
        return word
    return _pattern(_USERINFO).sub(_hide_userinfo, word)


_KNOWN: set[str] = set()  # secrets this process was given (hide)


def hide(secret: str) -> None:
    """A secret this process holds (a Kafka or Valkey password, a signing key): hidden
    from every text that goes through redact, whatever words stand around it."""
    if len(secret) >= 4:
        _KNOWN.add(secret)


def redact(text: Any) -> str:
    """Hide passwords in URLs (`redis://u:pw@h`, also with `@` or `/` in the password),
    `user:pw@host:port`, `password=...` / `TOKEN=...` pairs and bearer tokens, and every
    secret given to `hide`."""
    text = str(text)
    for secret in _KNOWN:
        if secret in text:
            text = text.replace(secret, MASK)
    if _pattern(_MARKER).search(text) is None:  # most text: one scan instead of seven
        return text
    text = _pattern(_WORD).sub(_userinfo_in_word, text)
    text = _pattern(_AUTHORIZATION).sub(_hide_value, text)
    text = _pattern(_KEY_VALUE).sub(_hide_value, text)
    text = _pattern(_SHORT_KEY_VALUE).sub(_hide_value, text)
    text = _pattern(_SECRET_FLAG).sub(_hide_value, text)
    text = _pattern(_USER_FLAG).sub(
        lambda m: f"{m['key']}{m['sep']}{m['quote'] or ''}{m['user']}:{MASK}", text
    )
    return _pattern(_BEARER).sub(lambda m: f"{m[1]} {MASK}", text)


def _hide_value(match: re.Match[str]) -> str:
    return f"{match['key']}{match['sep']}{match['quote']}{MASK}"


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: Any, newlines: bool = False) -> str:
    """Control characters shown as `\\x1b`, `\\u202e`..., never sent raw to a terminal.
    `newlines=True` keeps line breaks (multi-line log text)."""
    pattern = _CONTROL_KEEP_NEWLINE if newlines else _CONTROL
    return _pattern(pattern).sub(_escape, str(text))


def safe_text(text: Any, newlines: bool = False) -> str:
    """Redacted and printable: what every line tickui shows or logs goes through."""
    return printable(redact(text), newlines)


def redact_env(env: dict[str, str]) -> dict[str, str]:
    """Environment values are shown only when nothing in them looks secret: a value whose
    name looks like a secret (`*TOKEN*`, `*PASSWORD*`, `*KEY*`...) is hidden whole."""
    secret = _pattern(SECRET_NAME).fullmatch
    return {name: MASK if secret(name) else redact(v) for name, v in env.items()}


def redact_data(value: Any) -> Any:
    """Every string inside JSON-like data redacted (keys too); `env` maps per redact_env.
    JSON's own escaping makes control characters visible."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key == "env" and isinstance(item, dict):
                out[key] = redact_env(item)
            else:
                out[redact(key) if isinstance(key, str) else key] = redact_data(item)
        return out
    if isinstance(value, list | tuple):
        out_list = [redact_data(item) for item in value]
        for i in range(1, len(out_list)):  # ["mysql", "--password", "x"]: hide the x
            before = value[i - 1]
            if (
                isinstance(before, str)
                and before.startswith("-")
                and _pattern(SECRET_NAME).fullmatch(before)
            ):
                out_list[i] = MASK
            elif before in USER_FLAGS and isinstance(value[i], str) and ":" in value[i]:
                out_list[i] = value[i].split(":", 1)[0] + ":" + MASK  # curl -u user:password
        return out_list
    return value


def secret_markers() -> tuple[str, ...]:
    """What every stretch redact hides has in or next to it, in any case: the words its
    patterns need (`-u` stands for --user and --proxy-user too, `@` for a URL's password)
    and each secret given to `hide`. A line holding none of them is left as it is, so a
    search for `***` need not redact every line to find the hidden ones."""
    return (*_MARKER_WORDS, *sorted(_KNOWN))


_MARKER_WORDS = ("pass", "pw", "secret", "token", "key", "auth", "cred", "cookie", "session",
                 "bearer", "basic", "-u", "@")  # fmt: skip
_MARKER = "(?i)" + "|".join(re.escape(word) for word in _MARKER_WORDS)

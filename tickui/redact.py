"""Keep credentials out of logs, errors and the UI."""

from __future__ import annotations

import logging
import re

_URL_PASSWORD = re.compile(
    r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<pw>[^@/\s]+)@"
)
_KEY_VALUE = re.compile(r"(?i)\b(password|passwd|pwd|secret|token|sasl_plain_password)=([^\s&;,]+)")


def redact(text: str) -> str:
    """Replace passwords in URLs (`redis://u:pw@h`) and `password=...` pairs with `***`."""
    text = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", str(text))
    return _KEY_VALUE.sub(lambda m: f"{m[1]}=***", text)


class RedactingFilter(logging.Filter):
    """A logging filter that redacts the fully formatted message of every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
            del exc
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        return True

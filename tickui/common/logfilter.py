"""Log records as tickui writes them: redacted and one line each (tickui.common.redact).
Apart from redact so that what only prints (the listings) does not load logging."""

from __future__ import annotations

import logging

from tickui.common.redact import safe_text


class RedactingFilter(logging.Filter):
    """A logging filter that redacts the fully formatted message of every record and makes
    its control characters visible (one record stays one line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = safe_text(message)
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            record.exc_text = safe_text(
                logging.Formatter().formatException(record.exc_info), newlines=True
            )
            record.exc_info = None
            del exc
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        return True

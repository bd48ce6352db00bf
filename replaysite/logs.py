"""No log line the project writes carries a share token (docs/contract.md §8): every log
record made in the process (by Django, Channels, daphne or the app) has `/s/TOKEN`
redacted as it is created, before any handler or formatter sees it. `install` runs from
the settings, so every process that loads them (daphne, manage.py, tests) has it."""

from __future__ import annotations

import logging
import re
from typing import Any

SHARE_TOKEN = re.compile(r"(/s/)[A-Za-z0-9_-]{16,}")
REDACTED = r"\1[redacted]"


def redact(text: str) -> str:
    return SHARE_TOKEN.sub(REDACTED, text)


def install() -> None:
    """Wrap the process's log record factory once (the public hook for this)."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "redacts_share_tokens", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()  # a token may be split between format and args
        except Exception:  # a malformed call is the logging module's to report, later
            return record
        if "/s/" in message:
            record.msg, record.args = str(redact(message)), ()
        return record

    factory.redacts_share_tokens = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)

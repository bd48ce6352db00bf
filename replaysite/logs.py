"""No log line the project writes carries a share token (docs/contract.md §8): every log
record made in the process (by Django, Channels, daphne or the app) has `/s/TOKEN`
redacted as it is created, before any handler or formatter sees it, however the path is
spelt (percent-encoded as daphne's access line quotes it, or decoded as Django's lines do).
`install` runs from the settings, so every process that loads them (daphne, manage.py,
tests) has it."""

from __future__ import annotations

import functools
import logging
import re
import uuid
from contextvars import ContextVar
from typing import Any

from pythonjsonlogger.json import JsonFormatter as JsonFormatterBase

# The path segments whose next segment is a credential: a share link's `/s/TOKEN/…` (its
# pages, and its socket's `/ws/s/TOKEN/`). A route that carries one in its path adds its
# segment here; `redact` then covers every spelling of it in every line.
SECRET_SEGMENTS = ("s",)
SECRET = r"[A-Za-z0-9_-]{16,}"  # a token's alphabet (shorter runs are no token)
REDACTED = "[redacted]"
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
# Decoding stops after this many rounds: a client that encodes a link once (or twice, by
# mistake) is covered; a path encoded more often than that is not served as a link either.
DECODE_ROUNDS = 8


@functools.cache
def _secret_paths(segments: tuple[str, ...]) -> re.Pattern[str]:
    # Any run of slashes around the segment: `//s/` and `/s//` are the same path to a reader.
    names = "|".join(re.escape(segment) for segment in segments)
    return re.compile(rf"/+(?:{names})/+(?P<secret>{SECRET})")


def _decoded(text: str) -> tuple[str, list[int], list[int]]:
    """`text` percent-decoded (repeatedly, up to DECODE_ROUNDS), with where in `text` each
    character of the result starts and ends."""
    starts, ends = list(range(len(text))), list(range(1, len(text) + 1))
    for _ in range(DECODE_ROUNDS):
        if not _ESCAPE.search(text):
            break
        out: list[str] = []
        new_starts: list[int] = []
        new_ends: list[int] = []
        at = 0
        for escape in _ESCAPE.finditer(text):
            out.append(text[at : escape.start()])
            new_starts += starts[at : escape.start()]
            new_ends += ends[at : escape.start()]
            out.append(chr(int(escape[1], 16)))
            new_starts.append(starts[escape.start()])
            new_ends.append(ends[escape.end() - 1])
            at = escape.end()
        out.append(text[at:])
        new_starts += starts[at:]
        new_ends += ends[at:]
        text, starts, ends = "".join(out), new_starts, new_ends
    return text, starts, ends


def redact(text: str, segments: tuple[str, ...] = SECRET_SEGMENTS) -> str:
    """`text` with the credential after each of `segments` in a path replaced, matched on the
    decoded path (`/%73/%33MKw…`, `/s%2F…` and `//s/…` are `/s/3MKw…`) and cut from `text`
    as it is spelt, so the rest of the line stays as it was (no decoded line break in it)."""
    pattern = _secret_paths(segments)
    if "%" not in text:
        return pattern.sub(lambda m: m[0][: m.start("secret") - m.start()] + REDACTED, text)
    decoded, starts, ends = _decoded(text)
    out, at = [], 0
    for found in pattern.finditer(decoded):
        start, end = starts[found.start("secret")], ends[found.end("secret") - 1]
        out += [text[at:start], REDACTED]
        at = end
    return "".join([*out, text[at:]])


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
        if "/" in message:
            clean = redact(message)
            if clean != message:
                record.msg, record.args = clean, ()
        return record

    factory.redacts_share_tokens = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


# One formatter for every logger (docs/contract.md §5): Django's, daphne's (its access lines
# included, see `route_access_log`), Channels' and the app's, in text or JSON, each line
# with its time, level, logger and the request id of the request it was written in.
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
TEXT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"

request_id: ContextVar[str] = ContextVar("request_id", default="-")
# An incoming X-Request-ID is kept only when it looks like one (a proxy's or a client's
# correlation id); anything else is replaced, so a header cannot forge or flood a line.
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class RequestIdFilter(logging.Filter):
    """Stamps each record with the request id of the context it was written in."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        # The whole line: a traceback or an `extra` may quote a share link's path too.
        return redact(super().format(record))


class JsonFormatter(JsonFormatterBase):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def config(level: str, form: str) -> dict[str, Any]:
    """The LOGGING setting: every record reaches the root's one handler."""
    formatter: dict[str, Any] = (
        {"()": "replaysite.logs.TextFormatter", "format": TEXT}
        if form == "text"
        else {
            "()": "replaysite.logs.JsonFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(request_id)s %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
        }
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"request_id": {"()": "replaysite.logs.RequestIdFilter"}},
        "formatters": {"replay": formatter},
        "handlers": {
            "console": {
                "class": "logging.StreamHandler",
                "formatter": "replay",
                "filters": ["request_id"],
            }
        },
        "root": {"handlers": ["console"], "level": level},
        # Django's own loggers come with handlers of their own (a second console line, mail
        # to admins): here they only pass their records up.
        "loggers": {
            **{
                name: {"handlers": [], "level": level, "propagate": True}
                for name in ("django", "django.server", "daphne", "conversations")
            },
            # The webhooks' HTTP client logs each request's URL at INFO, and a receiver's
            # URL is often its credential: its warnings only.
            **{
                name: {"handlers": [], "level": "WARNING", "propagate": True}
                for name in ("httpx", "httpx2", "httpcore")
            },
        },
    }


class RequestIds:
    """ASGI middleware: each HTTP request and WebSocket connection runs with a request id,
    its `X-Request-ID` when that is a plausible id, else a new one; an HTTP response
    carries it back."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or ()).get(b"x-request-id", b"").decode("latin-1")
        rid = given if REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        token = request_id.set(rid)

        async def send_with_id(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v) for k, v in message.get("headers", ()) if k.lower() != b"x-request-id"
                ]
                message = message | {"headers": [*headers, (b"x-request-id", rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id if scope["type"] == "http" else send)
        finally:
            request_id.reset(token)


def route_access_log() -> None:
    """daphne writes its access lines straight to stdout (with `-v 1`, its default), past
    logging: share tokens in clear, another format. Send them through the logger
    `daphne.access` instead, so they are redacted and formatted like every other line.

    `AccessLogGenerator.write_entry` is daphne's internal interface (no public hook exists);
    tests/site/test_logs.py fails on an upgrade that changes it."""
    from daphne import access

    if getattr(access.AccessLogGenerator.write_entry, "routed", False):
        return
    logger = logging.getLogger("daphne.access")

    def write_entry(
        self: Any,
        host: Any,
        date: Any,
        request: Any,
        status: Any = None,
        length: Any = None,
        ident: Any = None,
        user: Any = None,
    ) -> None:
        logger.info('%s "%s" %s %s', host, request, status or "-", length or "-")

    write_entry.routed = True  # type: ignore[attr-defined]
    access.AccessLogGenerator.write_entry = write_entry

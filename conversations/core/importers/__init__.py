"""Importers (docs/contract.md §6): pure functions from a transcript's bytes to the record's values.

`read(raw, format=None, ...)` detects the format when none is given (a named one the
content shows to be another is refused) and answers an `Imported`; every malformed source
raises `ImportFormatError` naming a line or JSON path and the format it was read as.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import assert_never

from conversations.core import strictjson
from conversations.core.importers import (
    anthropic,
    claude_code,
    openai_chat,
    openai_responses,
    otel_genai,
)
from conversations.core.importers.common import (
    EMPTY_FILE,
    FORMATS,
    EmptyFileError,
    Format,
    Gap,
    Imported,
    ImportedMessage,
    ImportFormatError,
)
from conversations.core.importers.detect import detect, detect_where

__all__ = [
    "EMPTY_FILE",
    "FORMATS",
    "EmptyFileError",
    "Format",
    "Gap",
    "ImportFormatError",
    "Imported",
    "ImportedMessage",
    "choose",
    "detect",
    "read",
    "read_as",
    "read_lines",
]


def read(raw: bytes, format: Format | None = None) -> Imported:
    """The conversation in `raw` (a whole file), read as `format` or as detected
    (`choose`); an ImportFormatError names the format it was read as. EmptyFileError
    when it holds nothing but whitespace, whatever the format."""
    if not raw.strip():
        raise EmptyFileError()
    return read_as(raw, choose(raw, format))


def read_as(raw: bytes, chosen: Format) -> Imported:
    """`raw` read as the format `choose` answered (not checked again); an
    ImportFormatError names that format."""
    try:
        return _read(raw, chosen)
    except ImportFormatError as exc:
        raise exc.reading(chosen) from None


def choose(raw: bytes, format: Format | None) -> Format:
    """The format `raw` is read as (docs/contract.md §6): the detected one, or the named
    one unless the content shows another format (a reader of the wrong format would store
    an empty or lossy conversation). Ambiguous or unknown content: the named reader decides."""
    if format is None:
        return detect(raw)
    if format not in FORMATS:
        raise ImportFormatError("format", f"{format!r} is not one of {', '.join(FORMATS)}")
    try:
        found, where = detect_where(raw)
    except ImportFormatError:
        return format
    if found != format:
        raise ImportFormatError(
            where,
            f"shows {found} content, not {format}: import it as {found} or name no format",
            format,
        )
    return format


def _read(raw: bytes, chosen: Format) -> Imported:
    if chosen == "claude-code":
        return claude_code.read(raw.splitlines())
    body = parse_json(raw)
    match chosen:
        case "anthropic":
            return anthropic.read(body)
        case "openai-chat":
            return openai_chat.read(body)
        case "openai-responses":
            return openai_responses.read(body)
        case "otel-genai":
            return otel_genai.read(body)
        case _:
            assert_never(chosen)


def read_lines(lines: Iterable[bytes]) -> Imported:
    """A Claude Code session file read line by line (the CLI streams large files)."""
    return claude_code.read(lines)


def parse_json(raw: bytes) -> object:
    """One JSON document under the limits of docs/contract.md §3 (depth, duplicate keys, exact
    numbers)."""
    try:
        return strictjson.loads(raw)
    except strictjson.StrictJSONError as exc:
        if exc.path or not exc.reason.startswith("is not valid JSON"):
            raise ImportFormatError(exc.field, exc.reason) from None
    try:  # a syntax error: name its line and column
        json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImportFormatError(
            f"line {exc.lineno}, column {exc.colno}", f"is not valid JSON ({exc.msg})"
        ) from None
    except UnicodeDecodeError as exc:
        raise ImportFormatError(f"byte {exc.start}", "is not valid UTF-8") from None
    raise ImportFormatError("body", "is not valid JSON")  # pragma: no cover

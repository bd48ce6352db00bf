"""Importers (docs/contract.md §6): pure functions from a transcript's bytes to the record's values.

`read(raw, format=None, ...)` detects the format when none is given and answers an
`Imported`; every malformed source raises `ImportFormatError` naming a line or JSON path.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

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
from conversations.core.importers.detect import detect

__all__ = [
    "EMPTY_FILE",
    "FORMATS",
    "EmptyFileError",
    "Format",
    "Gap",
    "ImportFormatError",
    "Imported",
    "ImportedMessage",
    "detect",
    "read",
    "read_lines",
]


def read(raw: bytes, format: Format | None = None) -> Imported:
    """The conversation in `raw` (a whole file), read as `format` or as detected;
    EmptyFileError when it holds nothing but whitespace, whatever the format."""
    if not raw.strip():
        raise EmptyFileError()
    chosen = format or detect(raw)
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
    raise ImportFormatError("format", f"{chosen!r} is not one of {', '.join(FORMATS)}")


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

"""Claude Code session files written line by line, and what following them must store:
exactly what importing the whole file stores (the recordings here have no abandoned
branches, so the main chain is every line)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from conversations.core.importers import claude_code
from conversations.ingest.models import TailCursor
from conversations.record.models.conversation import Conversation, Message
from conversations.record.reads import shapes

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
# 15 lines; one API message is written as 5 assistant lines (one block each).
REJECTED = REAL / "claude_code_rejected_tool_use_interrupted.jsonl"
PARALLEL = REAL / "claude_code_tool_heavy_parallel_interrupts.jsonl"
COMPACT = REAL / "claude_code_compact_boundary.jsonl"
SUBAGENT = REAL / "claude_code_subagent_long_tool_output.jsonl"


def lines(path: Path) -> list[bytes]:
    """The file's lines, each with its newline."""
    return path.read_bytes().splitlines(keepends=True)


def block_key(block: dict[str, Any]) -> tuple[Any, ...]:
    kind = block["type"]
    if kind in ("text", "reasoning"):
        return (kind, block["text"])
    if kind == "tool_use":
        return (kind, block["id"], block["name"], block["input"])
    if kind == "tool_result":
        return (kind, block["tool_use_id"], block["content"], bool(block.get("is_error")))
    return (kind, block["media_type"], len(block["data"]))


def imported(path: Path) -> list[tuple[str, list[tuple[Any, ...]]]]:
    result = claude_code.read(path.read_bytes().splitlines())
    return [(m.role, [block_key(b) for b in m.blocks]) for m in result.messages]


def stored(conversation: Conversation) -> list[tuple[str, list[tuple[Any, ...]]]]:
    return [
        (m.role, [block_key(plain(shapes.block_data(b))) for b in m.blocks.order_by("seq")])
        for m in Message.objects.filter(conversation=conversation).order_by("seq")
    ]


def plain(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))  # the API's JSON, as a client reads it


def conversation_of(path: Path) -> Conversation:
    cursor = TailCursor.objects.get(path=str(path.resolve()))
    return cursor.conversation


def append(path: Path, data: bytes) -> None:
    """Write as an agent does: append, flush, and let readers see it at once."""
    with path.open("ab") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())

"""The values every importer produces, and the helpers they share (pure, no Django).

A block is a schema-ready dict (`{"type": "text", "text": …}`, plus `origin` when the source
element holds more than the five kinds can); the record layer validates it as at ingest.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from conversations.core import strictjson
from conversations.core.blocks import IMAGE_MEDIA_TYPES, JSONObject, Role

Format = Literal["anthropic", "openai-chat", "openai-responses", "claude-code", "otel-genai"]
FORMATS: tuple[Format, ...] = (
    "anthropic",
    "openai-chat",
    "openai-responses",
    "claude-code",
    "otel-genai",
)

BlockDict: TypeAlias = dict[str, Any]
REDACTED = "[redacted]"


class ImportFormatError(ValueError):
    """The source is not readable as its format; `where` names the line or JSON path,
    `format` the format it was read as (once one was chosen)."""

    def __init__(self, where: str, message: str, format: Format | None = None) -> None:
        super().__init__(f"{where}: {message}" if where else message)
        self.where = where
        self.message = message
        self.format = format

    def reading(self, format: Format) -> ImportFormatError:
        """This error, naming the format that failed to read the source."""
        return ImportFormatError(self.where, self.message, self.format or format)

    def sentence(self) -> str:
        """The error as the API, the file drop and `manage.py import` show it."""
        named = f" as {self.format}" if self.format else ""
        return f"The file is not readable{named}: {self}."


# What every way in (the list page's drop, POST /api/imports, `manage.py import`) says of a
# file that holds nothing but whitespace (docs/contract.md §6): one wording for all.
EMPTY_FILE = "The file is empty: it holds no transcript."


class EmptyFileError(ImportFormatError):
    """The file holds nothing but whitespace (`EMPTY_FILE`)."""

    def __init__(self) -> None:
        super().__init__("", EMPTY_FILE)


@dataclass(frozen=True, slots=True)
class Gap:
    """Something the record cannot hold: marked in place (`message`, `block`) when it had a
    place, or listed only (what a format never records)."""

    kind: str
    detail: str
    where: str
    message: int | None = None
    block: int | None = None

    def as_json(self) -> JSONObject:
        value: JSONObject = {"kind": self.kind, "detail": self.detail, "where": self.where}
        if self.message is not None:
            value["message"] = self.message
        if self.block is not None:
            value["block"] = self.block
        return value


@dataclass(slots=True)
class ImportedMessage:
    role: Role
    blocks: list[BlockDict] = field(default_factory=list)
    metadata: JSONObject = field(default_factory=dict)


@dataclass(slots=True)
class Imported:
    """One conversation read from a source: its messages, gaps, metadata and counts.

    `linked` holds conversations read from the same source (Claude Code sidechains,
    further OTel conversations), each linked to this one in metadata when stored.
    """

    format: Format
    messages: list[ImportedMessage] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    metadata: JSONObject = field(default_factory=dict)
    title: str | None = None
    stats: dict[str, int] = field(default_factory=dict)
    linked: list[Imported] = field(default_factory=list)

    @property
    def block_count(self) -> int:
        return sum(len(message.blocks) for message in self.messages)

    def count(self, what: str, by: int = 1) -> None:
        self.stats[what] = self.stats.get(what, 0) + by


class Builder:
    """Collects one conversation's messages, marking gaps where they occur."""

    def __init__(self, result: Imported) -> None:
        self.result = result

    def message(self, role: Role, metadata: JSONObject | None = None) -> ImportedMessage:
        message = ImportedMessage(role=role, metadata=metadata or {})
        self.result.messages.append(message)
        return message

    def gap(
        self, message: ImportedMessage, kind: str, detail: str, where: str, source: Any
    ) -> None:
        """Append the `[KIND (DETAIL): not stored]` text block keeping `source` as origin."""
        index = self._index(message)
        text = f"[{kind} ({detail}): not stored]" if detail else f"[{kind}: not stored]"
        origin = strip_base64(source)
        if not isinstance(origin, dict):  # an origin is an object: name the scalar's place
            origin = {where or kind: origin}
        message.blocks.append({"type": "text", "text": text, "origin": origin})
        self.result.gaps.append(Gap(kind, detail, where, index, len(message.blocks) - 1))

    def listed_gap(self, kind: str, detail: str, where: str = "") -> None:
        self.result.gaps.append(Gap(kind, detail, where))

    def _index(self, message: ImportedMessage) -> int:
        # The message is nearly always the last one; search from the end.
        for index in range(len(self.result.messages) - 1, -1, -1):
            if self.result.messages[index] is message:
                return index
        raise LookupError("message not in this import")


def text(value: str, origin: Any = None) -> BlockDict:
    block: BlockDict = {"type": "text", "text": value}
    if origin:
        block["origin"] = origin
    return block


def reasoning(value: str, origin: Any = None) -> BlockDict:
    block: BlockDict = {"type": "reasoning", "text": value}
    if origin:
        block["origin"] = origin
    return block


def tool_use(call_id: str, name: str, value: JSONObject, origin: Any = None) -> BlockDict:
    block: BlockDict = {"type": "tool_use", "id": call_id, "name": name, "input": value}
    if origin:
        block["origin"] = origin
    return block


def tool_result(
    call_id: str, name: str | None, content: str, is_error: bool, origin: Any = None
) -> BlockDict:
    block: BlockDict = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    if name:
        block["name"] = name
    if is_error:
        block["is_error"] = True
    if origin:
        block["origin"] = origin
    return block


def image(media_type: str, data: str, origin: Any = None) -> BlockDict:
    block: BlockDict = {"type": "image", "media_type": media_type, "data": data}
    if origin:
        block["origin"] = origin
    return block


def extra(source: JSONObject, held: Iterable[str]) -> JSONObject | None:
    """The source element when it has keys the block does not hold, else None (no origin)."""
    held_keys = set(held)
    if all(key in held_keys for key in source):
        return None
    stripped: JSONObject = strip_base64(source)
    return stripped


def strip_base64(value: Any, *, limit: int = 4096) -> Any:
    """`value` with long base64 bodies (`data`, `content` of a blob, data URLs) replaced by
    a note: the block that holds the image keeps them; origin need not hold them twice."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(item, str) and len(item) > limit and _looks_base64(key, item):
                out[key] = f"[base64, {len(item)} characters: kept in the image block]"
            else:
                out[key] = strip_base64(item, limit=limit)
        return out
    if isinstance(value, list):
        return [strip_base64(item, limit=limit) for item in value]
    return value


def _looks_base64(key: str, value: str) -> bool:
    if value.startswith("data:"):
        return True
    return key in {"data", "content", "image_url", "url", "file_data", "result"} and (
        " " not in value[:200] and "\n" not in value[:200]
    )


def parse_arguments(raw: Any) -> JSONObject:
    """Tool-call arguments as a JSON object: parsed from a string, or `{"_raw": string}`."""
    if isinstance(raw, dict):
        return raw
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:  # under the record's own limits: what it could not store stays the string
            value = strictjson.loads(raw)
        except strictjson.StrictJSONError:
            return {"_raw": raw}
        return value if isinstance(value, dict) else {"_raw": raw}
    return {"_raw": json.dumps(raw, ensure_ascii=False)}


def data_url(url: str) -> tuple[str, str] | None:
    """(media type, base64) of a `data:MT;base64,…` image URL of a stored type, else None."""
    if not url.startswith("data:") or ";base64," not in url:
        return None
    header, data = url.split(",", 1)
    media_type = header.removeprefix("data:").removesuffix(";base64")
    return (media_type, data) if media_type in IMAGE_MEDIA_TYPES else None


def url_detail(url: str, limit: int = 200) -> str:
    """A URL as a gap's DETAIL: data URLs name their type only, long ones are cut."""
    if url.startswith("data:"):
        return url.split(",", 1)[0]
    return url if len(url) <= limit else url[: limit - 1] + "…"


def resolve_names(messages: Iterable[ImportedMessage]) -> None:
    """Give each tool_result without a name the name of the latest earlier tool_use with
    its id in the import (the record would otherwise store `unknown`)."""
    names: dict[str, str] = {}
    for message in messages:
        for block in message.blocks:
            if block["type"] == "tool_use":
                names[block["id"]] = block["name"]
            elif block["type"] == "tool_result" and "name" not in block:
                name = names.get(block["tool_use_id"])
                if name:
                    block["name"] = name


def require(value: Any, kind: type | tuple[type, ...], where: str, what: str) -> Any:
    """`value` when it is a `kind`, else an ImportFormatError naming `where`."""
    if not isinstance(value, kind):
        raise ImportFormatError(where, f"must be {what}, not {type_name(value)}")
    return value


def type_name(value: Any) -> str:
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        type(None): "null",
    }.get(type(value), type(value).__name__)


def as_role(value: Any, where: str) -> Role:
    if value in ("system", "user", "assistant"):
        return value  # type: ignore[no-any-return]
    raise ImportFormatError(where, f"role {value!r} is not one of system, user, assistant")


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def a_role(role: str) -> str:
    """`an assistant`, `a user`, `a system`: for gap details."""
    return f"an {role}" if role[:1] in "aeiou" else f"a {role}"

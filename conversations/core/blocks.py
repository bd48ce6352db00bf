"""The block kinds: each declared once, here, with its value type, label and prose.

Pure (no Django). Every layer that branches on a kind does it with a `match` over these
classes ending in `assert_never`, so a new kind fails the type check in every layer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal, TypeAlias, assert_never

JSONValue: TypeAlias = "str | int | float | bool | None | list[JSONValue] | dict[str, JSONValue]"
JSONObject: TypeAlias = dict[str, JSONValue]

Role = Literal["system", "user", "assistant"]
ROLES: tuple[Role, ...] = ("system", "user", "assistant")
IMAGE_MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


@dataclass(frozen=True, slots=True)
class TextBlock:
    text: str


@dataclass(frozen=True, slots=True)
class ToolUseBlock:
    """`input_json` is the input object in its canonical text, `tool_input_json(input)`.

    The record stores the input in that form (it keeps key order on every database),
    so the projection never re-serialises it; build one from an object with `of`.
    """

    id: str
    name: str
    input_json: str

    @classmethod
    def of(cls, id: str, name: str, input: JSONObject) -> ToolUseBlock:
        return cls(id=id, name=name, input_json=tool_input_json(input))

    @property
    def input(self) -> JSONObject:
        value: JSONObject = json.loads(self.input_json)
        return value


@dataclass(frozen=True, slots=True)
class ToolResultBlock:
    tool_use_id: str
    name: str
    content: str
    is_error: bool = False


@dataclass(frozen=True, slots=True)
class ReasoningBlock:
    text: str


@dataclass(frozen=True, slots=True)
class ImageBlock:
    """`width` and `height` are the pixel size decoded at ingest (None when unknown); they
    only feed token estimates, so they take no part in equality."""

    media_type: str
    data: str
    width: int | None = field(default=None, compare=False)
    height: int | None = field(default=None, compare=False)


Block: TypeAlias = TextBlock | ToolUseBlock | ToolResultBlock | ReasoningBlock | ImageBlock

# The stored type name of every block class; the system check compares it with the models.
BLOCK_TYPES: dict[str, type[Block]] = {
    "text": TextBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
    "reasoning": ReasoningBlock,
    "image": ImageBlock,
}


def tool_input_json(value: JSONObject) -> str:
    """The INPUT of `Tool use: NAME(INPUT)`: compact, key order kept, non-ASCII as is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def image_marker(media_type: str) -> str:
    return f"[Image ({media_type}): not seen — this model cannot view images]"


BlockKind = Literal["text", "tool_use", "tool_result", "reasoning", "image"]
BLOCK_KINDS: tuple[BlockKind, ...] = ("text", "tool_use", "tool_result", "reasoning", "image")


def kind_of(block: Block) -> BlockKind:
    """The stored type name of a block."""
    match block:
        case TextBlock():
            return "text"
        case ToolUseBlock():
            return "tool_use"
        case ToolResultBlock():
            return "tool_result"
        case ReasoningBlock():
            return "reasoning"
        case ImageBlock():
            return "image"
        case _:
            assert_never(block)


def kind_named(name: str) -> BlockKind:
    """The kind a stored type name names (ValueError for none: the record allows none)."""
    for kind in BLOCK_KINDS:
        if kind == name:
            return kind
    raise ValueError(f"no block kind is named {name!r}")


ToolSide = Literal["call", "result"]


def tool_side(kind: BlockKind) -> ToolSide | None:
    """Which half of a tool round a block of this kind is, if either."""
    match kind:
        case "tool_use":
            return "call"
        case "tool_result":
            return "result"
        case "text" | "reasoning" | "image":
            return None
        case _:
            assert_never(kind)


def label(block: Block) -> str:
    """What the dashboard calls a block."""
    match block:
        case TextBlock():
            return "Text"
        case ToolUseBlock():
            return "Tool use"
        case ToolResultBlock():
            return "Error" if block.is_error else "Tool result"
        case ReasoningBlock():
            return "Reasoning"
        case ImageBlock():
            return "Image"
        case _:
            assert_never(block)

"""The replay projection: a conversation's stored messages → the wire messages a model receives.

Pure: plain frozen values in, plain JSON-ready dicts out. No ORM, no settings, no clock.
Every consumer (API, dashboard, downloads, admin) renders what `project` returns.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias, TypedDict, assert_never

from conversations.core.blocks import (
    BLOCK_TYPES,
    IMAGE_MEDIA_TYPES,
    ROLES,
    Block,
    ImageBlock,
    JSONObject,
    JSONValue,
    ReasoningBlock,
    Role,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    image_marker,
    tool_input_json,
)

__all__ = [
    "BLOCK_TYPES",
    "IMAGE_MEDIA_TYPES",
    "ROLES",
    "SHAPES",
    "Block",
    "ImageBlock",
    "JSONObject",
    "JSONValue",
    "Payload",
    "ReasoningBlock",
    "Role",
    "Shape",
    "StoredMessage",
    "TextBlock",
    "ToolResultBlock",
    "ToolUseBlock",
    "WireMessage",
    "content",
    "image_marker",
    "project",
    "project_message",
    "prose",
    "system_texts",
    "text_content",
    "tool_input_json",
    "wire_messages",
]

Shape = Literal["openai", "anthropic"]
SHAPES: tuple[Shape, ...] = ("openai", "anthropic")
EMPTY_MESSAGE = "[Empty message]"


@dataclass(frozen=True, slots=True)
class StoredMessage:
    role: Role
    blocks: tuple[Block, ...]


class TextPart(TypedDict):
    type: Literal["text"]
    text: str


class ImageURL(TypedDict):
    url: str


class OpenAIImagePart(TypedDict):
    type: Literal["image_url"]
    image_url: ImageURL


class Base64Source(TypedDict):
    type: Literal["base64"]
    media_type: str
    data: str


class AnthropicImagePart(TypedDict):
    type: Literal["image"]
    source: Base64Source


ImagePart: TypeAlias = OpenAIImagePart | AnthropicImagePart
Content: TypeAlias = "str | list[TextPart | ImagePart]"


class WireMessage(TypedDict):
    role: Role
    content: Content


class OpenAIPayload(TypedDict):
    messages: list[WireMessage]


class AnthropicPayload(TypedDict, total=False):
    system: str
    messages: list[WireMessage]


Payload: TypeAlias = OpenAIPayload | AnthropicPayload


def prose(block: Block) -> str:
    """How a block crosses when it crosses as text. Exhaustive: mypy rejects a missing case."""
    # Bare class patterns (no captures): this runs once per block on every replay.
    match block:
        case TextBlock():
            return block.text
        case ToolResultBlock():
            kind = "Error" if block.is_error else "Result"
            return f"{kind} ({block.name}): {block.content}"
        case ToolUseBlock():
            return f"Tool use: {block.name}({block.input_json})"
        case ReasoningBlock():
            return f"[Reasoning]: {block.text}"
        case ImageBlock():
            return image_marker(block.media_type)
        case _:
            assert_never(block)


def image_part(block: ImageBlock, shape: Shape) -> ImagePart:
    if shape == "openai":
        url = f"data:{block.media_type};base64,{block.data}"
        return {"type": "image_url", "image_url": {"url": url}}
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": block.media_type, "data": block.data},
    }


def content(message: StoredMessage, *, vision: bool, shape: Shape) -> Content:
    """One stored message's wire content (docs/contract.md §2 rules 2, 3, 6 and 7)."""
    return _content(message, vision, shape)


def _content(message: StoredMessage, vision: bool, shape: Shape) -> Content:
    blocks = message.blocks
    if vision:
        for block in blocks:
            if type(block) is ImageBlock:
                return _parts(blocks, shape)
    return _text([prose(block) for block in blocks])


def _parts(blocks: tuple[Block, ...], shape: Shape) -> list[TextPart | ImagePart]:
    """Vision on, images present: runs of non-image blocks as text parts, images as parts.

    A run whose text is empty or whitespace is left out: providers reject blank text parts.
    """
    parts: list[TextPart | ImagePart] = []
    run: list[str] = []
    for block in blocks:
        if isinstance(block, ImageBlock):
            _flush(run, parts)
            run = []
            parts.append(image_part(block, shape))
        else:
            run.append(prose(block))
    _flush(run, parts)
    return parts


def _flush(run: list[str], parts: list[TextPart | ImagePart]) -> None:
    text = "\n\n".join(run)
    if text and not text.isspace():
        parts.append({"type": "text", "text": text})


def text_content(message: StoredMessage) -> str:
    """The content as one string: every block's prose, images named as not seen."""
    return _text([prose(block) for block in message.blocks])


def _text(proses: list[str]) -> str:
    text = "\n\n".join(proses)
    if not text or text.isspace():
        return EMPTY_MESSAGE
    return text


def project(
    messages: Sequence[StoredMessage], *, vision: bool = True, shape: Shape = "openai"
) -> Payload:
    """The whole payload: one wire message per stored message, in order.

    In the anthropic shape system messages are lifted into `system` (joined by a blank
    line; the key is absent when there are none). The same input gives the same output.
    """
    if shape == "openai":
        return {
            "messages": [{"role": m.role, "content": _content(m, vision, shape)} for m in messages]
        }
    if shape == "anthropic":
        system: list[str] = []
        wire: list[WireMessage] = []
        for m in messages:
            if m.role == "system":
                # `system` is text only; images are stored in user messages alone anyway.
                system.append(text_content(m))
            else:
                wire.append({"role": m.role, "content": _content(m, vision, shape)})
        payload: AnthropicPayload = {}
        if system:
            payload["system"] = "\n\n".join(system)
        payload["messages"] = wire
        return payload
    assert_never(shape)


def wire_messages(
    messages: Iterable[StoredMessage], *, vision: bool, shape: Shape
) -> Iterator[WireMessage]:
    """`project(...)["messages"]` one at a time, for readers that stream the payload: in the
    anthropic shape the system messages are left out (they are `system_texts`)."""
    for m in messages:
        if shape == "anthropic" and m.role == "system":
            continue
        yield {"role": m.role, "content": _content(m, vision, shape)}


def system_texts(messages: Iterable[StoredMessage]) -> Iterator[str]:
    """The texts the anthropic shape lifts into `system`, in order (joined by a blank line
    they are `project(...)["system"]`; there is no `system` when there are none)."""
    for m in messages:
        if m.role == "system":
            yield text_content(m)


def project_message(message: StoredMessage, *, vision: bool, shape: Shape) -> WireMessage:
    """The wire message for one stored message, as `project` gives it (system role kept)."""
    return {"role": message.role, "content": content(message, vision=vision, shape=shape)}

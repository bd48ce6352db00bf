"""`openai-responses`: a Responses API request body (`instructions`, `input`).

Items are grouped: an assistant message with the reasoning and calls around it is one
assistant message; consecutive `*_output` items are one user message of tool results.
"""

from __future__ import annotations

from typing import Any

from conversations.core.importers import common
from conversations.core.importers.common import (
    Builder,
    Imported,
    ImportedMessage,
    ImportFormatError,
    require,
)

CALLS = {"function_call", "custom_tool_call"}
OUTPUTS = {"function_call_output", "custom_tool_call_output"}
# Server-side and hosted tool items: recorded as gaps inside the assistant turn.
ASSISTANT_ITEMS = CALLS | {"reasoning"}


def read(body: Any) -> Imported:
    """The conversation of one request body; an ImportFormatError names the JSON path."""
    require(body, dict, "body", "an object (a Responses API request body)")
    result = Imported(format="openai-responses")
    builder = Builder(result)
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        builder.message("system", {"source": "instructions"}).blocks.append(
            common.text(instructions)
        )
    elif isinstance(instructions, list):  # instructions may be input items themselves
        for index, item in enumerate(instructions):
            _message_item(builder, item, f"instructions[{index}]")
    elif instructions is not None:
        require(instructions, (str, list), "instructions", "a string or an array")
    previous = body.get("previous_response_id")
    if previous:
        # The server holds the turns before this one; the record cannot.
        message = builder.message("user", {"source": "previous_response_id"})
        builder.gap(message, "previous response", str(previous), "previous_response_id", previous)
    conversation = body.get("conversation")
    if conversation:
        message = builder.message("user", {"source": "conversation"})
        detail = conversation if isinstance(conversation, str) else str(conversation.get("id"))
        builder.gap(message, "conversation", detail, "conversation", conversation)
    source = body.get("input")
    if isinstance(source, str):
        builder.message("user", {"source": "input"}).blocks.append(common.text(source))
    elif source is not None:
        require(source, list, "input", "a string or an array of items")
        _items(builder, source)
    elif not result.messages:
        raise ImportFormatError("input", "is required")
    result.metadata = {
        key: value for key, value in body.items() if key not in ("input", "instructions")
    }
    common.resolve_names(result.messages)
    return result


def _items(builder: Builder, items: list[Any]) -> None:
    assistant: ImportedMessage | None = None  # the open assistant turn
    has_text = False
    results: ImportedMessage | None = None  # the open user message of outputs
    for index, item in enumerate(items):
        path = f"input[{index}]"
        require(item, dict, path, "an object")
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "assistant":
            results = None
            if assistant is None or has_text:
                assistant = builder.message("assistant", {"source": path, "ids": []})
            has_text = True
            _note(assistant, item)
            _add_parts(builder, assistant, item.get("content"), f"{path}.content")
        elif kind == "message":
            assistant, results, has_text = None, None, False
            _message_item(builder, item, path)
        elif kind in OUTPUTS or (isinstance(kind, str) and kind.endswith("_output")):
            assistant, has_text = None, False
            if results is None:
                results = builder.message("user", {"source": path, "sources": []})
            results.metadata["sources"].append(path)  # type: ignore[union-attr]
            _add_output(builder, results, item, path)
        elif kind == "item_reference":
            assistant, results, has_text = None, None, False
            message = builder.message("user", {"source": path})
            builder.gap(message, "item reference", str(item.get("id", "")), path, item)
        else:
            results = None
            if assistant is None:
                assistant = builder.message("assistant", {"source": path, "ids": []})
                has_text = False
            _note(assistant, item)
            _add_assistant_item(builder, assistant, item, path)


def _note(message: ImportedMessage, item: dict[str, Any]) -> None:
    if isinstance(item.get("id"), str):
        message.metadata["ids"].append(item["id"])  # type: ignore[union-attr]


def _message_item(builder: Builder, item: Any, path: str) -> None:
    require(item, dict, path, "an object")
    role = item.get("role")
    metadata: dict[str, Any] = {"source": path}
    if isinstance(item.get("id"), str):
        metadata["id"] = item["id"]
    if role in ("system", "developer"):
        if role == "developer":
            metadata["source_role"] = "developer"
        message = builder.message("system", metadata)
    elif role in ("user", "assistant"):
        message = builder.message(role, metadata)
    else:
        raise ImportFormatError(
            f"{path}.role", f"{role!r} is not one of system, developer, user, assistant"
        )
    _add_parts(builder, message, item.get("content"), f"{path}.content")


def _add_assistant_item(
    builder: Builder, message: ImportedMessage, item: dict[str, Any], path: str
) -> None:
    kind = str(item.get("type"))
    if kind == "reasoning":
        texts = [
            part["text"]
            for part in (item.get("summary") or []) + (item.get("content") or [])
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
        summary = "\n\n".join(texts) if texts else common.REDACTED
        message.blocks.append(common.reasoning(summary, common.extra(item, ("type",))))
    elif kind in CALLS:
        call_id = require(item.get("call_id") or item.get("id"), str, f"{path}.call_id", "a string")
        name = require(item.get("name"), str, f"{path}.name", "a string")
        raw = item.get("arguments") if kind == "function_call" else item.get("input")
        value = common.parse_arguments(raw)
        held = ("type", "call_id", "name", "arguments", "input")
        message.blocks.append(common.tool_use(call_id, name, value, common.extra(item, held)))
    else:
        # Hosted tools (web search, file search, computer, code interpreter, MCP…).
        detail = str(item.get("name") or item.get("id") or "")
        builder.gap(message, kind, detail, path, item)


def _add_output(
    builder: Builder, message: ImportedMessage, item: dict[str, Any], path: str
) -> None:
    kind = str(item.get("type"))
    if kind not in OUTPUTS:
        builder.gap(message, kind, str(item.get("call_id", "")), path, item)
        return
    call_id = require(item.get("call_id"), str, f"{path}.call_id", "a string")
    output = item.get("output", "")
    texts: list[str] = []
    later: list[tuple[Any, str]] = []
    if isinstance(output, str):
        texts.append(output)
    else:
        require(output, list, f"{path}.output", "a string or an array")
        for index, part in enumerate(output):
            if isinstance(part, dict) and part.get("type") in ("input_text", "output_text"):
                texts.append(str(part.get("text", "")))
            else:
                later.append((part, f"{path}.output[{index}]"))
    held = ("type", "call_id", "output")
    origin = common.extra(item, held)
    message.blocks.append(common.tool_result(call_id, None, "\n\n".join(texts), False, origin))
    for part, part_path in later:
        _add_part(builder, message, part, part_path)


def _add_parts(builder: Builder, message: ImportedMessage, content: Any, path: str) -> None:
    if isinstance(content, str):
        message.blocks.append(common.text(content))
        return
    require(content, list, path, "a string or an array of parts")
    for index, part in enumerate(content):
        _add_part(builder, message, part, f"{path}[{index}]")


def _add_part(builder: Builder, message: ImportedMessage, part: Any, path: str) -> None:
    require(part, dict, path, "an object")
    kind = str(part.get("type"))
    if kind in ("input_text", "output_text", "text"):
        value = require(part.get("text"), str, f"{path}.text", "a string")
        message.blocks.append(common.text(value, common.extra(part, ("type", "text"))))
    elif kind == "refusal":
        value = require(part.get("refusal"), str, f"{path}.refusal", "a string")
        message.blocks.append(common.text(value, {"type": "refusal"}))
    elif kind == "input_image":
        url = part.get("image_url")
        decoded = common.data_url(url) if isinstance(url, str) else None
        if decoded is not None and message.role == "user":
            message.blocks.append(common.image(*decoded, common.extra(part, ("type", "image_url"))))
        else:
            detail = (
                common.url_detail(url) if isinstance(url, str) else f"file {part.get('file_id')}"
            )
            if message.role != "user":
                detail += f", in {common.a_role(message.role)} message"
            builder.gap(message, "image", detail, path, part)
    elif kind == "input_file":
        detail = str(part.get("filename") or part.get("file_id") or part.get("file_url") or "")
        builder.gap(message, "file", detail, path, part)
    elif kind == "input_audio":
        builder.gap(message, "audio", "", path, part)
    else:
        builder.gap(message, kind, "", path, part)

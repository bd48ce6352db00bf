"""`openai-chat`: a Chat Completions request body (`messages`).

`developer` and `system` become system messages; `tool` (and legacy `function`) messages
become user messages of tool results, consecutive ones grouped into one.
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


def read(body: Any) -> Imported:
    """The conversation of one request body; an ImportFormatError names the JSON path."""
    require(body, dict, "body", "an object (a Chat Completions request body)")
    messages = require(body.get("messages"), list, "messages", "an array")
    result = Imported(format="openai-chat")
    builder = Builder(result)
    results: ImportedMessage | None = None  # the open user message of tool results
    for index, source in enumerate(messages):
        path = f"messages[{index}]"
        require(source, dict, path, "an object")
        role = source.get("role")
        metadata: dict[str, Any] = {"source": path}
        if isinstance(source.get("name"), str):
            metadata["name"] = source["name"]
        if role in ("tool", "function"):
            if results is None:
                results = builder.message("user", {"source": path, "sources": []})
            results.metadata["sources"].append(path)  # type: ignore[union-attr]
            _add_tool_message(builder, results, source, path)
            continue
        results = None
        if role in ("system", "developer"):
            if role == "developer":
                metadata["source_role"] = "developer"
            message = builder.message("system", metadata)
            _add_content(builder, message, source.get("content"), f"{path}.content")
        elif role == "user":
            message = builder.message("user", metadata)
            _add_content(builder, message, source.get("content"), f"{path}.content")
        elif role == "assistant":
            message = builder.message("assistant", metadata)
            # OpenAI-compatible reasoning models return their thinking beside the content.
            thinking = source.get("reasoning_content")
            if isinstance(thinking, str) and thinking:
                message.blocks.append(common.reasoning(thinking, {"field": "reasoning_content"}))
            _add_content(builder, message, source.get("content"), f"{path}.content")
            _add_assistant_extras(builder, message, source, path)
        else:
            raise ImportFormatError(
                f"{path}.role",
                f"{role!r} is not one of system, developer, user, assistant, tool, function",
            )
    result.metadata = {key: value for key, value in body.items() if key != "messages"}
    common.resolve_names(result.messages)
    return result


def _add_tool_message(
    builder: Builder, message: ImportedMessage, source: dict[str, Any], path: str
) -> None:
    if source["role"] == "tool":
        call_id = require(source.get("tool_call_id"), str, f"{path}.tool_call_id", "a string")
        name = None
    else:  # the legacy `function` role names the function and has no call id
        name = require(source.get("name"), str, f"{path}.name", "a string")
        call_id = name
    texts, later = _split_parts(source.get("content"), f"{path}.content")
    origin = common.extra(source, ("role", "tool_call_id", "content", "name"))
    message.blocks.append(common.tool_result(call_id, name, "\n\n".join(texts), False, origin))
    for part, part_path in later:
        _add_part(builder, message, part, part_path)


def _add_assistant_extras(
    builder: Builder, message: ImportedMessage, source: dict[str, Any], path: str
) -> None:
    refusal = source.get("refusal")
    if isinstance(refusal, str) and refusal:
        message.blocks.append(common.text(refusal, {"field": "refusal"}))
    calls = source.get("tool_calls") or []
    require(calls, list, f"{path}.tool_calls", "an array")
    for index, call in enumerate(calls):
        call_path = f"{path}.tool_calls[{index}]"
        require(call, dict, call_path, "an object")
        call_id = require(call.get("id"), str, f"{call_path}.id", "a string")
        if call.get("type", "function") == "function":
            function = require(call.get("function"), dict, f"{call_path}.function", "an object")
            name = require(function.get("name"), str, f"{call_path}.function.name", "a string")
            value = common.parse_arguments(function.get("arguments"))
        else:  # custom tools carry a free-form string input
            custom = require(call.get("custom"), dict, f"{call_path}.custom", "an object")
            name = require(custom.get("name"), str, f"{call_path}.custom.name", "a string")
            value = common.parse_arguments(custom.get("input"))
        origin = {"type": call["type"]} if call.get("type", "function") != "function" else None
        message.blocks.append(common.tool_use(call_id, name, value, origin))
    function_call = source.get("function_call")
    if isinstance(function_call, dict):  # the legacy single call, named by its function
        name = require(function_call.get("name"), str, f"{path}.function_call.name", "a string")
        value = common.parse_arguments(function_call.get("arguments"))
        message.blocks.append(common.tool_use(name, name, value, {"field": "function_call"}))
    audio = source.get("audio")
    if audio is not None:
        detail = f"id {audio['id']}" if isinstance(audio, dict) and "id" in audio else ""
        builder.gap(message, "audio", detail, f"{path}.audio", audio)


def _add_content(builder: Builder, message: ImportedMessage, content: Any, path: str) -> None:
    if content is None:
        return
    if isinstance(content, str):
        message.blocks.append(common.text(content))
        return
    require(content, list, path, "a string, null or an array of parts")
    for index, part in enumerate(content):
        _add_part(builder, message, part, f"{path}[{index}]")


def _add_part(builder: Builder, message: ImportedMessage, part: Any, path: str) -> None:
    require(part, dict, path, "an object")
    kind = part.get("type")
    if kind == "text":
        value = require(part.get("text"), str, f"{path}.text", "a string")
        message.blocks.append(common.text(value))
    elif kind == "refusal":
        value = require(part.get("refusal"), str, f"{path}.refusal", "a string")
        message.blocks.append(common.text(value, {"type": "refusal"}))
    elif kind == "image_url":
        image_url = require(part.get("image_url"), dict, f"{path}.image_url", "an object")
        url = require(image_url.get("url"), str, f"{path}.image_url.url", "a string")
        decoded = common.data_url(url)
        if decoded is not None and message.role == "user":
            origin = common.extra(image_url, ("url",))
            message.blocks.append(common.image(*decoded, origin))
        else:
            detail = common.url_detail(url)
            if message.role != "user":
                detail += f", in {common.a_role(message.role)} message"
            builder.gap(message, "image", detail, path, part)
    elif kind == "input_audio":
        audio = part.get("input_audio")
        detail = str(audio.get("format", "")) if isinstance(audio, dict) else ""
        builder.gap(message, "audio", detail, path, part)
    elif kind == "file":
        file = part.get("file")
        detail = ""
        if isinstance(file, dict):
            detail = str(file.get("filename") or file.get("file_id") or "")
        builder.gap(message, "file", detail, path, part)
    else:
        builder.gap(message, str(kind or "part"), "", path, part)


def _split_parts(content: Any, path: str) -> tuple[list[str], list[tuple[Any, str]]]:
    """A tool message's text parts, and its other parts to add after its result."""
    if content is None:
        return [], []
    if isinstance(content, str):
        return [content], []
    require(content, list, path, "a string or an array of parts")
    texts: list[str] = []
    later: list[tuple[Any, str]] = []
    for index, part in enumerate(content):
        if (
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ):
            texts.append(part["text"])
        else:
            later.append((part, f"{path}[{index}]"))
    return texts, later

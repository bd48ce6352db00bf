"""`anthropic`: a Messages API request body (`system`, `messages`, `model`, `tools`…).

Blocks are dispatched on `type` here (the SDK types would accept unknown types and drop
keys); whatever has no kind of its own becomes a gap marker keeping its source.
"""

from __future__ import annotations

from typing import Any

from conversations.core.blocks import IMAGE_MEDIA_TYPES, Role
from conversations.core.importers import common
from conversations.core.importers.common import (
    Builder,
    Imported,
    ImportedMessage,
    ImportFormatError,
    require,
)

TOOL_USE_TYPES = {"tool_use", "server_tool_use", "mcp_tool_use"}


def read(body: Any, *, where: str = "") -> Imported:
    """The conversation of one request body; an ImportFormatError names the JSON path."""
    require(body, dict, where or "body", "an object (a Messages API request body)")
    result = Imported(format="anthropic")
    builder = Builder(result)
    messages = require(body.get("messages"), list, _at(where, "messages"), "an array")
    system = body.get("system")
    if system is not None and system != "" and system != []:
        message = builder.message("system", {"source": _at(where, "system")})
        add_content(builder, message, system, _at(where, "system"))
    for index, source in enumerate(messages):
        path = _at(where, f"messages[{index}]")
        require(source, dict, path, "an object")
        role = source.get("role")
        if role not in ("user", "assistant"):
            raise ImportFormatError(f"{path}.role", f"{role!r} is not user or assistant")
        if "content" not in source:
            raise ImportFormatError(f"{path}.content", "is required")
        message = builder.message(role, {"source": path})
        add_content(builder, message, source["content"], f"{path}.content")
    result.metadata = {
        key: value for key, value in body.items() if key not in ("messages", "system")
    }
    common.resolve_names(result.messages)
    return result


def add_content(builder: Builder, message: ImportedMessage, content: Any, path: str) -> None:
    """Append a message's content (a string or a list of blocks) to `message`."""
    if isinstance(content, str):
        message.blocks.append(common.text(content))
        return
    require(content, list, path, "a string or an array of blocks")
    for index, block in enumerate(content):
        add_block(builder, message, block, f"{path}[{index}]")


def add_block(builder: Builder, message: ImportedMessage, block: Any, path: str) -> None:
    """Append the record's blocks for one Anthropic content block."""
    require(block, dict, path, "an object")
    kind = block.get("type")
    require(kind, str, f"{path}.type", "a string")
    role: Role = message.role
    if kind == "text":
        value = require(block.get("text"), str, f"{path}.text", "a string")
        message.blocks.append(common.text(value, common.extra(block, ("type", "text"))))
    elif kind in TOOL_USE_TYPES:
        call_id = require(block.get("id"), str, f"{path}.id", "a string")
        name = require(block.get("name"), str, f"{path}.name", "a string")
        value = common.parse_arguments(block.get("input"))
        origin = (
            common.extra(block, ("type", "id", "name", "input"))
            if kind == "tool_use"
            else (common.strip_base64({k: v for k, v in block.items() if k != "input"}))
        )
        message.blocks.append(common.tool_use(call_id, name, value, origin))
    elif kind == "tool_result" or kind.endswith("_tool_result"):
        add_result(builder, message, block, path)
    elif kind == "thinking":
        value = require(block.get("thinking"), str, f"{path}.thinking", "a string")
        message.blocks.append(common.reasoning(value, common.extra(block, ("type", "thinking"))))
    elif kind == "redacted_thinking":
        message.blocks.append(common.reasoning(common.REDACTED, block))
    elif kind == "image":
        add_image(builder, message, block, path, role)
    else:
        builder.gap(message, kind, _detail(block), path, block)


def add_image(
    builder: Builder, message: ImportedMessage, block: dict[str, Any], path: str, role: Role
) -> None:
    source = block.get("source")
    if (
        role == "user"
        and isinstance(source, dict)
        and source.get("type") == "base64"
        and source.get("media_type") in IMAGE_MEDIA_TYPES
        and isinstance(source.get("data"), str)
    ):
        origin = common.extra(block, ("type", "source"))
        message.blocks.append(common.image(source["media_type"], source["data"], origin))
        return
    detail = _detail(block)
    if role != "user":
        where_in = f"in {common.a_role(role)} message"
        detail = f"{detail}, {where_in}" if detail else where_in
    builder.gap(message, "image", detail, path, block)


def add_result(
    builder: Builder, message: ImportedMessage, block: dict[str, Any], path: str
) -> None:
    """A tool result: list content becomes its text parts joined by a blank line, then its
    images as image blocks right after it; other parts are marked as gaps after those."""
    call_id = require(block.get("tool_use_id"), str, f"{path}.tool_use_id", "a string")
    content = block.get("content", "")
    is_error = bool(block.get("is_error", False))
    texts: list[str] = []
    after: list[tuple[dict[str, Any], str]] = []
    whole_origin = False
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, dict):
        # Server tool results carry one object; `…_error` types are errors.
        part_type = str(content.get("type", ""))
        if part_type.endswith("_error"):
            is_error = True
            texts.append(str(content.get("error_code", part_type)))
        else:
            texts.append(common.compact_json(content))
        whole_origin = True
    elif isinstance(content, list):
        for index, part in enumerate(content):
            part_path = f"{path}.content[{index}]"
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(require(part.get("text"), str, f"{part_path}.text", "a string"))
            elif isinstance(part, dict) and part.get("type") == "image":
                after.append((part, part_path))
            elif isinstance(part, dict) and str(part.get("type", "")).endswith("_result"):
                # Server results (web search, fetch…) are data, not prose: kept as JSON.
                texts.append(common.compact_json(part))
                whole_origin = True
            else:
                after.append((part, part_path))
    elif content is None:
        pass
    else:
        raise ImportFormatError(f"{path}.content", "must be a string, an object or an array")
    held = ("type", "tool_use_id", "content", "is_error")
    origin = common.strip_base64(block) if whole_origin else common.extra(block, held)
    if origin and isinstance(content, list) and not whole_origin:
        origin = {key: value for key, value in origin.items() if key != "content"} or None
    kind = str(block["type"])
    if kind != "tool_result" and origin is None:
        origin = {"type": kind}
    message.blocks.append(
        common.tool_result(call_id, block.get("name"), "\n\n".join(texts), is_error, origin)
    )
    for part, part_path in after:
        if isinstance(part, dict) and part.get("type") == "image":
            add_image(builder, message, part, part_path, message.role)
        else:
            kind = str(part.get("type", "part")) if isinstance(part, dict) else "part"
            builder.gap(message, kind, _detail(part), part_path, part)


def _detail(block: Any) -> str:
    if not isinstance(block, dict):
        return common.type_name(block)
    source = block.get("source")
    if isinstance(source, dict):
        if "media_type" in source:
            return str(source["media_type"])
        if "url" in source:
            return common.url_detail(str(source["url"]))
        if "file_id" in source:
            return f"file {source['file_id']}"
        return str(source.get("type", ""))
    return ""


def _at(where: str, path: str) -> str:
    return f"{where}.{path}" if where else path

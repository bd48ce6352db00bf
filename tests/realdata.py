"""Real recorded conversations (tests/fixtures/real/) converted to Replay's record.

A record here is what an importer would POST: a list of (role, [BLOCK, ...]) with blocks in
the API's JSON form (docs/contract.md §1). `stored` turns one into the projection's input, resolving
a result's missing tool name as ingest does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conversations.core import replay

REAL = Path(__file__).resolve().parent / "fixtures" / "real"

Record = list[tuple[str, list[dict[str, Any]]]]


def load(name: str) -> Any:
    path = REAL / name
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


# Anthropic Messages API bodies (the SDK's snapshots and pydantic-ai's cassettes).


def exchanges(data: Any) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """(request body, successful response body or None) for each recorded call."""
    calls = data["interactions"] if isinstance(data, dict) else data
    result = []
    for call in calls:
        response = call["response"]
        ok = response.get("status_code", response.get("status")) == 200
        result.append((call["request"]["body"], response["body"] if ok else None))
    return result


def anthropic_record(data: Any, index: int = -1) -> Record:
    """The conversation of call `index`: its request (system, messages) and its answer."""
    request, response = exchanges(data)[index]
    record: Record = []
    system = request.get("system")
    if system:
        record.append(("system", anthropic_blocks("system", system)))
    for message in request["messages"]:
        record.append((message["role"], anthropic_blocks(message["role"], message["content"])))
    if response is not None and response.get("content") is not None:
        record.append(("assistant", anthropic_blocks("assistant", response["content"])))
    return record


def anthropic_blocks(role: str, content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [anthropic_block(role, block) for block in content]


def anthropic_block(role: str, block: dict[str, Any]) -> dict[str, Any]:
    kind = block["type"]
    if kind == "text":
        return {"type": "text", "text": block["text"]}
    if kind in ("tool_use", "server_tool_use"):
        return {
            "type": "tool_use",
            "id": block["id"],
            "name": block["name"],
            "input": block["input"],
        }
    if kind == "tool_result" or kind.endswith("_tool_result"):
        return {
            "type": "tool_result",
            "tool_use_id": block["tool_use_id"],
            "content": flatten(block.get("content", "")),
            "is_error": bool(block.get("is_error", False)),
        }
    if kind == "thinking":
        return {"type": "reasoning", "text": block["thinking"]}
    if kind == "redacted_thinking":
        return {"type": "reasoning", "text": "[redacted by the provider]"}
    if kind == "image" and role == "user" and block["source"].get("type") == "base64":
        source = block["source"]
        return {"type": "image", "media_type": source["media_type"], "data": source["data"]}
    return {"type": "text", "text": describe(block)}


def flatten(content: Any) -> str:
    """A tool result's content as one string: text parts joined, other parts described."""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        content = [content]
    lines = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            lines.append(part["text"])
        else:
            lines.append(describe(part))
    return "\n".join(lines)


def describe(part: Any) -> str:
    if not isinstance(part, dict):
        return json.dumps(part, ensure_ascii=False)
    kind = part.get("type", "part")
    source = part.get("source")
    if isinstance(source, dict) and "media_type" in source:
        return f"[{kind} ({source['media_type']})]"
    if isinstance(source, dict) and "url" in source:
        return f"[{kind}: {source['url']}]"
    if kind == "image_url":
        url = part["image_url"]["url"]
        return f"[image: {url if not url.startswith('data:') else url.split(',')[0]}]"
    return f"[{kind}]"


# Claude Code session transcripts.


def claude_code_record(lines: list[dict[str, Any]]) -> Record:
    """User and assistant lines in order; assistant lines that share one API message id (one
    block per line) become one message again."""
    record: Record = []
    previous_id = None
    for line in lines:
        if line.get("type") not in ("user", "assistant"):
            continue
        message = line["message"]
        role = message["role"]
        blocks = anthropic_blocks(role, message["content"])
        message_id = message.get("id") if role == "assistant" else None
        if message_id is not None and message_id == previous_id:
            record[-1][1].extend(blocks)
        else:
            record.append((role, blocks))
        previous_id = message_id
    return record


# OpenAI Chat Completions bodies.


def openai_record(data: Any, index: int = -1) -> Record:
    request, response = exchanges(data)[index]
    messages = list(request["messages"])
    if response is not None:
        messages.append(response["choices"][0]["message"])
    return [openai_message(message) for message in messages]


def openai_message(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    role = message["role"]
    if role == "tool":
        result = {
            "type": "tool_result",
            "tool_use_id": message["tool_call_id"],
            "content": flatten(message.get("content") or ""),
        }
        return "user", [result]
    if role == "developer":
        role = "system"
    blocks = openai_content(role, message.get("content"))
    for call in message.get("tool_calls") or []:
        arguments = json.loads(call["function"]["arguments"] or "{}")
        if not isinstance(arguments, dict):
            arguments = {"arguments": arguments}
        blocks.append(
            {
                "type": "tool_use",
                "id": call["id"],
                "name": call["function"]["name"],
                "input": arguments,
            }
        )
    return role, blocks


def openai_content(role: str, content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = []
    for part in content:
        if part["type"] == "text":
            blocks.append({"type": "text", "text": part["text"]})
        elif part["type"] == "image_url" and role == "user" and is_data_url(part):
            header, data = part["image_url"]["url"].split(",", 1)
            media_type = header.removeprefix("data:").removesuffix(";base64")
            blocks.append({"type": "image", "media_type": media_type, "data": data})
        else:
            blocks.append({"type": "text", "text": describe(part)})
    return blocks


def is_data_url(part: dict[str, Any]) -> bool:
    url: str = part["image_url"]["url"]
    return url.startswith("data:") and ";base64," in url


# Record → projection input.


def stored(record: Record) -> list[replay.StoredMessage]:
    """The projection's input, as ingest stores it: a result without a name takes the name
    of the latest earlier tool_use with its id, else `unknown`."""
    names: dict[str, str] = {}
    messages = []
    for role, blocks in record:
        values: list[replay.Block] = []
        for block in blocks:
            values.append(block_value(block, names))
            if block["type"] == "tool_use":
                names[block["id"]] = block["name"]
        messages.append(replay.StoredMessage(role, tuple(values)))  # type: ignore[arg-type]
    return messages


def block_value(block: dict[str, Any], names: dict[str, str]) -> replay.Block:
    kind = block["type"]
    if kind == "text":
        return replay.TextBlock(block["text"])
    if kind == "tool_use":
        return replay.ToolUseBlock.of(block["id"], block["name"], block["input"])
    if kind == "tool_result":
        name = block.get("name") or names.get(block["tool_use_id"], "unknown")
        return replay.ToolResultBlock(
            block["tool_use_id"], name, block["content"], block.get("is_error", False)
        )
    if kind == "reasoning":
        return replay.ReasoningBlock(block["text"])
    if kind == "image":
        return replay.ImageBlock(block["media_type"], block["data"])
    raise ValueError(kind)


ANTHROPIC_FILES = [
    "anthropic_sdk_tool_result_is_error.json",
    "anthropic_sdk_compaction_unanswered_tool_use.json",
    "anthropic_sdk_orphan_tool_result_400_error.json",
    "anthropic_sdk_programmatic_tool_call_caller_dangling.json",
    "anthropic_messages_thinking_signature_tool_roundtrip.json",
    "anthropic_messages_redacted_thinking.json",
    "anthropic_messages_tool_result_text_image_base64.json",
]
OPENAI_FILES = [
    "openai_chat_tool_calls_tool_role_image_url.json",
    "openai_chat_tool_result_image_as_user_data_url.json",
]
CLAUDE_CODE_FILES = [
    "claude_code_rejected_tool_use_interrupted.jsonl",
    "claude_code_compact_boundary.jsonl",
    "claude_code_tool_heavy_parallel_interrupts.jsonl",
    "claude_code_subagent_long_tool_output.jsonl",
]
ALL_FILES = ANTHROPIC_FILES + OPENAI_FILES + CLAUDE_CODE_FILES


def record_of(name: str) -> Record:
    """The conversation of a fixture's last recorded call (or its whole transcript)."""
    if name in ANTHROPIC_FILES:
        return anthropic_record(load(name))
    if name in OPENAI_FILES:
        return openai_record(load(name))
    return claude_code_record(load(name))

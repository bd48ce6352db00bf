"""Every real recording (tests/fixtures/real/, see SOURCES.md) as the bytes an importer
reads: a request body, a session file, or one span's GenAI attributes."""

from __future__ import annotations

import json
from typing import Any

from conversations.core import replay
from conversations.core.importers import Imported
from tests.realdata import REAL, exchanges, load

REQUEST_FILES = {
    "anthropic_messages_document_pdf_base64.json": "anthropic",
    "anthropic_messages_pause_turn_dangling_server_tool_use.excerpt.json": "anthropic",
    "anthropic_messages_redacted_thinking.json": "anthropic",
    "anthropic_messages_thinking_signature_tool_roundtrip.json": "anthropic",
    "anthropic_messages_tool_result_text_image_base64.json": "anthropic",
    "anthropic_sdk_compaction_unanswered_tool_use.json": "anthropic",
    "anthropic_sdk_orphan_tool_result_400_error.json": "anthropic",
    "anthropic_sdk_programmatic_tool_call_caller_dangling.json": "anthropic",
    "anthropic_sdk_tool_result_is_error.json": "anthropic",
    "openai_chat_tool_calls_tool_role_image_url.json": "openai-chat",
    "openai_chat_tool_result_image_as_user_data_url.json": "openai-chat",
    "openai_responses_function_call_output_input_image.json": "openai-responses",
    "openai_responses_reasoning_function_call_output.json": "openai-responses",
}
SESSION_FILES = [
    "claude_code_compact_boundary.jsonl",
    "claude_code_rejected_tool_use_interrupted.jsonl",
    "claude_code_subagent_long_tool_output.jsonl",
    "claude_code_tool_heavy_parallel_interrupts.jsonl",
    "large/claude_code_screenshot_tool_result_image.jsonl",
]
OTEL_FILES = ["otel_genai_semconv_examples.json", "otel_genai_pydantic_ai_emitter_snapshots.json"]


def request_bodies(name: str) -> list[bytes]:
    """Every recorded request body of a cassette or snapshot, as sent."""
    return [json.dumps(request).encode() for request, _ in exchanges(load(name))]


def otel_sources(name: str) -> list[tuple[str, bytes]]:
    """(label, body) for each span (or message array) the OTel fixtures record."""
    data = load(name)
    if "examples" in data:
        spans: dict[str, dict[str, Any] | list[Any]] = {}
        for example in data["examples"]:
            attribute = example.get("attribute")
            if attribute is None:  # a bare array of messages
                spans[example["section"]] = example["value"]
                continue
            # Anchors name the span: gen-ai-input-messages-tool-call-span-1 → tool-call-span-1.
            span = (
                example["anchor"].split("-", 4)[-1]
                if attribute != "gen_ai.system_instructions"
                else "instructions"
            )
            span = span.removeprefix("messages-").removeprefix("instructions-") or span
            group = spans.setdefault(f"{example['section']} / {span}", {})
            assert isinstance(group, dict)
            group[attribute] = example["value"]
        return [
            (label, json.dumps(value).encode())
            for label, value in spans.items()
            if not (isinstance(value, dict) and set(value) == {"gen_ai.tool.definitions"})
        ]
    return [
        (snapshot["test"], json.dumps(snapshot["value"]).encode()) for snapshot in data["snapshots"]
    ]


def all_sources() -> list[tuple[str, bytes]]:
    sources = []
    for name in REQUEST_FILES:
        for index, body in enumerate(request_bodies(name)):
            sources.append((f"{name}[{index}]", body))
    for name in SESSION_FILES:
        sources.append((name, (REAL / name).read_bytes()))
    for name in OTEL_FILES:
        sources.extend((f"{name}: {label}", body) for label, body in otel_sources(name))
    return sources


def stored(imported: Imported) -> list[replay.StoredMessage]:
    """The projection's input from an import, as ingest would store it (names resolved,
    origin dropped: it never crosses into a replay)."""
    names: dict[str, str] = {}
    messages = []
    for message in imported.messages:
        values: list[replay.Block] = []
        for block in message.blocks:
            match block["type"]:
                case "text":
                    values.append(replay.TextBlock(block["text"]))
                case "reasoning":
                    values.append(replay.ReasoningBlock(block["text"]))
                case "tool_use":
                    names[block["id"]] = block["name"]
                    values.append(
                        replay.ToolUseBlock.of(block["id"], block["name"], block["input"])
                    )
                case "tool_result":
                    name = block.get("name") or names.get(block["tool_use_id"], "unknown")
                    values.append(
                        replay.ToolResultBlock(
                            block["tool_use_id"],
                            name,
                            block["content"],
                            block.get("is_error", False),
                        )
                    )
                case "image":
                    values.append(replay.ImageBlock(block["media_type"], block["data"]))
        messages.append(replay.StoredMessage(message.role, tuple(values)))
    return messages

"""Real recorded conversations through the projection: Anthropic and OpenAI request bodies and
Claude Code transcripts (tests/fixtures/real/, see SOURCES.md), converted to the record."""

from __future__ import annotations

import json

import orjson
import pytest

from conversations.core import replay
from tests import realdata
from tests.realdata import ALL_FILES, anthropic_record, load, record_of, stored
from tests.sdk_types import validate_payload

COMBOS = [(vision, shape) for vision in (True, False) for shape in replay.SHAPES]
OPTIONS = pytest.mark.parametrize(("vision", "shape"), COMBOS)
NOT_SEEN_JPEG = "[Image (image/jpeg): not seen — this model cannot view images]"


def contents(payload: replay.Payload) -> list[replay.Content]:
    return [message["content"] for message in payload["messages"]]


def compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@pytest.mark.parametrize("name", ALL_FILES)
@OPTIONS
def test_real_conversation_gives_one_wire_message_per_stored_message(
    name: str, vision: bool, shape: str
) -> None:
    messages = stored(record_of(name))
    payload = replay.project(messages, vision=vision, shape=shape)
    kept = [m for m in messages if shape == "openai" or m.role != "system"]
    assert [m["role"] for m in payload["messages"]] == [m.role for m in kept]
    assert len(payload["messages"]) == len(kept)


@pytest.mark.parametrize("name", ALL_FILES)
@OPTIONS
def test_real_conversation_replay_validates_against_the_sdk(
    name: str, vision: bool, shape: str
) -> None:
    payload = replay.project(stored(record_of(name)), vision=vision, shape=shape)
    validate_payload(payload, shape)
    raw = orjson.dumps(payload)
    assert b'"tool_calls"' not in raw
    assert b'"tool_call_id"' not in raw
    assert b'"role":"tool"' not in raw
    assert raw == orjson.dumps(replay.project(stored(record_of(name)), vision=vision, shape=shape))


WITH_TOOLS = [
    name
    for name in ALL_FILES
    if name
    not in {
        "anthropic_sdk_compaction_unanswered_tool_use.json",  # its last call drops the tool turn
        "anthropic_messages_redacted_thinking.json",
        "claude_code_compact_boundary.jsonl",
    }
]


@pytest.mark.parametrize("name", WITH_TOOLS)
def test_call_ids_of_real_conversations_never_cross(name: str) -> None:
    messages = stored(record_of(name))
    ids = {
        block.id if isinstance(block, replay.ToolUseBlock) else block.tool_use_id
        for message in messages
        for block in message.blocks
        if isinstance(block, replay.ToolUseBlock | replay.ToolResultBlock)
    }
    assert ids
    for vision, shape in COMBOS:
        raw = orjson.dumps(replay.project(messages, vision=vision, shape=shape)).decode()
        assert not [call_id for call_id in ids if call_id in raw]


@pytest.mark.parametrize("shape", replay.SHAPES)
def test_unanswered_tool_use_before_compaction_replays_as_its_prose(shape: str) -> None:
    data = load("anthropic_sdk_compaction_unanswered_tool_use.json")
    answer = data[0]["response"]["body"]["content"]
    essay, call = answer
    assert call["type"] == "tool_use"

    payload = replay.project(stored(anthropic_record(data, index=0)), shape=shape)

    assert [m["role"] for m in payload["messages"]] == ["user", "assistant"]
    expected_call = f"Tool use: submit_analysis({compact(call['input'])})"
    assert payload["messages"][1]["content"] == f"{essay['text']}\n\n{expected_call}"


def test_failed_real_tool_call_replays_as_an_error_line() -> None:
    payload = replay.project(stored(record_of("anthropic_sdk_tool_result_is_error.json")))
    assert contents(payload) == [
        "What is the weather in SF?",
        'Tool use: get_weather({"location":"San Francisco, CA","units":"f"})',
        "Error (get_weather): RuntimeError('Unexpected error, try again')",
        payload["messages"][3]["content"],
    ]
    assert payload["messages"][3]["role"] == "assistant"


@pytest.mark.parametrize("shape", replay.SHAPES)
def test_orphan_tool_result_still_replays(shape: str) -> None:
    # The API refused this history with a 400; the projection owes no call-id pairing.
    payload = replay.project(
        stored(record_of("anthropic_sdk_orphan_tool_result_400_error.json")), shape=shape
    )
    assert payload["messages"] == [
        {"role": "user", "content": "What's the weather in SF in Celsius?"},
        {
            "role": "user",
            "content": "Result (unknown): The weather in San Francisco, CA is currently sunny "
            "with a temperature of 20°C.",
        },
    ]


def test_dangling_programmatic_tool_calls_replay_as_prose() -> None:
    payload = replay.project(
        stored(record_of("anthropic_sdk_programmatic_tool_call_caller_dangling.json"))
    )
    assert payload["messages"][-1] == {
        "role": "assistant",
        "content": 'Tool use: get_weather({"location":"New York, NY","units":"c"})',
    }
    server_call = payload["messages"][1]["content"]
    assert 'Tool use: code_execution({"code":"import json\\n\\n# Get weather' in server_call


def test_rejected_claude_code_tool_calls_replay_as_errors_named_by_their_calls() -> None:
    payload = replay.project(stored(record_of("claude_code_rejected_tool_use_interrupted.jsonl")))
    rejection = "The user doesn't want to proceed with this tool use."
    assert [m["role"] for m in payload["messages"]] == [
        "user",
        "assistant",
        "user",
        "user",
        "user",
    ]
    assistant = payload["messages"][1]["content"]
    # Five transcript lines of one API message, in order; the first is a bare "\n\n" text.
    assert assistant.startswith("\n\n\n\n[Reasoning]: The user is having trouble")
    assert assistant.endswith(
        'Tool use: Bash({"command":"mix phx.server 2>&1 | head -80","timeout":30000})\n\n'
        'Tool use: Glob({"pattern":"mix.exs","path":"/home/marco/projects/spotter"})'
    )
    assert payload["messages"][2]["content"].startswith(f"Error (Bash): {rejection}")
    assert payload["messages"][3]["content"].startswith(f"Error (Glob): {rejection}")
    assert payload["messages"][4]["content"] == "[Request interrupted by user for tool use]"


def test_parallel_results_returned_out_of_order_keep_their_tool_names() -> None:
    lines = load("claude_code_tool_heavy_parallel_interrupts.jsonl")
    names = {}
    results = []
    for line in lines:
        content = line.get("message", {}).get("content")
        for block in content if isinstance(content, list) else []:
            if block["type"] == "tool_use":
                names[block["id"]] = block["name"]
            elif block["type"] == "tool_result":
                results.append(names[block["tool_use_id"]])
    assert {"WebSearch", "Glob"} <= set(results)

    text = "\n\n".join(
        m["content"] for m in replay.project(stored(realdata.claude_code_record(lines)))["messages"]
    )
    named = [
        line.split(" (", 1)[1].split("):", 1)[0]
        for line in text.split("\n\n")
        if line.startswith(("Result (", "Error ("))
    ]
    assert named == results


def test_thinking_and_its_tool_round_trip_replay_as_prose() -> None:
    payload = replay.project(
        stored(record_of("anthropic_messages_thinking_signature_tool_roundtrip.json"))
    )
    assistant = payload["messages"][1]["content"]
    assert assistant.startswith('[Reasoning]: The user is asking about the largest city in "the')
    assert assistant.endswith("\n\nTool use: get_user_country({})")
    assert payload["messages"][2]["content"] == "Result (get_user_country): Mexico"
    assert "signature" not in orjson.dumps(payload).decode()


def test_redacted_thinking_crosses_as_a_marked_reasoning_line() -> None:
    payload = replay.project(stored(record_of("anthropic_messages_redacted_thinking.json")))
    assert payload["messages"][1]["content"].startswith(
        "[Reasoning]: [redacted by the provider]\n\nI notice that your message"
    )


def test_long_real_tool_output_crosses_whole() -> None:
    record = record_of("claude_code_subagent_long_tool_output.jsonl")
    results = [b for _, blocks in record for b in blocks if b["type"] == "tool_result"]
    longest = max(results, key=lambda b: len(b["content"]))
    assert len(longest["content"]) > 75_000  # about 81 KB of UTF-8
    text = "\n\n".join(contents(replay.project(stored(record), vision=False)))
    assert f"Result (WebFetch): {longest['content']}" in text


def test_openai_tool_role_becomes_a_user_result_line() -> None:
    payload = replay.project(stored(record_of("openai_chat_tool_calls_tool_role_image_url.json")))
    assert payload["messages"][1:3] == [
        {"role": "assistant", "content": "Tool use: get_image({})"},
        {"role": "user", "content": "Result (get_image): See file bd38f5"},
    ]


def openai_data_url_image() -> tuple[str, str]:
    body = load("openai_chat_tool_result_image_as_user_data_url.json")
    user = body["interactions"][-1]["request"]["body"]["messages"][3]
    url = user["content"][1]["image_url"]["url"]
    return user["content"][0]["text"], url


@pytest.mark.parametrize("shape", replay.SHAPES)
def test_real_image_without_vision_is_named_as_not_seen(shape: str) -> None:
    text, _ = openai_data_url_image()
    record = record_of("openai_chat_tool_result_image_as_user_data_url.json")
    payload = replay.project(stored(record), vision=False, shape=shape)
    assert payload["messages"][3] == {"role": "user", "content": f"{text}\n\n{NOT_SEEN_JPEG}"}
    images = sum(b["type"] == "image" for _, blocks in record for b in blocks)
    assert orjson.dumps(payload).decode().count("not seen — this model") == images == 1


def test_real_image_with_vision_crosses_as_the_same_bytes() -> None:
    text, url = openai_data_url_image()
    messages = stored(record_of("openai_chat_tool_result_image_as_user_data_url.json"))
    openai = replay.project(messages, vision=True, shape="openai")["messages"][3]
    assert openai["content"] == [
        {"type": "text", "text": text},
        {"type": "image_url", "image_url": {"url": url}},
    ]
    anthropic = replay.project(messages, vision=True, shape="anthropic")["messages"][3]
    assert anthropic["content"][1]["source"] == {
        "type": "base64",
        "media_type": "image/jpeg",
        "data": url.split(",", 1)[1],
    }


def test_image_inside_a_real_tool_result_is_described_in_the_result() -> None:
    payload = replay.project(
        stored(record_of("anthropic_messages_tool_result_text_image_base64.json"))
    )
    assert payload["messages"][2]["content"] == (
        "Result (get_mixed_content): Here is the image:\n[image (image/jpeg)]\n"
        '{"pydantic_ai_marker":"test_42"}'
    )


# The API serves the same bytes as the pure projection of the same record.

API_FILES = [
    "openai_chat_tool_result_image_as_user_data_url.json",
    "claude_code_rejected_tool_use_interrupted.jsonl",
    "anthropic_sdk_orphan_tool_result_400_error.json",
    "anthropic_sdk_programmatic_tool_call_caller_dangling.json",
    "claude_code_tool_heavy_parallel_interrupts.jsonl",
]


@pytest.mark.parametrize("name", API_FILES)
def test_api_replay_of_an_ingested_real_conversation_equals_the_projection(api, name: str) -> None:
    record = record_of(name)
    created = api.post("/api/conversations", {"title": name, "metadata": {"source": name}})
    assert created.status_code == 201, created.content
    conversation_id = created.json()["id"]
    for seq, (role, blocks) in enumerate(record):
        response = api.post(
            f"/api/conversations/{conversation_id}/messages", {"role": role, "blocks": blocks}
        )
        assert response.status_code == 201, response.content
        assert response.json()["seq"] == seq

    messages = stored(record)
    for vision, shape in COMBOS:
        response = api.get(
            f"/api/conversations/{conversation_id}/replay",
            vision="1" if vision else "0",
            shape=shape,
        )
        assert response.status_code == 200
        assert response["Content-Type"] == "application/json"
        assert response.content == orjson.dumps(
            replay.project(messages, vision=vision, shape=shape)
        )

"""docs/contract.md §2 as properties over generated records: every rule holds for any record, not
just ours."""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from conversations.core import replay
from tests.replay_strategies import json_objects, records

EXAMPLES = settings(max_examples=100, deadline=None)
shapes = st.sampled_from(replay.SHAPES)
visions = st.booleans()
IMAGE_PART_TYPE = {"openai": "image_url", "anthropic": "image"}


def walk(value: Any) -> Any:
    """Every dict and list inside a JSON value, the value included."""
    yield value
    if isinstance(value, dict):
        for item in value.values():
            yield from walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from walk(item)


def wire_pairs(
    messages: list[replay.StoredMessage], payload: replay.Payload, shape: str
) -> list[tuple[replay.StoredMessage, replay.WireMessage]]:
    """Each stored message with the wire message it became (anthropic lifts system away)."""
    kept = [m for m in messages if shape == "openai" or m.role != "system"]
    return list(zip(kept, payload["messages"], strict=True))


def expected_text(blocks: tuple[replay.Block, ...]) -> str:
    joined = "\n\n".join(replay.prose(b) for b in blocks)
    return replay.EMPTY_MESSAGE if joined.strip() == "" else joined


def blank(text: str) -> bool:
    return text == "" or text.isspace()


def runs(blocks: tuple[replay.Block, ...]) -> list[tuple[bool, list[replay.Block]]]:
    """The blocks in runs: (is an image run, its blocks), in order."""
    return [
        (is_image, list(run))
        for is_image, run in itertools.groupby(
            blocks, key=lambda b: isinstance(b, replay.ImageBlock)
        )
    ]


@EXAMPLES
@given(records, visions)
def test_one_wire_message_per_stored_message_same_roles_same_order(messages, vision) -> None:
    openai = replay.project(messages, vision=vision, shape="openai")
    assert list(openai) == ["messages"]
    assert [m["role"] for m in openai["messages"]] == [m.role for m in messages]

    anthropic = replay.project(messages, vision=vision, shape="anthropic")
    systems = [m for m in messages if m.role == "system"]
    others = [m for m in messages if m.role != "system"]
    assert [m["role"] for m in anthropic["messages"]] == [m.role for m in others]
    if systems:
        assert list(anthropic) == ["system", "messages"]
        assert anthropic["system"] == "\n\n".join(expected_text(m.blocks) for m in systems)
    else:
        assert list(anthropic) == ["messages"]


@EXAMPLES
@given(records, visions, shapes)
def test_no_tool_roles_call_ids_or_foreign_parts_in_any_shape(messages, vision, shape) -> None:
    payload = replay.project(messages, vision=vision, shape=shape)
    for node in walk(payload):
        if isinstance(node, dict):
            assert "tool_calls" not in node
            assert "tool_call_id" not in node
            assert "tool_use_id" not in node
            assert node.get("role") != "tool"
    allowed = {"text", IMAGE_PART_TYPE[shape]}
    for message in payload["messages"]:
        assert set(message) == {"role", "content"}
        assert message["role"] in replay.ROLES
        if isinstance(message["content"], list):
            assert message["content"], "a list content is never empty"
            assert {part["type"] for part in message["content"]} <= allowed


@EXAMPLES
@given(records)
def test_vision_off_gives_only_string_contents(messages) -> None:
    for shape in replay.SHAPES:
        payload = replay.project(messages, vision=False, shape=shape)
        for message in payload["messages"]:
            assert isinstance(message["content"], str)
        assert isinstance(payload.get("system", ""), str)


@EXAMPLES
@given(records, visions, shapes)
def test_same_record_gives_byte_identical_json(messages, vision, shape) -> None:
    first = orjson.dumps(replay.project(messages, vision=vision, shape=shape))
    again = orjson.dumps(replay.project(copy.deepcopy(messages), vision=vision, shape=shape))
    assert first == again


@EXAMPLES
@given(records, visions, shapes)
def test_every_block_prose_appears_in_its_message(messages, vision, shape) -> None:
    payload = replay.project(messages, vision=vision, shape=shape)
    for stored, wire in wire_pairs(messages, payload, shape):
        content = wire["content"]
        if isinstance(content, str):
            assert content == expected_text(stored.blocks)
            if content != replay.EMPTY_MESSAGE:
                for block in stored.blocks:
                    assert replay.prose(block) in content
            continue
        texts = "\n\n".join(p["text"] for p in content if p["type"] == "text")
        for is_image, run in runs(stored.blocks):
            joined = "\n\n".join(map(replay.prose, run))
            if is_image or blank(joined):
                continue  # images are parts; a blank run is left out (rule 6)
            for block in run:
                assert replay.prose(block) in texts


@EXAMPLES
@given(records, shapes)
def test_vision_on_splits_images_from_runs_of_prose(messages, shape) -> None:
    payload = replay.project(messages, vision=True, shape=shape)
    for stored, wire in wire_pairs(messages, payload, shape):
        images = [b for b in stored.blocks if isinstance(b, replay.ImageBlock)]
        if not images:
            assert isinstance(wire["content"], str)
            continue
        expected: list[Any] = []
        for is_image, run in runs(stored.blocks):
            joined = "\n\n".join(map(replay.prose, run))
            if is_image:
                expected.extend(replay.image_part(b, shape) for b in run)
            elif not blank(joined):
                expected.append({"type": "text", "text": joined})
        assert wire["content"] == expected
        image_parts = [p for p in wire["content"] if p["type"] != "text"]
        for block, part in zip(images, image_parts, strict=True):
            if shape == "openai":
                assert part["image_url"]["url"] == f"data:{block.media_type};base64,{block.data}"
            else:
                assert part["source"] == {
                    "type": "base64",
                    "media_type": block.media_type,
                    "data": block.data,
                }


@EXAMPLES
@given(records, shapes)
def test_no_text_part_is_ever_blank_and_no_content_is_blank(messages, shape) -> None:
    for vision in (True, False):
        payload = replay.project(messages, vision=vision, shape=shape)
        for message in payload["messages"]:
            content = message["content"]
            if isinstance(content, str):
                assert not blank(content)  # rule 7: `[Empty message]` instead
                continue
            assert any(p["type"] != "text" for p in content)  # a list only with images
            for part in content:
                if part["type"] == "text":
                    assert not blank(part["text"]), content
        assert not blank(payload.get("system", "x"))


@EXAMPLES
@given(json_objects)
def test_tool_use_input_round_trips_with_its_key_order(tool_input) -> None:
    block = replay.ToolUseBlock.of("id", "name", tool_input)
    assert block.input == tool_input
    assert orjson.dumps(block.input) == orjson.dumps(tool_input)  # same key order, at every depth
    assert (
        replay.prose(block)
        == f"Tool use: name({json.dumps(tool_input, separators=(',', ':'), ensure_ascii=False)})"
    )

"""docs/contract.md §2, rule by rule, on the pure projection: plain values in, wire messages out."""

from __future__ import annotations

import orjson
import pytest

from conversations.core import replay
from conversations.core.replay import (
    ImageBlock,
    ReasoningBlock,
    StoredMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

PNG = "iVBORw0KGgo="
JPEG = "/9j/4AAQ"
NOT_SEEN_PNG = "[Image (image/png): not seen — this model cannot view images]"


def text(role: replay.Role, *texts: str) -> StoredMessage:
    return StoredMessage(role, tuple(TextBlock(t) for t in texts))


def only_content(message: StoredMessage, *, vision: bool = True, shape: replay.Shape = "openai"):
    payload = replay.project([message], vision=vision, shape=shape)
    assert len(payload["messages"]) == 1
    return payload["messages"][0]["content"]


# Rule 2: each block crosses in prose, exactly.


def test_text_block_crosses_as_the_text_itself() -> None:
    assert only_content(text("user", "Hello, *world*  \n")) == "Hello, *world*  \n"


def test_tool_use_crosses_as_name_and_compact_json_input() -> None:
    block = ToolUseBlock.of("toolu_1", "get_weather", {"location": "Paris", "days": 3})
    message = StoredMessage("assistant", (block,))
    assert only_content(message) == 'Tool use: get_weather({"location":"Paris","days":3})'


def test_tool_use_input_keeps_key_order_and_non_ascii_characters() -> None:
    tool_input = {
        "zeta": "ünïcode 日本語 😀",
        "alpha": [1, 2.5, None, True, {"b": "x", "a": "y"}],
        "Mid": {"z": {}, "a": []},
    }
    block = ToolUseBlock.of("t", "lookup", tool_input)
    expected = (
        'Tool use: lookup({"zeta":"ünïcode 日本語 😀","alpha":[1,2.5,null,true,{"b":"x","a":"y"}],'
        '"Mid":{"z":{},"a":[]}})'
    )
    assert replay.prose(block) == expected
    assert only_content(StoredMessage("assistant", (block,))) == expected


def test_tool_use_with_empty_input_shows_empty_object() -> None:
    assert replay.prose(ToolUseBlock.of("t", "ping", {})) == "Tool use: ping({})"


def test_tool_use_escapes_quotes_and_newlines_inside_input_as_json() -> None:
    block = ToolUseBlock.of("t", "bash", {"command": 'echo "hi"\nls'})
    assert replay.prose(block) == 'Tool use: bash({"command":"echo \\"hi\\"\\nls"})'


def test_tool_use_input_round_trips_with_key_order() -> None:
    tool_input = {"b": 1, "a": {"d": [1, "ü"], "c": None}, "é": 0.5}
    block = ToolUseBlock.of("t", "n", tool_input)
    assert block.input == tool_input
    assert list(block.input) == ["b", "a", "é"]
    assert list(block.input["a"]) == ["d", "c"]
    assert block.input_json == '{"b":1,"a":{"d":[1,"ü"],"c":null},"é":0.5}'


def test_tool_result_crosses_as_result_with_tool_name() -> None:
    block = ToolResultBlock("toolu_1", "get_weather", "18°C, light rain\nwind 3 km/h")
    message = StoredMessage("user", (block,))
    assert only_content(message) == "Result (get_weather): 18°C, light rain\nwind 3 km/h"


def test_failed_tool_result_crosses_as_error() -> None:
    block = ToolResultBlock("toolu_1", "deploy_log", "PermissionError: denied", is_error=True)
    assert (
        only_content(StoredMessage("user", (block,)))
        == "Error (deploy_log): PermissionError: denied"
    )


def test_tool_result_with_empty_content_still_names_the_tool() -> None:
    assert replay.prose(ToolResultBlock("t", "noop", "")) == "Result (noop): "


def test_reasoning_crosses_with_its_label() -> None:
    message = StoredMessage("assistant", (ReasoningBlock("Check the logs first."),))
    assert only_content(message) == "[Reasoning]: Check the logs first."


@pytest.mark.parametrize("media_type", replay.IMAGE_MEDIA_TYPES)
def test_image_without_vision_is_named_as_not_seen(media_type: str) -> None:
    message = StoredMessage("user", (ImageBlock(media_type, PNG),))
    expected = f"[Image ({media_type}): not seen — this model cannot view images]"
    for shape in replay.SHAPES:
        assert only_content(message, vision=False, shape=shape) == expected


def test_image_marker_text_is_exact() -> None:
    assert replay.image_marker("image/png") == NOT_SEEN_PNG
    assert replay.prose(ImageBlock("image/png", PNG)) == NOT_SEEN_PNG


# Rule 3: prose joined by a blank line, in block order.


def test_blocks_are_joined_by_a_blank_line_in_block_order() -> None:
    message = StoredMessage(
        "assistant",
        (
            ReasoningBlock("think"),
            TextBlock("Let me look."),
            ToolUseBlock.of("t1", "a", {"x": 1}),
            ToolUseBlock.of("t2", "b", {}),
        ),
    )
    assert only_content(message) == (
        '[Reasoning]: think\n\nLet me look.\n\nTool use: a({"x":1})\n\nTool use: b({})'
    )


def test_results_and_text_in_one_user_message_are_joined_in_order() -> None:
    message = StoredMessage(
        "user",
        (
            ToolResultBlock("t1", "a", "ok"),
            ToolResultBlock("t2", "b", "boom", is_error=True),
            TextBlock("Go on."),
        ),
    )
    assert only_content(message) == "Result (a): ok\n\nError (b): boom\n\nGo on."


def test_images_without_vision_are_named_in_their_place() -> None:
    message = StoredMessage(
        "user", (TextBlock("before"), ImageBlock("image/jpeg", JPEG), TextBlock("after"))
    )
    expected = "before\n\n[Image (image/jpeg): not seen — this model cannot view images]\n\nafter"
    assert only_content(message, vision=False) == expected
    assert replay.text_content(message) == expected


# Rule 7: empty messages.


@pytest.mark.parametrize("shape", replay.SHAPES)
@pytest.mark.parametrize("vision", [True, False])
def test_message_without_blocks_crosses_as_empty_message(vision: bool, shape: str) -> None:
    assert only_content(StoredMessage("assistant", ()), vision=vision, shape=shape) == (
        "[Empty message]"
    )


@pytest.mark.parametrize(
    "blocks",
    [
        (TextBlock(""),),
        (TextBlock("   "),),
        (TextBlock(" \n\t "), TextBlock("")),
        (TextBlock(""), TextBlock("")),
    ],
)
@pytest.mark.parametrize("vision", [True, False])
def test_whitespace_only_message_crosses_as_empty_message(
    blocks: tuple[replay.Block, ...], vision: bool
) -> None:
    assert only_content(StoredMessage("user", blocks), vision=vision) == replay.EMPTY_MESSAGE
    assert replay.EMPTY_MESSAGE == "[Empty message]"


def test_empty_message_keeps_its_place_and_role() -> None:
    messages = [text("user", "hi"), StoredMessage("assistant", ()), text("user", "again")]
    payload = replay.project(messages)
    assert payload == {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "[Empty message]"},
            {"role": "user", "content": "again"},
        ]
    }


def test_empty_system_message_is_lifted_as_empty_message() -> None:
    payload = replay.project([StoredMessage("system", ()), text("user", "hi")], shape="anthropic")
    assert payload["system"] == "[Empty message]"


# Rule 6: the only variable is vision.


def test_vision_on_without_images_gives_one_string() -> None:
    message = StoredMessage("user", (TextBlock("a"), ToolResultBlock("t", "n", "b")))
    for shape in replay.SHAPES:
        assert only_content(message, vision=True, shape=shape) == "a\n\nResult (n): b"


def test_vision_on_with_images_gives_parts_in_openai_shape() -> None:
    message = StoredMessage(
        "user",
        (
            TextBlock("a"),
            ToolResultBlock("t", "n", "b"),
            ImageBlock("image/png", PNG),
            TextBlock("c"),
            ImageBlock("image/jpeg", JPEG),
            ImageBlock("image/webp", "UklGR"),
        ),
    )
    assert only_content(message, vision=True, shape="openai") == [
        {"type": "text", "text": "a\n\nResult (n): b"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "text", "text": "c"},
        {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{JPEG}"}},
        {"type": "image_url", "image_url": {"url": "data:image/webp;base64,UklGR"}},
    ]


def test_vision_on_with_images_gives_parts_in_anthropic_shape() -> None:
    message = StoredMessage("user", (ImageBlock("image/gif", "R0lGOD"), TextBlock("what is this?")))
    assert only_content(message, vision=True, shape="anthropic") == [
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/gif", "data": "R0lGOD"},
        },
        {"type": "text", "text": "what is this?"},
    ]


def test_message_of_only_an_image_with_vision_is_one_image_part() -> None:
    message = StoredMessage("user", (ImageBlock("image/png", PNG),))
    assert only_content(message, vision=True) == [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}
    ]


@pytest.mark.parametrize("shape", replay.SHAPES)
def test_a_blank_run_beside_images_is_left_out(shape: replay.Shape) -> None:
    # Rule 6: providers reject blank text parts; a run of only whitespace is no part.
    image = ImageBlock("image/png", PNG)
    message = StoredMessage(
        "user",
        (TextBlock(" \n"), image, TextBlock(""), image, TextBlock("\u3000"), TextBlock("\t")),
    )
    part = replay.image_part(image, shape)
    assert only_content(message, shape=shape) == [part, part]
    # A run holding any visible text is kept whole, its whitespace blocks included.
    kept = StoredMessage("user", (TextBlock(" "), TextBlock("look"), image))
    assert only_content(kept, shape=shape) == [{"type": "text", "text": " \n\nlook"}, part]
    # Without vision the same message is one string, as before.
    assert only_content(message, vision=False, shape=shape) == "\n\n".join(
        [" \n", NOT_SEEN_PNG, "", NOT_SEEN_PNG, "\u3000", "\t"]
    )


def test_vision_changes_only_image_messages() -> None:
    messages = [
        text("system", "sys"),
        StoredMessage("user", (TextBlock("look"), ImageBlock("image/png", PNG))),
        StoredMessage("assistant", (ToolUseBlock.of("t", "zoom", {"factor": 2}),)),
    ]
    on = replay.project(messages, vision=True)["messages"]
    off = replay.project(messages, vision=False)["messages"]
    assert on[0] == off[0]
    assert on[2] == off[2]
    assert isinstance(on[1]["content"], list)
    assert off[1]["content"] == f"look\n\n{NOT_SEEN_PNG}"


def test_project_defaults_to_vision_on_and_openai_shape() -> None:
    messages = [
        text("system", "sys"),
        StoredMessage("user", (ImageBlock("image/png", PNG),)),
    ]
    assert replay.project(messages) == replay.project(messages, vision=True, shape="openai")
    assert replay.project(messages)["messages"][0]["role"] == "system"


# Rule 1 and the shapes.


def test_openai_shape_keeps_every_message_in_order_with_its_role() -> None:
    messages = [
        text("system", "be brief"),
        text("user", "hi"),
        text("assistant", "hello"),
        text("system", "second system"),
        text("user", "bye"),
    ]
    payload = replay.project(messages, shape="openai")
    assert list(payload) == ["messages"]
    assert payload["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": "second system"},
        {"role": "user", "content": "bye"},
    ]


def test_anthropic_shape_lifts_system_messages_joined_by_a_blank_line() -> None:
    messages = [
        text("system", "be brief", "be kind"),
        text("user", "hi"),
        text("system", "second system"),
        text("assistant", "hello"),
    ]
    payload = replay.project(messages, shape="anthropic")
    assert list(payload) == ["system", "messages"]
    assert payload["system"] == "be brief\n\nbe kind\n\nsecond system"
    assert payload["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]


def test_anthropic_shape_has_no_system_key_without_system_messages() -> None:
    payload = replay.project([text("user", "hi"), text("assistant", "yo")], shape="anthropic")
    assert "system" not in payload
    assert payload == {
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    }


def test_anthropic_shape_of_nothing_is_no_messages() -> None:
    assert replay.project([], shape="anthropic") == {"messages": []}
    assert replay.project([], shape="openai") == {"messages": []}


def test_anthropic_system_is_a_string_even_with_vision() -> None:
    messages = [text("system", "rules"), text("user", "hi")]
    assert replay.project(messages, vision=True, shape="anthropic")["system"] == "rules"


# Rule 5: no tool roles and no call-id obligations.


def tool_round() -> list[StoredMessage]:
    return [
        text("user", "What is the weather?"),
        StoredMessage(
            "assistant",
            (TextBlock("Checking."), ToolUseBlock.of("call_1", "weather", {"city": "Oslo"})),
        ),
        StoredMessage("user", (ToolResultBlock("call_1", "weather", "-3°C"),)),
        text("assistant", "It is -3°C."),
    ]


@pytest.mark.parametrize("shape", replay.SHAPES)
@pytest.mark.parametrize("vision", [True, False])
def test_tool_round_has_no_tool_role_and_no_call_ids(vision: bool, shape: str) -> None:
    payload = replay.project(tool_round(), vision=vision, shape=shape)
    raw = orjson.dumps(payload)
    assert b"call_1" not in raw
    assert b"tool_call" not in raw
    assert b'"tool"' not in raw
    for message in payload["messages"]:
        assert set(message) == {"role", "content"}
        assert message["role"] in ("user", "assistant")
        assert isinstance(message["content"], str)
    assert [m["content"] for m in payload["messages"]] == [
        "What is the weather?",
        'Checking.\n\nTool use: weather({"city":"Oslo"})',
        "Result (weather): -3°C",
        "It is -3°C.",
    ]


@pytest.mark.parametrize("shape", replay.SHAPES)
def test_unanswered_tool_use_replays_as_its_prose_only(shape: str) -> None:
    messages = [
        text("user", "page someone"),
        StoredMessage("assistant", (ToolUseBlock.of("toolu_9", "page_oncall", {"team": "api"}),)),
    ]
    payload = replay.project(messages, shape=shape)
    assert payload["messages"] == [
        {"role": "user", "content": "page someone"},
        {"role": "assistant", "content": 'Tool use: page_oncall({"team":"api"})'},
    ]


def test_result_without_its_call_still_replays() -> None:
    messages = [StoredMessage("user", (ToolResultBlock("nowhere", "unknown", "late answer"),))]
    assert replay.project(messages)["messages"] == [
        {"role": "user", "content": "Result (unknown): late answer"}
    ]


# Rule 8: deterministic.


def mixed_record() -> list[StoredMessage]:
    return [
        text("system", "sys ü"),
        StoredMessage("user", (TextBlock("look"), ImageBlock("image/png", PNG), TextBlock("then"))),
        StoredMessage(
            "assistant",
            (
                ReasoningBlock("hmm"),
                ToolUseBlock.of("t", "f", {"z": 1, "a": {"y": [1, 2], "b": "é"}}),
            ),
        ),
        StoredMessage("user", (ToolResultBlock("t", "f", "done", is_error=True),)),
        StoredMessage("assistant", ()),
    ]


@pytest.mark.parametrize("shape", replay.SHAPES)
@pytest.mark.parametrize("vision", [True, False])
def test_same_record_gives_byte_identical_json(vision: bool, shape: str) -> None:
    first = orjson.dumps(replay.project(mixed_record(), vision=vision, shape=shape))
    second = orjson.dumps(replay.project(mixed_record(), vision=vision, shape=shape))
    assert first == second
    assert 'Tool use: f({\\"z\\":1,\\"a\\":{\\"y\\":[1,2],\\"b\\":\\"é\\"}})'.encode() in first


def test_projection_does_not_change_its_input() -> None:
    messages = mixed_record()
    before = repr(messages)
    replay.project(messages, vision=True, shape="anthropic")
    replay.project(messages, vision=False, shape="openai")
    assert repr(messages) == before


# project_message and content: the per-message views agree with project.


@pytest.mark.parametrize("vision", [True, False])
def test_project_message_matches_project_in_openai_shape(vision: bool) -> None:
    messages = mixed_record()
    payload = replay.project(messages, vision=vision, shape="openai")
    assert [replay.project_message(m, vision=vision, shape="openai") for m in messages] == payload[
        "messages"
    ]


@pytest.mark.parametrize("vision", [True, False])
def test_project_message_matches_project_in_anthropic_shape(vision: bool) -> None:
    messages = mixed_record()
    payload = replay.project(messages, vision=vision, shape="anthropic")
    non_system = [m for m in messages if m.role != "system"]
    assert [
        replay.project_message(m, vision=vision, shape="anthropic") for m in non_system
    ] == payload["messages"]


def test_project_message_keeps_the_system_role() -> None:
    message = text("system", "rules")
    assert replay.project_message(message, vision=True, shape="anthropic") == {
        "role": "system",
        "content": "rules",
    }


def test_project_message_uses_the_image_part_of_its_shape() -> None:
    message = StoredMessage("user", (ImageBlock("image/png", PNG),))
    openai = replay.project_message(message, vision=True, shape="openai")
    anthropic = replay.project_message(message, vision=True, shape="anthropic")
    assert openai["content"][0]["type"] == "image_url"
    assert anthropic["content"][0]["type"] == "image"
    assert replay.project_message(message, vision=False, shape="openai")["content"] == (
        NOT_SEEN_PNG
    )


def test_content_matches_project_message() -> None:
    for message in mixed_record():
        for vision in (True, False):
            for shape in replay.SHAPES:
                assert (
                    replay.content(message, vision=vision, shape=shape)
                    == (replay.project_message(message, vision=vision, shape=shape)["content"])
                )

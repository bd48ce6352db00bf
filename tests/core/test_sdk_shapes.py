"""Both shapes validate against the official SDKs' request types (docs/contract.md §2, Shapes)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from pydantic import ValidationError

from conversations.core import replay
from conversations.record.demo import DEMO_PNG, load_demo
from conversations.record.reads.selectors import replay_payload
from tests import sdk_types
from tests.replay_strategies import records
from tests.sdk_types import validate_anthropic, validate_openai, validate_payload

COMBOS = [(vision, shape) for vision in (True, False) for shape in replay.SHAPES]
OPTIONS = pytest.mark.parametrize(("vision", "shape"), COMBOS)


def every_block() -> list[replay.StoredMessage]:
    return [
        replay.StoredMessage("system", (replay.TextBlock("Be careful."),)),
        replay.StoredMessage(
            "user",
            (
                replay.TextBlock("What is on this chart?"),
                replay.ImageBlock("image/png", DEMO_PNG),
                replay.TextBlock("And why?"),
            ),
        ),
        replay.StoredMessage(
            "assistant",
            (
                replay.ReasoningBlock("Look it up."),
                replay.ToolUseBlock.of("toolu_1", "lookup", {"q": "api-7", "n": 1}),
            ),
        ),
        replay.StoredMessage(
            "user", (replay.ToolResultBlock("toolu_1", "lookup", "nothing", is_error=True),)
        ),
        replay.StoredMessage("assistant", ()),
    ]


@OPTIONS
def test_every_block_type_validates_against_the_sdk(vision: bool, shape: str) -> None:
    payload = replay.project(every_block(), vision=vision, shape=shape)
    validate_payload(payload, shape)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records)
def test_generated_records_validate_against_the_sdks(messages) -> None:
    for vision, shape in COMBOS:
        validate_payload(replay.project(messages, vision=vision, shape=shape), shape)


@pytest.mark.django_db
@OPTIONS
def test_demo_conversation_replay_validates_against_the_sdk(vision: bool, shape: str) -> None:
    conversation = load_demo()
    payload = replay_payload(conversation, vision=vision, shape=shape)
    assert len(payload["messages"]) == (6 if shape == "openai" else 5)
    validate_payload(payload, shape)


# The validation really looks inside lazily validated iterables.


def test_lazy_iterables_are_forced_by_the_helper() -> None:
    message = {"role": "user", "content": [{"type": "tool_use"}]}
    lazy = sdk_types.OPENAI_MESSAGE.validate_python(message)  # no error yet: lazy
    with pytest.raises(ValidationError):
        sdk_types.force(lazy)


@pytest.mark.parametrize(
    "part",
    [
        {"type": "tool_use"},
        {"type": "tool_use", "id": "t", "name": "n", "input": {}},
        {"type": "thinking", "thinking": "x", "signature": "s"},
        {"type": "text"},
    ],
)
def test_openai_validation_refuses_a_foreign_part(part: dict) -> None:
    with pytest.raises((ValidationError, AssertionError)):
        validate_openai({"messages": [{"role": "user", "content": [part]}]})


@pytest.mark.parametrize(
    "part",
    [
        {"type": "tool_use"},
        {"type": "tool_use", "id": "t", "name": "n", "input": {}},
        {"type": "tool_result", "tool_use_id": "t", "content": "x"},
        {"type": "thinking", "thinking": "x", "signature": "s"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
    ],
)
def test_anthropic_validation_refuses_a_foreign_part(part: dict) -> None:
    with pytest.raises((ValidationError, AssertionError)):
        validate_anthropic({"messages": [{"role": "user", "content": [part]}]})


def test_openai_validation_refuses_a_tool_role() -> None:
    with pytest.raises((ValidationError, AssertionError)):
        validate_openai({"messages": [{"role": "tool", "content": "x"}]})


def test_anthropic_validation_refuses_a_system_message_in_messages() -> None:
    with pytest.raises(AssertionError):
        validate_anthropic({"messages": [{"role": "system", "content": "x"}]})


def test_anthropic_validation_refuses_a_system_that_is_not_a_string() -> None:
    with pytest.raises(AssertionError):
        validate_anthropic({"system": [{"type": "text", "text": "x"}], "messages": []})


def test_openai_validation_refuses_an_image_in_an_assistant_message() -> None:
    part = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}
    with pytest.raises((ValidationError, AssertionError)):
        validate_openai({"messages": [{"role": "assistant", "content": [part]}]})


def test_valid_parts_pass_the_same_validation() -> None:
    validate_openai(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "x"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                    ],
                }
            ]
        }
    )
    validate_anthropic(
        {
            "system": "s",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "x"},
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                        },
                    ],
                }
            ],
        }
    )

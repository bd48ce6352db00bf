"""Validate replay payloads against the official OpenAI and Anthropic SDK request types.

pydantic validates `Iterable[...]` fields lazily: it returns a ValidatorIterator that checks
items only when iterated. `force` iterates every such field, so a bad part does fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from anthropic.types import ImageBlockParam, MessageParam, TextBlockParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from openai.types.chat import (
    ChatCompletionContentPartImageParam,
    ChatCompletionContentPartTextParam,
    ChatCompletionMessageParam,
)
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import TypeAdapter

OPENAI_MESSAGE = TypeAdapter(ChatCompletionMessageParam)
OPENAI_REQUEST = TypeAdapter(CompletionCreateParamsNonStreaming)
# The parts the openai shape may use: a subset of ChatCompletionContentPartParam.
OPENAI_PART = TypeAdapter(ChatCompletionContentPartTextParam | ChatCompletionContentPartImageParam)
ANTHROPIC_MESSAGE = TypeAdapter(MessageParam)
ANTHROPIC_REQUEST = TypeAdapter(MessageCreateParamsNonStreaming)
ANTHROPIC_PART = TypeAdapter(TextBlockParam | ImageBlockParam)


def force(value: Any) -> Any:
    """The validated value with every lazy iterable run to the end (so it is validated)."""
    if isinstance(value, dict):
        return {key: force(item) for key, item in value.items()}
    if isinstance(value, list | tuple | Iterator):
        return [force(item) for item in value]
    return value


def validate(adapter: TypeAdapter[Any], value: Any) -> Any:
    """Validate eagerly; the result must equal the input (no key dropped or coerced)."""
    validated = force(adapter.validate_python(value))
    assert validated == value, f"{adapter} changed the value: {validated!r} != {value!r}"
    return validated


def validate_openai(payload: Any) -> None:
    """Each message is a ChatCompletionMessageParam, each part a text or image_url part, and
    the payload makes a valid chat completion request."""
    assert list(payload) == ["messages"]
    for message in payload["messages"]:
        validate(OPENAI_MESSAGE, message)
        if isinstance(message["content"], list):
            for part in message["content"]:
                validate(OPENAI_PART, part)
    validate(OPENAI_REQUEST, {"model": "gpt-4o", **payload})


def validate_anthropic(payload: Any) -> None:
    """Each message is a user or assistant MessageParam with text or image parts, `system`
    (when present) is a string, and the payload makes a valid Messages request."""
    assert set(payload) <= {"system", "messages"}
    if "system" in payload:
        assert isinstance(payload["system"], str)
    for message in payload["messages"]:
        assert message["role"] in ("user", "assistant")
        validate(ANTHROPIC_MESSAGE, message)
        if isinstance(message["content"], list):
            for part in message["content"]:
                validate(ANTHROPIC_PART, part)
    validate(ANTHROPIC_REQUEST, {"model": "claude-sonnet-4-5", "max_tokens": 1024, **payload})


def validate_payload(payload: Any, shape: str) -> None:
    if shape == "openai":
        validate_openai(payload)
    else:
        validate_anthropic(payload)

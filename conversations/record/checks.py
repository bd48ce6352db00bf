"""System checks: `manage.py check` fails if a stored block type has no prose form."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register

from conversations.core import replay
from conversations.record.models.conversation import BlockType

# One instance of every block class, to prove that `replay.prose` answers for it.
SAMPLES: dict[str, replay.Block] = {
    "text": replay.TextBlock("x"),
    "tool_use": replay.ToolUseBlock("id", "name", "{}"),
    "tool_result": replay.ToolResultBlock("id", "name", "x"),
    "reasoning": replay.ReasoningBlock("x"),
    "image": replay.ImageBlock("image/png", ""),
}


@register()
def every_block_type_has_prose(
    app_configs: Any = None, block_types: list[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    for kind in block_types if block_types is not None else BlockType.values:
        cls = replay.BLOCK_TYPES.get(kind)
        sample = SAMPLES.get(kind)
        if cls is None or sample is None or type(sample) is not cls:
            errors.append(
                Error(
                    f"Block type {kind!r} has no value class in conversations.core.replay.",
                    hint="Add a frozen dataclass for it to replay.Block and BLOCK_TYPES.",
                    id="conversations.E001",
                )
            )
            continue
        try:
            text = replay.prose(sample)
        except (AssertionError, TypeError) as exc:
            text = None
            reason = f"{type(exc).__name__}: {exc}"
        else:
            reason = f"it gave {text!r}"
        if not isinstance(text, str) or not text:
            errors.append(
                Error(
                    f"Block type {kind!r} has no prose form in replay.prose ({reason}).",
                    hint="Add a case for it to the match in conversations.core.replay.prose.",
                    id="conversations.E002",
                )
            )
    return errors

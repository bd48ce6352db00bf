"""The Markdown export (issue 11): the record, then the projection exactly as `project` gave it."""

from __future__ import annotations

import re

from conversations.core import markdown, replay
from conversations.core.replay import (
    ImageBlock,
    ReasoningBlock,
    StoredMessage,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

PNG = "iVBORw0KGgo="


def record() -> list[markdown.RecordMessage]:
    messages = [
        StoredMessage("system", (TextBlock("Be terse."),)),
        StoredMessage("user", (TextBlock("Weather in Paris?"), ImageBlock("image/png", PNG))),
        StoredMessage(
            "assistant",
            (
                ReasoningBlock("Need the tool."),
                ToolUseBlock.of("toolu_1", "get_weather", {"city": "Paris"}),
            ),
        ),
        StoredMessage(
            "user", (ToolResultBlock("toolu_1", "get_weather", "timeout", is_error=True),)
        ),
    ]
    return [
        markdown.RecordMessage(i, f"2026-01-01T00:00:0{i}+00:00", m) for i, m in enumerate(messages)
    ]


def export(shape: replay.Shape = "openai", vision: bool = True) -> str:
    rows = record()
    payload = replay.project([r.message for r in rows], vision=vision, shape=shape)
    return markdown.conversation_markdown(
        title="Paris", record=rows, payload=payload, shape=shape, vision=vision
    )


def fenced_bodies(text: str) -> list[str]:
    return re.findall(r"^(`{3,})[a-z]*\n(.*?)\n\1$", text, flags=re.S | re.M)


def test_export_has_the_record_then_the_projection() -> None:
    text = export()
    assert text.startswith("# Paris\n\n## Record\n\n### #0 system · 2026-01-01T00:00:00+00:00")
    assert text.index("## Record") < text.index("## Projection (openai, vision on)")
    assert "**Tool use** `get_weather` id `toolu_1`" in text
    assert "**Error** `get_weather` for `toolu_1`" in text
    assert "**Image** `image/png`, about 9 bytes (not embedded)" in text
    assert PNG not in text  # images are named, never pasted


def test_projection_half_prints_what_project_returned() -> None:
    rows = record()
    payload = replay.project([r.message for r in rows], vision=False, shape="anthropic")
    text = export("anthropic", vision=False)
    projection = text[text.index("## Projection") :]
    bodies = [body for _, body in fenced_bodies(projection)]
    assert bodies == [payload["system"], *(m["content"] for m in payload["messages"])]
    assert "### system (the request's `system`)" in projection
    assert "### 1. user" in projection and "### 4. system" not in projection


def test_vision_on_names_image_parts_without_their_data() -> None:
    text = export("openai", vision=True)
    projection = text[text.index("## Projection") :]
    assert "image part `image/png` (not embedded)" in projection
    assert "base64" not in projection


def test_content_with_backticks_cannot_close_its_fence() -> None:
    hostile = "before\n```\n# Injected heading\n````\nafter"
    assert markdown.fence(hostile) == "`````\n" + hostile + "\n`````"
    assert markdown.inline("a`b") == "``a`b``"
    assert markdown.inline("`x") == "`` `x ``"
    assert markdown.inline("two\nlines") == "`two lines`"


def test_an_empty_conversation_says_so() -> None:
    payload = replay.project([], shape="openai")
    text = markdown.conversation_markdown(
        title="  ", record=[], payload=payload, shape="openai", vision=True
    )
    assert text == (
        "# Untitled conversation\n\n## Record\n\nNo messages.\n\n"
        "## Projection (openai, vision on)\n"
    )


def test_the_same_record_gives_the_same_bytes() -> None:
    assert export() == export()

"""The Markdown export (docs/api.md): the record, then the projection exactly as `project` gave
it."""

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


# What a CommonMark renderer makes of the export: recorded and written text stays text.
# The line breaks Python's str.splitlines() knows, of which CommonMark's own are \n, \r\n
# and \r (docs/contract.md §10).
BREAKS = ("\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")
IMG = "<img src=x onerror=alert(1)>"


def hostile(sep: str) -> str:
    return f"before{sep}```{sep}~~~{sep}{sep}{IMG}{sep}> {IMG}{sep}{sep}<div>{sep}after"


def rendered_html_tokens(text: str) -> list[str]:
    """Every raw-HTML token markdown-it-py's CommonMark parser finds in `text`."""
    from markdown_it import MarkdownIt

    found = []
    for token in MarkdownIt("commonmark").parse(text):
        found.extend(t.content for t in [token, *(token.children or [])] if "html" in t.type)
    return found


def test_no_raw_html_escapes_from_a_note_a_block_or_a_title() -> None:
    from datetime import UTC, datetime

    from conversations.core.notes import NoteValue

    when = datetime(2026, 1, 1, tzinfo=UTC)
    for sep in BREAKS:
        evil = hostile(sep)
        note = NoteValue(
            id=1,
            seq=0,
            block=0,
            text=evil,
            labels=("a-b",),
            author=f"eve{sep}{IMG}",
            user_id=None,
            token_label="",
            created_at=when,
            updated_at=when,
        )
        blocks = (
            TextBlock(evil),
            ReasoningBlock(evil),
            ToolUseBlock.of("toolu_1", f"tool{sep}{IMG}", {"q": evil}),
            ToolResultBlock("toolu_1", f"tool{sep}{IMG}", evil),
        )
        rows = [
            markdown.RecordMessage(0, "2026-01-01T00:00:00+00:00", StoredMessage("user", blocks))
        ]
        rows = [markdown.RecordMessage(0, rows[0].created_at, rows[0].message, (note,))]
        payload = replay.project([r.message for r in rows], vision=True, shape="anthropic")
        text = markdown.conversation_markdown(
            title=f"{IMG}{sep}# {IMG} [x](javascript:alert(1)) &lt;b&gt;",
            record=rows,
            payload=payload,
            shape="anthropic",
            vision=True,
        )
        assert rendered_html_tokens(text) == [], repr(sep)
        from markdown_it import MarkdownIt

        html = MarkdownIt("commonmark").render(text)
        assert "<img" not in html and "<div" not in html and "href=" not in html, repr(sep)


def test_every_line_of_a_note_stays_in_its_quote_and_fence() -> None:
    from datetime import UTC, datetime

    from conversations.core.notes import NoteValue

    when = datetime(2026, 1, 1, tzinfo=UTC)
    for sep in BREAKS:
        note = NoteValue(
            id=1,
            seq=0,
            block=None,
            text=f"one{sep}two{sep}three",
            labels=(),
            author="eve",
            user_id=None,
            token_label="",
            created_at=when,
            updated_at=when,
        )
        quoted = markdown.note_markdown(note)
        lines = quoted.split("\n")
        assert all(line.startswith(">") for line in lines), repr(sep)
        assert lines[-4:] == ["> one", "> two", "> three", "> ```"], repr(sep)

"""A conversation as Markdown: the record, message by message, then the projection.

Pure (no Django). The projection half prints the payload `replay.project` returned, never a
re-derivation of it. Every stored or projected text goes in a code fence longer than any
run of backticks inside it, so recorded content cannot close the fence or become markup;
labels are inline code, titles escaped. Every line break is written as a line feed
(`lines`), so a CR or a Unicode separator cannot end a quote or fence the export put it in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import assert_never

from conversations.core.blocks import (
    Block,
    ImageBlock,
    ReasoningBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    label,
)
from conversations.core.notes import NoteValue
from conversations.core.replay import (
    ImagePart,
    Payload,
    Shape,
    StoredMessage,
    TextPart,
    WireMessage,
)

_BACKTICKS = re.compile(r"`+")
# Every line break str.splitlines() knows: CommonMark's own (\r\n, \r; docs/contract.md
# §10) and the ones other readers and editors break at, so all of them see the same lines.
_LINE_BREAKS = re.compile("\r\n|[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
# The separators json.dumps leaves unescaped (it escapes every control character below 0x20).
_JSON_BREAKS = re.compile("[\x85\u2028\u2029]")
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


@dataclass(frozen=True, slots=True)
class RecordMessage:
    """One stored message with what the record says about it besides its blocks."""

    seq: int
    created_at: str  # ISO 8601, UTC
    message: StoredMessage
    # The operators' notes on it (docs/contract.md §10): after it, never in the projection.
    notes: tuple[NoteValue, ...] = ()


def lines(text: str) -> str:
    """`text` with each of its line breaks written as a line feed."""
    return _LINE_BREAKS.sub("\n", text)


def escaped(text: str) -> str:
    """`text` on one line with every ASCII punctuation character backslash-escaped: read as
    CommonMark, it is the text itself, never a tag, link, entity or emphasis."""
    return _PUNCTUATION.sub(r"\\\1", " ".join(text.split()))


def json_text(value: object) -> str:
    """`value` as indented JSON whose strings hold no line break (each escaped as \\uXXXX)."""
    pretty = json.dumps(value, indent=2, ensure_ascii=False)
    return _JSON_BREAKS.sub(lambda m: f"\\u{ord(m[0]):04x}", pretty)


def fence(text: str, info: str = "") -> str:
    """`text` in a backtick fence longer than any backtick run in it (at least three)."""
    text = lines(text)
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    ticks = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") else text + "\n"
    return f"{ticks}{info}\n{body}{ticks}"


def inline(text: str) -> str:
    """A short label as inline code that its own backticks or newlines cannot break."""
    flat = " ".join(text.split())
    longest = max((len(run) for run in _BACKTICKS.findall(flat)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") or not flat else ""
    return f"{ticks}{pad}{flat}{pad}{ticks}"


def block_markdown(block: Block) -> str:
    """One stored block: its label, then its content fenced (images by type and size only)."""
    head = f"**{label(block)}**"
    match block:
        case TextBlock():
            return f"{head}\n\n{fence(block.text)}"
        case ReasoningBlock():
            return f"{head}\n\n{fence(block.text)}"
        case ToolUseBlock():
            pretty = json_text(json.loads(block.input_json))
            return f"{head} {inline(block.name)} id {inline(block.id)}\n\n{fence(pretty, 'json')}"
        case ToolResultBlock():
            return f"{head} {inline(block.name)} for {inline(block.tool_use_id)}\n\n" + fence(
                block.content
            )
        case ImageBlock():
            size = len(block.data) * 3 // 4  # base64 → bytes, near enough to name a size
            return f"{head} {inline(block.media_type)}, about {size:,} bytes (not embedded)"
        case _:
            assert_never(block)


def note_markdown(note: NoteValue) -> str:
    """A note as a blockquote starting `> **Note**`: who wrote it, on which block, its
    labels, then its text fenced, every line quoted (the text cannot leave the quote)."""
    about = [f"by {inline(note.author)}"]
    if note.block is not None:
        about.append(f"on block {note.block}")
    if note.labels:
        about.append("labels " + ", ".join(inline(label) for label in note.labels))
    about.append(note.created_at.isoformat(timespec="seconds"))
    # `fence` writes every break as a line feed: split there, no line is left unquoted.
    quoted = [f"**Note** {' · '.join(about)}", "", *fence(note.text).split("\n")]
    return "\n".join(f"> {line}" if line else ">" for line in quoted)


def _part_markdown(part: TextPart | ImagePart) -> str:
    if part["type"] == "text":
        return f"text part\n\n{fence(part['text'])}"
    # An image part: name its type, never paste its data.
    if part["type"] == "image":
        media = part["source"]["media_type"]
    else:
        url = part["image_url"]["url"]
        media = url[5 : url.find(";")] if url.startswith("data:") and ";" in url else "image"
    return f"image part {inline(media)} (not embedded)"


def _wire_markdown(index: int, message: WireMessage) -> str:
    content = message["content"]
    out = [f"### {index + 1}. {message['role']}"]
    if isinstance(content, str):
        out.append(fence(content))
    else:
        out.extend(_part_markdown(part) for part in content)
    return "\n\n".join(out)


def conversation_markdown(
    *,
    title: str,
    record: Sequence[RecordMessage],
    payload: Payload,
    shape: Shape,
    vision: bool,
) -> str:
    """The whole export: a title, the record's messages, then `payload` (the projection
    `replay.project` gave for these options) wire message by wire message."""
    system = payload.get("system")
    return "".join(
        markdown_pieces(
            title=title,
            record=record,
            system=system if isinstance(system, str) else None,
            wire=payload["messages"],
            shape=shape,
            vision=vision,
        )
    )


def markdown_pieces(
    *,
    title: str,
    record: Iterable[RecordMessage],
    system: str | None,
    wire: Iterable[WireMessage],
    shape: Shape,
    vision: bool,
) -> Iterator[str]:
    """`conversation_markdown` in pieces, each message's at a time: `record` and `wire` are
    consumed lazily, so a reader that streams them holds one message, not the record.
    `system` is the projection's `system` (anthropic shape), None when it has none."""
    heading = escaped(title) or "Untitled conversation"
    yield f"# {heading}\n\n## Record"
    empty = True
    for m in record:
        empty = False
        yield "\n\n" + record_message_markdown(m)
    if empty:
        yield "\n\nNo messages."
    yield f"\n\n## Projection ({shape}, vision {'on' if vision else 'off'})"
    if system is not None:
        yield f"\n\n### system (the request's `system`)\n\n{fence(system)}"
    for i, wm in enumerate(wire):
        yield "\n\n" + _wire_markdown(i, wm)
    yield "\n"


def record_message_markdown(m: RecordMessage) -> str:
    """One stored message of the record half: its heading, its blocks, then the operators'
    notes on it (docs/contract.md §10)."""
    out = [f"### #{m.seq} {m.message.role} · {m.created_at}"]
    out.extend(block_markdown(b) for b in m.message.blocks)
    if not m.message.blocks:
        out.append("No blocks.")
    out.extend(note_markdown(note) for note in m.notes)
    return "\n\n".join(out)

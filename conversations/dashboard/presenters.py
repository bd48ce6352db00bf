"""What the dashboard templates print, computed in Python (templates loop and print).

The projection side of every message is `replay.project_message`'s output, laid out
as it is: a string stays one string, a list stays its parts in order.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, assert_never
from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone
from django.utils.timesince import timesince

from conversations.core import blocks, replay
from conversations.dashboard import sockets
from conversations.record import selectors
from conversations.record.models import Conversation

FOLD_LINES = 12
FOLD_CHARS = 1500


def folds(text: str) -> bool:
    return len(text) > FOLD_CHARS or text.count("\n") >= FOLD_LINES


@dataclass(frozen=True)
class BlockView:
    seq: int
    type: str
    label: str
    text: str = ""
    name: str = ""
    call_id: str = ""
    is_error: bool = False
    image_url: str = ""
    media_type: str = ""
    folded: bool = False


@dataclass(frozen=True)
class PartView:
    kind: str  # "text" or "image"
    text: str = ""
    image_url: str = ""
    media_type: str = ""
    folded: bool = False


@dataclass(frozen=True)
class MessageView:
    seq: int
    role: str
    created_at: datetime
    blocks: list[BlockView]
    wire_role: str
    lifted: bool  # anthropic shape: a system message crosses in the request's `system`
    text: str | None  # the wire content when it is one string
    parts: list[PartView] = field(default_factory=list)
    folded: bool = False
    provenance: str = ""  # model, tokens in/out, stop reason, source time (imports)
    boundary: str = ""  # a compaction boundary before this message, described

    @property
    def anchor(self) -> str:
        return f"m-{self.seq}"

    @property
    def block_count(self) -> int:
        return len(self.blocks)


@dataclass(frozen=True)
class ConversationRow:
    conversation: Conversation
    url: str
    relative: str
    exact: str
    unanswered: bool


def image_url(conversation_id: object, message_seq: int, block_seq: int) -> str:
    return reverse("block-image", args=[str(conversation_id), message_seq, block_seq])


def block_view(conversation_id: object, message_seq: int, row: selectors.BlockRow) -> BlockView:
    value = selectors.block_value(row)
    kind, label = blocks.kind_of(value), blocks.label(value)
    match value:
        case replay.ToolUseBlock():
            pretty = json.dumps(value.input, indent=2, ensure_ascii=False)
            return BlockView(
                row.seq, kind, label, pretty, value.name, value.id, folded=folds(pretty)
            )
        case replay.ToolResultBlock():
            return BlockView(
                row.seq, kind, label, value.content, value.name, value.tool_use_id,
                value.is_error, folded=folds(value.content),
            )  # fmt: skip
        case replay.ImageBlock():
            url = image_url(conversation_id, message_seq, row.seq)
            return BlockView(row.seq, kind, label, image_url=url, media_type=value.media_type)
        case replay.TextBlock() | replay.ReasoningBlock():
            return BlockView(row.seq, kind, label, value.text, folded=folds(value.text))
        case _:
            assert_never(value)


def message_views(
    conversation: Conversation,
    rows: Sequence[selectors.MessageRow],
    *,
    vision: bool,
    shape: replay.Shape,
) -> list[MessageView]:
    views = []
    for row, stored in zip(rows, selectors.stored_messages(rows), strict=True):
        wire = replay.project_message(stored, vision=vision, shape=shape)
        content = wire["content"]
        parts: list[PartView] = []
        if not isinstance(content, str):
            images = iter([b for b in row.blocks if b.type == "image"])
            for part in content:
                if part["type"] == "text":
                    parts.append(PartView("text", part["text"], folded=folds(part["text"])))
                else:
                    image = next(images)
                    url = image_url(conversation.id, row.seq, image.seq)
                    parts.append(PartView("image", image_url=url, media_type=image.media_type))
        views.append(
            MessageView(
                seq=row.seq,
                role=row.role,
                created_at=row.created_at,
                blocks=[block_view(conversation.id, row.seq, b) for b in row.blocks],
                wire_role="system" if row.role == "system" else wire["role"],
                lifted=shape == "anthropic" and row.role == "system",
                text=content if isinstance(content, str) else None,
                parts=parts,
                folded=isinstance(content, str) and folds(content),
                provenance=provenance(row.metadata),
                boundary=boundary(row.metadata),
            )
        )
    return views


def provenance(metadata: dict[str, Any]) -> str:
    """A message's source provenance in one line: model, tokens in/out, stop reason, time."""
    usage = metadata.get("usage") if isinstance(metadata.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    tokens_in = usage.get("input_tokens", usage.get("prompt_tokens"))
    tokens_out = usage.get("output_tokens", usage.get("completion_tokens"))
    tokens_in = metadata.get("gen_ai.usage.input_tokens", tokens_in)
    tokens_out = metadata.get("gen_ai.usage.output_tokens", tokens_out)
    model = (
        metadata.get("model")
        or metadata.get("gen_ai.response.model")
        or metadata.get("gen_ai.request.model")
    )
    stop = metadata.get("stop_reason") or metadata.get("finish_reason")
    parts = []
    if model:
        parts.append(str(model))
    if tokens_in is not None or tokens_out is not None:
        parts.append(f"tokens in {tokens_in if tokens_in is not None else '?'} / out "
                     f"{tokens_out if tokens_out is not None else '?'}")  # fmt: skip
    if stop:
        parts.append(f"stop: {stop}")
    if metadata.get("timestamp"):
        parts.append(f"source time {metadata['timestamp']}")
    return " · ".join(parts)


def boundary(metadata: dict[str, Any]) -> str:
    marker = metadata.get("compact_boundary")
    if not isinstance(marker, dict):
        return ""
    words = ["Compacted here"]
    if marker.get("trigger"):
        words.append(f"({marker['trigger']})")
    if marker.get("preTokens"):
        words.append(f"from {marker['preTokens']} tokens")
    return " ".join(words) + ": the model receives what follows"


GAPS_SHOWN = 50


@dataclass(frozen=True)
class GapView:
    text: str
    url: str  # the deep link to the marked block's message, when it has one


def import_view(conversation: Conversation) -> dict[str, Any] | None:
    """What an imported conversation's page says about its source: the format and file,
    the gaps (the first GAPS_SHOWN, with the total), and conversations linked to it."""
    metadata = conversation.metadata if isinstance(conversation.metadata, dict) else {}
    source = metadata.get("import")
    if not isinstance(source, dict):
        return None
    gaps = metadata.get("gaps") if isinstance(metadata.get("gaps"), list) else []
    assert isinstance(gaps, list)
    views = []
    for gap in gaps[:GAPS_SHOWN]:
        if not isinstance(gap, dict):
            continue
        text = (
            f"{gap.get('kind')}: {gap.get('detail')}" if gap.get("detail") else str(gap.get("kind"))
        )
        if gap.get("where"):
            text += f" ({gap['where']})"
        seq = gap.get("message")
        views.append(GapView(text, f"#m-{seq}" if isinstance(seq, int) else ""))
    linked_ids = [str(i) for i in (metadata.get("linked") or [])][:GAPS_SHOWN]
    parent = metadata.get("linked_from")
    links = [{"url": reverse("conversation", args=[i]), "label": "sidechain"} for i in linked_ids]
    if isinstance(parent, str):
        links.insert(
            0, {"url": reverse("conversation", args=[parent]), "label": "main conversation"}
        )
    return {
        "format": source.get("format"),
        "file_name": source.get("file_name"),
        "gaps": views,
        "gaps_total": len(gaps),
        "gaps_more": max(0, len(gaps) - GAPS_SHOWN),
        "partial_payload": source.get("format") == "claude-code",
        "links": links,
    }


def query(**params: Any) -> str:
    return "?" + urlencode(params)


def toggle(label: str, path: str, options: dict[str, object], active: bool) -> dict[str, object]:
    return {"label": label, "url": path + query(**options), "active": active}


def conversation_page(
    conversation: Conversation,
    *,
    start: int,
    stop: int | None,
    vision: bool,
    shape: replay.Shape,
) -> dict[str, Any]:
    rows = selectors.message_rows(conversation, start=start, stop=stop)
    detail = reverse("conversation", args=[str(conversation.id)])
    options: dict[str, object] = {"vision": int(vision), "shape": shape}
    first = rows[0].seq if rows else start
    return {
        "conversation": conversation,
        "messages": message_views(conversation, rows, vision=vision, shape=shape),
        "vision": vision,
        "shape": shape,
        "total_messages": conversation.message_count,
        "total_blocks": selectors.block_total(conversation),
        "self_url": detail + query(**options),
        "socket_url": sockets.conversation_socket_url(conversation.id, vision=vision, shape=shape),
        "download_url": reverse("replay-download", args=[str(conversation.id)]) + query(**options),
        "earlier_url": (
            reverse("earlier-messages", args=[str(conversation.id)])
            + query(before=first, **options)
            if first > 0
            else ""
        ),
        "first_seq": first,
        "imported": import_view(conversation),
        "toggles": [
            toggle("Vision on", detail, options | {"vision": 1}, vision),
            toggle("Vision off", detail, options | {"vision": 0}, not vision),
            toggle("OpenAI", detail, options | {"shape": "openai"}, shape == "openai"),
            toggle("Anthropic", detail, options | {"shape": "anthropic"}, shape == "anthropic"),
        ],
    }


def conversation_rows(conversations: list[Conversation]) -> list[ConversationRow]:
    """List rows, with whether each conversation's last message ends in unanswered tool calls."""
    unanswered = selectors.unanswered_tool_calls(conversations)
    now = timezone.now()
    return [
        ConversationRow(
            conversation=c,
            url=c.get_absolute_url(),
            relative=f"{timesince(c.updated_at, now).split(',')[0]} ago",
            exact=c.updated_at.isoformat(timespec="seconds"),
            unanswered=c.id in unanswered,
        )
        for c in conversations
    ]

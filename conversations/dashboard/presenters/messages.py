"""Each message beside its projection, bounded: the record side's blocks and the wire side's
text or parts, each side cut to `SIDE_BYTES` (and, on a page past `PAGE_BYTES`, to one level),
and the window's tool rounds whose other half is outside it.

The projection side of every message is `replay.project_message`'s output, laid out as it
is: a string stays one string, a list stays its parts in order.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import assert_never, cast

from django.urls import reverse

from conversations.core import blocks, replay
from conversations.core.counting import compact, preview
from conversations.core.counting import next_request as nr
from conversations.core.notes import MessageNotes
from conversations.dashboard.presenters.metadata import (
    MetaItem,
    boundary,
    message_meta,
    source_time,
)
from conversations.dashboard.presenters.notes import NONE, NotesView, notes_view
from conversations.dashboard.presenters.pressure import TokensView
from conversations.dashboard.presenters.texts import (
    BLOCK_MARKUP,
    SIDE_BYTES,
    Budget,
    Truncation,
    escaped_bytes,
    fold_label,
    folds,
    input_text,
    size_note,
    water_level,
)
from conversations.record.reads.rows import (
    PREVIEW_CHARS,
    BlockRow,
    Pairs,
    PreviewBlock,
    PreviewRow,
    block_value,
)
from conversations.web.links import (
    block_text_url,
    image_url,
    message_blocks_url,
    message_projection_url,
    message_record_url,
    wire_text_url,
)
from conversations.web.protocols import ConversationLike


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
    truncated: Truncation | None = None

    @property
    def size_note(self) -> str:
        return size_note(self.text, self.truncated)

    @property
    def fold_label(self) -> str:
        return fold_label(self.text, self.truncated)


@dataclass(frozen=True)
class PartView:
    kind: str  # "text" or "image"
    text: str = ""
    image_url: str = ""
    media_type: str = ""
    folded: bool = False
    truncated: Truncation | None = None

    @property
    def fold_label(self) -> str:
        return fold_label(self.text, self.truncated)


@dataclass(frozen=True)
class CompactionView:
    """A stored compaction boundary's figures (docs/contract.md §7 Compactions): what it
    left out, what the provider measured after it, the summary, and the diff of the
    request before it against the one after it."""

    text: str
    diff_url: str
    summary_seq: int | None


def compaction_views(
    conversation_id: object, compactions: Sequence[nr.Compaction], dropped: Mapping[int, int]
) -> dict[int, CompactionView]:
    """By the seq each boundary precedes; `dropped`: the pressure's running total before
    each boundary."""
    views = {}
    for c in compactions:
        said = [f"left out {c.seq:,} earlier messages"]
        if c.seq > 0 and c.seq in dropped:
            said[0] += f" (≈{dropped[c.seq]:,} tokens)"
        if c.post_tokens is not None:
            said.append(f"measured {c.post_tokens:,} tokens of input at #{c.post_seq}")
        diff = reverse("conversation-diff", args=[str(conversation_id)])
        views[c.seq] = CompactionView(" · ".join(said), diff + "?b_compact=boundary", c.summary_seq)
    return views


@dataclass(frozen=True)
class MessageView:
    seq: int
    role: str
    created_at: datetime
    blocks: list[BlockView]
    wire_role: str
    lifted: bool  # anthropic shape: a system message crosses in the request's `system`
    text: str | None  # the wire content when it is one string (perhaps only its start)
    parts: list[PartView] = field(default_factory=list)
    folded: bool = False
    meta: list[MetaItem] = field(default_factory=list)  # model, tokens, stop, latency
    source_time: datetime | None = None  # the source's own timestamp (imports), parsed
    source_time_text: str = ""  # … or as stored, when it is not an ISO 8601 time
    boundary: str = ""  # a compaction boundary before this message, described
    compaction: CompactionView | None = None  # … with the figures around it
    not_sent: bool = False  # before the last stored boundary: the next request leaves it out
    tokens: TokensView | None = None
    block_count: int = 0  # stored blocks: the message's live position
    hidden_blocks: int = 0  # stored blocks past the ones shown
    truncated: Truncation | None = None  # of `text`
    record_url: str = ""  # this message as the API's record has it (operators only)
    more_blocks_url: str = ""  # the next fragment of the blocks not shown
    projection_url: str = ""  # this message's wire message for the page's toggles
    notes: NotesView | None = None  # the operators' notes beside the record (contract §10)

    @property
    def anchor(self) -> str:
        return f"m-{self.seq}"

    @property
    def fold_label(self) -> str:
        return fold_label(self.text or "", self.truncated)


def block_full_text(row: BlockRow) -> str:
    """The whole text a block view shows the start of ("" for an image)."""
    value = block_value(row)
    match value:
        case replay.ToolUseBlock():
            return input_text(value.input_json)
        case replay.ToolResultBlock():
            return value.content
        case replay.TextBlock() | replay.ReasoningBlock():
            return value.text
        case replay.ImageBlock():
            return ""
        case _:
            assert_never(value)


def record_blocks(
    conversation_id: object, row: PreviewRow, record: Budget | None = None
) -> list[BlockView]:
    """The record side's blocks of `row` (its `blocks`, as read): as many as `record` (one
    side's `SIDE_BYTES` unless given) holds."""
    record = record if record is not None else Budget()
    views = []
    for block in row.blocks:
        if record.left <= 0:
            break
        views.append(block_view(conversation_id, row.seq, block, record))
    return views


@dataclass(frozen=True)
class MoreBlocks:
    """The next blocks of a message's record side (from block `start`), and what is left."""

    seq: int
    blocks: list[BlockView]
    hidden_blocks: int
    more_blocks_url: str


def more_blocks(conversation_id: object, row: PreviewRow, start: int) -> MoreBlocks:
    """The record side's blocks of `row` read from block `start` (its fragment on demand),
    bounded as a message's are."""
    views = record_blocks(conversation_id, row)
    stop = start + len(views)
    url = message_blocks_url(conversation_id, row.seq, stop) if stop < row.block_count else ""
    return MoreBlocks(row.seq, views, row.block_count - stop, url)


def without_images(views: Sequence[BlockView]) -> list[BlockView]:
    """The block views with no image URL (a share link without images)."""
    return [dataclasses.replace(b, image_url="") if b.type == "image" else b for b in views]


def block_view(
    conversation_id: object, message_seq: int, row: PreviewBlock, budget: Budget
) -> BlockView:
    """A block's record side: a text past 64 K characters, 400 lines or the budget shows
    its start."""
    value = block_value(row)
    kind, label = blocks.kind_of(value), blocks.label(value)
    budget.spend(BLOCK_MARKUP + 2 * (escaped_bytes(row.name) + escaped_bytes(row.call_id)))
    rest = block_text_url(conversation_id, message_seq, row.seq)

    def shown(start: str, size: int) -> tuple[str, Truncation | None]:
        text = budget.take(preview.cut(start))
        return text, (Truncation(size, rest) if preview.size(text) < size else None)

    match value:
        case replay.ToolUseBlock():
            if len(value.input_json) < PREVIEW_CHARS:  # loaded whole
                pretty = input_text(value.input_json)
                text, cut = shown(pretty, preview.size(pretty))
            else:  # only the start is loaded: show it as stored
                text, cut = shown(value.input_json, row.input_size)
            return BlockView(
                seq=row.seq,
                type=kind,
                label=label,
                text=text,
                name=value.name,
                call_id=value.id,
                folded=folds(text),
                truncated=cut,
            )
        case replay.ToolResultBlock():
            text, cut = shown(value.content, row.text_size)
            return BlockView(
                seq=row.seq,
                type=kind,
                label=label,
                text=text,
                name=value.name,
                call_id=value.tool_use_id,
                is_error=value.is_error,
                folded=folds(text),
                truncated=cut,
            )
        case replay.ImageBlock():
            url = image_url(conversation_id, message_seq, row.seq)
            return BlockView(row.seq, kind, label, image_url=url, media_type=value.media_type)
        case replay.TextBlock() | replay.ReasoningBlock():
            text, cut = shown(value.text, row.text_size)
            return BlockView(row.seq, kind, label, text, folded=folds(text), truncated=cut)
        case _:
            assert_never(value)


def _cut_values(
    row: PreviewRow, shown: int, marks: str
) -> tuple[list[replay.Block], dict[str, int]]:
    """The shown blocks as values, each cut one followed by a unique mark.

    The projection of these values is the true projection up to the first mark, so a page
    can show that much of it; mark → characters missing there. A last mark stands for the
    blocks not loaded at all.
    """
    values: list[replay.Block] = []
    missing: dict[str, int] = {}
    for i, block in enumerate(row.blocks[:shown]):
        value = block_value(block)
        mark = f"{marks}{i}\ue001"
        match value:
            case replay.TextBlock() | replay.ReasoningBlock():
                if block.text_size > preview.size(block.text):
                    missing[mark] = block.text_size - preview.size(block.text)
                    value = dataclasses.replace(value, text=block.text + mark)
            case replay.ToolResultBlock():
                if block.text_size > preview.size(block.text):
                    missing[mark] = block.text_size - preview.size(block.text)
                    value = dataclasses.replace(value, content=block.text + mark)
            case replay.ToolUseBlock():
                if block.input_size > preview.size(block.input_json):
                    missing[mark] = block.input_size - preview.size(block.input_json)
                    value = dataclasses.replace(value, input_json=block.input_json + mark)
            case replay.ImageBlock():
                pass
            case _:
                assert_never(value)
        values.append(value)
    if shown < row.block_count:
        mark = f"{marks}rest\ue001"
        missing[mark] = 0
        values.append(replay.TextBlock(mark))
    return values, missing


def _wire_shown(
    text: str, missing: dict[str, int], budget: Budget, rest: str
) -> tuple[str, Truncation | None]:
    """The start of a wire text to show (up to its first mark, 64 KB, 400 lines, the budget)."""
    marks = [(text.find(mark), mark, n) for mark, n in missing.items() if mark in text]
    size = preview.size(text) + sum(n - preview.size(mark) for _, mark, n in marks)
    first = min((at for at, _, _ in marks), default=len(text))
    start = budget.take(preview.cut(text[:first]))
    return start, (Truncation(size, rest) if len(start) < len(text) or marks else None)


def message_views(
    conversation: ConversationLike,
    rows: Sequence[PreviewRow],
    *,
    vision: bool,
    shape: replay.Shape,
    margin: dict[int, TokensView] | None = None,
    compactions: Mapping[int, CompactionView] | None = None,
    page_bytes: int | None = None,
) -> list[MessageView]:
    """Each message beside its projection, bounded: a side shows at most `SIDE_BYTES`, and
    with `page_bytes` (a page's window) all sides together about that many: past it, every
    side is cut to one level, so the longest show a shorter start and the short ones stay whole."""

    def views_at(side_bytes: int) -> tuple[list[MessageView], list[int]]:
        return _message_views(
            conversation,
            rows,
            side_bytes=side_bytes,
            vision=vision,
            shape=shape,
            margin=margin,
            compactions=compactions,
        )

    views, spent = views_at(SIDE_BYTES)
    if page_bytes is None or sum(spent) <= page_bytes:
        return views  # as a live frame shows them
    return views_at(water_level(spent, page_bytes))[0]


def _message_views(
    conversation: ConversationLike,
    rows: Sequence[PreviewRow],
    *,
    side_bytes: int,
    vision: bool,
    shape: replay.Shape,
    margin: dict[int, TokensView] | None,
    compactions: Mapping[int, CompactionView] | None,
) -> tuple[list[MessageView], list[int]]:
    """The views with each side cut to `side_bytes`, and the bytes each side spent."""
    views = []
    spent: list[int] = []
    marks = f"\ue000{secrets.token_hex(8)}:"
    # After a compaction the request starts at the last boundary (docs/contract.md §7).
    sent_from = max(compact.boundary_seqs(conversation.metadata), default=0)
    for row in rows:
        record = Budget(side_bytes)
        block_views = record_blocks(conversation.id, row, record)
        values, missing = _cut_values(row, len(block_views), marks)
        stored = replay.StoredMessage(cast(replay.Role, row.role), tuple(values))
        wire = replay.project_message(stored, vision=vision, shape=shape)
        content = wire["content"]
        projection = Budget(side_bytes)
        parts: list[PartView] = []
        text: str | None = None
        cut: Truncation | None = None
        if isinstance(content, str):
            rest = wire_text_url(conversation.id, row.seq, vision=vision, shape=shape, part=None)
            text, cut = _wire_shown(content, missing, projection, rest)
        else:
            images = iter([b for b in row.blocks[: len(block_views)] if b.type == "image"])
            for index, part in enumerate(content):
                if part["type"] == "text":
                    rest = wire_text_url(
                        conversation.id, row.seq, vision=vision, shape=shape, part=index
                    )
                    shown, part_cut = _wire_shown(part["text"], missing, projection, rest)
                    parts.append(PartView("text", shown, folded=folds(shown), truncated=part_cut))
                    if part_cut is not None:
                        break  # what follows a cut part is past the first mark
                else:
                    image = next(images)
                    url = image_url(conversation.id, row.seq, image.seq)
                    parts.append(PartView("image", image_url=url, media_type=image.media_type))
        spent += [record.spent, projection.spent]
        margin_view = (margin or {}).get(row.seq)
        stamp, stamp_text = source_time(row.metadata)
        views.append(
            MessageView(
                seq=row.seq,
                role=row.role,
                created_at=row.created_at,
                blocks=block_views,
                wire_role="system" if row.role == "system" else wire["role"],
                lifted=shape == "anthropic" and row.role == "system",
                text=text,
                parts=parts,
                meta=message_meta(
                    row.metadata, usage_shown=margin_view is not None and bool(margin_view.usage)
                ),
                source_time=stamp,
                source_time_text=stamp_text,
                boundary=boundary(row.metadata),
                compaction=(compactions or {}).get(row.seq),
                not_sent=row.seq < sent_from,
                tokens=margin_view,
                folded=text is not None and folds(text),
                block_count=row.block_count,
                hidden_blocks=row.block_count - len(block_views),
                truncated=cut,
                record_url=message_record_url(conversation.id, row.seq),
                more_blocks_url=message_blocks_url(conversation.id, row.seq, len(block_views))
                if len(block_views) < row.block_count
                else "",
                projection_url=message_projection_url(
                    conversation.id, row.seq, vision=vision, shape=shape
                ),
            )
        )
    return views, spent


@dataclass(frozen=True)
class ToolPairsView:
    """JSON objects (call id → message seq) for the window partial's data attributes:
    where the results of its unanswered-here calls are, and the calls of its results."""

    results: str
    calls: str


def tool_pairs_view(pairs: Pairs) -> ToolPairsView | None:
    """The window's tool rounds that it holds only one half of, as the record resolved
    them (`finder_reads.tool_pairs`); None when there are none to tell."""
    if not pairs.results and not pairs.calls:
        return None
    return ToolPairsView(json.dumps(pairs.results), json.dumps(pairs.calls))


def with_notes(
    conversation_id: uuid.UUID | str,
    views: Sequence[MessageView],
    notes: Mapping[int, MessageNotes],
    *,
    readonly: bool = False,
) -> list[MessageView]:
    """The message views with their notes (`notes`: message seq → its notes)."""
    return [
        dataclasses.replace(
            view,
            notes=notes_view(
                conversation_id,
                view.seq,
                view.block_count,
                notes.get(view.seq, NONE),
                readonly=readonly,
            ),
        )
        for view in views
    ]


def read_only(views: Sequence[MessageView], shown: bool) -> list[MessageView]:
    """A share link's views: the notes without controls when the link shows them, else none."""
    return [
        dataclasses.replace(
            view,
            notes=dataclasses.replace(view.notes, add_url="") if shown and view.notes else None,
        )
        for view in views
    ]

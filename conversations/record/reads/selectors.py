"""Reads that shape the record for its consumers, in a fixed number of queries.

`stored_messages` is the only bridge from the database to the pure projection;
`shapes.record_data` is the API's view of the same rows. The list's and the admin's
search reads are `search_reads`'.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any, cast

import orjson
from django.db.models import (
    Count,
    Exists,
    Func,
    IntegerField,
    OuterRef,
    QuerySet,
    Sum,
    TextField,
    Value,
)
from django.db.models.functions import Substr

from conversations.core import live_sources, markdown, replay
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.models.notes import Note
from conversations.record.notes import reads as note_reads
from conversations.record.reads import compiled

# The row types and pure functions over them, as they were always read from here.
from conversations.record.reads.rows import (
    PREVIEW_CHARS,
    BlockRow,
    MessageRow,
    PreviewBlock,
    PreviewRow,
    shown_time,
    stored_messages,
)

BLOCK_COLUMNS = (
    "message_id",
    "seq",
    "type",
    "text",
    "call_id",
    "name",
    "input_json",
    "is_error",
    "media_type",
    "data",
    "origin",
    "width",
    "height",
)


def conversation_get(conversation_id: str | uuid.UUID) -> Conversation | None:
    try:
        pk = uuid.UUID(str(conversation_id))
    except ValueError:
        return None
    return Conversation.objects.filter(pk=pk).first()


def conversation_noted(conversation_id: str | uuid.UUID) -> tuple[Conversation, bool] | None:
    """The conversation's row, and whether any note is on it (a live frame reads its
    messages' notes only then): one query."""
    try:
        pk = uuid.UUID(str(conversation_id))
    except ValueError:
        return None
    found = _conversation_noted.models(pk)
    return (found[0], bool(cast(Any, found[0]).noted)) if found else None


@compiled.read(Conversation, uuid.UUID)
def _conversation_noted(pk: uuid.UUID) -> QuerySet[Conversation, Any]:
    noted = Exists(Note.objects.filter(conversation_id=OuterRef("pk")))
    return Conversation.objects.filter(pk=pk).annotate(noted=noted)


def conversation_ref(conversation_id: str | uuid.UUID) -> Conversation | None:
    """The conversation `conversation_id` names, not read (None for a string that names
    none): for a write that finds out itself whether its row exists. Only its id is set;
    every other field holds its default."""
    try:
        pk = uuid.UUID(str(conversation_id))
    except ValueError:
        return None
    return Conversation(pk=pk)


def message_get(conversation: Conversation, seq: int) -> Message | None:
    return Message.objects.filter(conversation=conversation, seq=seq).first()


def message_rows(
    conversation: Conversation,
    *,
    start: int = 0,
    stop: int | None = None,
    image_data: bool = True,
) -> list[MessageRow]:
    """Messages with seq in [start, stop) (all by default) with their blocks: two queries,
    one snapshot.

    Whatever commits between the two queries is left out: a message past the last one read,
    and a block past its message's count as read (blocks are only ever appended, with the
    count in the same transaction), so each message carries exactly `block_count` blocks.
    `image_data=False` leaves images' base64 unread (empty), for readers that need only
    their size, such as token counts.
    """
    rows, counts, blocks = _rows_and_blocks(conversation, start, stop, image_data)
    for values in blocks:
        block = BlockRow._make(values)
        if block.seq < counts.get(block.message_id, 0):
            rows[block.message_id].blocks.append(block)
    return list(rows.values())


STREAMED_BYTES = 4 * 1024 * 1024  # block text a streamed read holds at once (about)
STREAMED_BLOCKS = 500  # … and blocks


def message_rows_streamed(
    conversation: Conversation,
    *,
    start: int = 0,
    stop: int | None = None,
    image_data: bool = False,
) -> Iterator[MessageRow]:
    """`message_rows(..., image_data=image_data)` one message at a time, in seq order: a
    reader done with each message (counting, serialising) holds about STREAMED_BYTES of
    texts, not the range's.

    The blocks' sizes are read first (PostgreSQL from the TOAST header), then the blocks in
    batches of at most STREAMED_BYTES (or one block, if larger) and STREAMED_BLOCKS.
    """
    rows, counts, blocks = _rows_and_blocks(conversation, start, stop, image_data)
    size = OctetLength("text") + OctetLength("input_json")
    if image_data:
        size += OctetLength("data")
    sizes = blocks.annotate(size=size).values_list("id", "message_id", "seq", "size")
    batches: list[list[int]] = []
    batch: list[int] = []
    held = 0
    for block_id, message_id, seq, size in sizes:
        if seq >= counts.get(message_id, 0):
            continue  # committed after its message was read: left out, as message_rows does
        if batch and (held + size > STREAMED_BYTES or len(batch) == STREAMED_BLOCKS):
            batches.append(batch)
            batch, held = [], 0
        batch.append(block_id)
        held += size
    if batch:
        batches.append(batch)
    # Each message is let go once yielded: the reader alone holds it from then on.
    pending = deque(rows.values())
    rows.clear()
    current = pending.popleft() if pending else None
    for ids in batches:
        # By id alone: kept in the range's join, the database walks every message of the
        # range and probes the id list for each, once per batch (quadratic in the range;
        # PostgreSQL took 0.6 s a batch at 1,000 messages).
        for values in _block_values(Block.objects.filter(id__in=ids), image_data=image_data):
            block = BlockRow._make(values)
            # Ids grow with seq in a conversation (appends hold its lock): earlier
            # messages are whole once a later one's block arrives.
            while current is not None and current.id != block.message_id:
                yield current
                current = pending.popleft() if pending else None
            if current is not None:
                current.blocks.append(block)
    while current is not None:
        yield current
        current = pending.popleft() if pending else None


def _rows_and_blocks(
    conversation: Conversation, start: int, stop: int | None, image_data: bool
) -> tuple[dict[int, MessageRow], dict[int, int], Any]:
    """The messages of [start, stop) (by id, in seq order, without blocks), their block
    counts, and the query of their blocks' BLOCK_COLUMNS in (message id, seq) order."""
    messages = Message.objects.filter(conversation=conversation, seq__gte=start)
    if stop is not None:
        messages = messages.filter(seq__lt=stop)
    rows: dict[int, MessageRow] = {}
    counts: dict[int, int] = {}
    for pk, seq, role, created_at, metadata, block_count in messages.order_by("seq").values_list(
        "id", "seq", "role", "created_at", "metadata", "block_count"
    ):
        rows[pk] = MessageRow(pk, seq, role, created_at, metadata, [])
        counts[pk] = block_count
    if not rows:
        return rows, counts, Block.objects.none().values_list(*BLOCK_COLUMNS)
    last = next(reversed(rows.values())).seq
    blocks = Block.objects.filter(
        message__conversation=conversation, message__seq__gte=start, message__seq__lte=last
    )
    return rows, counts, _block_values(blocks, image_data=image_data)


def _block_values(blocks: QuerySet[Block], *, image_data: bool) -> Any:
    """These blocks' BLOCK_COLUMNS in (message id, seq) order (images' data left unread,
    empty, unless `image_data`)."""
    columns: tuple[str, ...] = BLOCK_COLUMNS
    if not image_data:
        blocks = blocks.annotate(no_data=Value("", output_field=TextField()))
        columns = tuple("no_data" if c == "data" else c for c in BLOCK_COLUMNS)
    return blocks.order_by("message_id", "seq").values_list(*columns)


class OctetLength(Func):
    """A text's size in UTF-8 bytes. PostgreSQL reads it from the TOAST header without
    decompressing; SQLite counts the bytes without decoding characters."""

    function = "OCTET_LENGTH"
    output_field = IntegerField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return self.as_sql(
            compiler, connection, template="LENGTH(CAST(%(expressions)s AS BLOB))", **extra
        )


MESSAGE_BLOCKS = 100  # blocks of one message a page or frame shows


def preview_rows(
    conversation: Conversation | uuid.UUID, seqs: range | Iterable[int], *, blocks_from: int = 0
) -> list[PreviewRow]:
    """The messages at `seqs` (at most a window's worth) with previews of their blocks (the
    `MESSAGE_BLOCKS` from block `blocks_from`).

    Two queries: the messages (with their stored token figures), then the blocks of
    exactly those message ids, so a message appended meanwhile never shows up half. Block
    cost is bounded by `MESSAGE_BLOCKS` × `PREVIEW_CHARS` per message, whatever is stored.
    """
    key = conversation.pk if isinstance(conversation, Conversation) else conversation
    if isinstance(seqs, range):
        found = _messages_between.values(key, seqs.start, seqs.stop)
    else:
        found = _messages_at.values(key, list(seqs))
    rows: dict[int, PreviewRow] = {
        pk: PreviewRow(pk, seq, role, created_at, metadata, block_count, [], counts)
        for pk, seq, role, created_at, metadata, block_count, counts in found
    }
    blocks = _block_previews.values(list(rows), blocks_from, blocks_from + MESSAGE_BLOCKS)
    for values in blocks:
        block = PreviewBlock._make(values)
        rows[block.message_id].blocks.append(block)
    return list(rows.values())


MESSAGE_PREVIEW = ("id", "seq", "role", "created_at", "metadata", "block_count", "counts")


@compiled.read(Message, uuid.UUID, int, int)
def _messages_between(conversation: uuid.UUID, start: int, stop: int) -> QuerySet[Message, Any]:
    rows = Message.objects.filter(conversation_id=conversation, seq__gte=start, seq__lt=stop)
    return rows.order_by("seq").values_list(*MESSAGE_PREVIEW)


@compiled.read(Message, uuid.UUID, list)
def _messages_at(conversation: uuid.UUID, seqs: list[int]) -> QuerySet[Message, Any]:
    rows = Message.objects.filter(conversation_id=conversation, seq__in=seqs)
    return rows.order_by("seq").values_list(*MESSAGE_PREVIEW)


@compiled.read(Block, list, int, int)
def _block_previews(message_ids: list[int], start: int, stop: int) -> QuerySet[Any, Any]:
    """The previews of these messages' blocks start..stop-1, in (message id, seq) order."""
    return (
        Block.objects.filter(message_id__in=message_ids, seq__gte=start, seq__lt=stop)
        .annotate(
            text_start=Substr("text", 1, PREVIEW_CHARS),
            text_size=OctetLength("text"),
            input_start=Substr("input_json", 1, PREVIEW_CHARS),
            input_size=OctetLength("input_json"),
        )
        .order_by("message_id", "seq")
        .values_list(
            "message_id",
            "seq",
            "type",
            "text_start",
            "text_size",
            "call_id",
            "name",
            "input_start",
            "input_size",
            "is_error",
            "media_type",
        )
    )


def block_row(conversation: Conversation, seq: int, block: int) -> BlockRow | None:
    """One block whole (one query, whatever its message holds besides)."""
    values = (
        Block.objects.filter(message__conversation=conversation, message__seq=seq, seq=block)
        .values_list(*BLOCK_COLUMNS)
        .first()
    )
    return None if values is None else BlockRow._make(values)


def message_full(conversation: Conversation, seq: int) -> MessageRow | None:
    """One message with its blocks whole, for "load the rest" (on demand, one message)."""
    found = message_rows(conversation, start=seq, stop=seq + 1)
    return found[0] if found else None


def last_block_counts(conversation: Conversation | uuid.UUID, count: int) -> dict[int, int]:
    """Message seq → block count of the last `count` messages: one bounded query."""
    rows = Message.objects.filter(conversation=conversation).order_by("-seq")[:count]
    return dict(rows.values_list("seq", "block_count"))


def block_counts_between(conversation: Conversation, seqs: range) -> dict[int, int]:
    """Message seq → block count for the seqs in `seqs`: a bounded position read."""
    rows = Message.objects.filter(conversation=conversation, seq__gte=seqs.start, seq__lt=seqs.stop)
    return dict(rows.values_list("seq", "block_count"))


def replay_payload(
    conversation: Conversation, *, vision: bool, shape: replay.Shape, stop: int | None = None
) -> replay.Payload:
    """The projection of the conversation (of its messages before `stop`, when given):
    what every consumer serves."""
    rows = message_rows(conversation, stop=stop)
    return replay.project(stored_messages(rows), vision=vision, shape=shape)


def replay_json(
    conversation: Conversation, *, vision: bool, shape: replay.Shape, stop: int | None = None
) -> bytes:
    """The projection as bytes: the API's replay and the page's download serve exactly these."""
    return orjson.dumps(replay_payload(conversation, vision=vision, shape=shape, stop=stop))


def markdown_export(
    conversation: Conversation,
    *,
    vision: bool,
    shape: replay.Shape,
    payload: replay.Payload | None = None,
) -> str:
    """The conversation as Markdown: its record, then the projection `replay.project` gives
    for these options, or `payload` (a compacted one, docs/contract.md §7), as the replay
    serves it."""
    rows = message_rows(conversation)
    stored = stored_messages(rows)
    notes = note_reads.all_notes(conversation.id)
    record = [
        markdown.RecordMessage(
            row.seq,
            shown_time(row).isoformat(timespec="seconds"),
            message,
            tuple(notes.get(row.seq, ())),
        )
        for row, message in zip(rows, stored, strict=True)
    ]
    return markdown.conversation_markdown(
        title=conversation.title or str(conversation.id),
        record=record,
        payload=payload
        if payload is not None
        else replay.project(stored, vision=vision, shape=shape),
        shape=shape,
        vision=vision,
    )


def block_total(conversation: Conversation) -> int:
    """The conversation's block count, as its row says (kept by the services): O(1)."""
    return conversation.block_count


def deletion_totals(conversation_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[int, int]]:
    """Conversation id → (messages, blocks) it holds: what deleting it takes along."""
    rows = (
        Message.objects.filter(conversation_id__in=conversation_ids)
        .values("conversation_id")
        .annotate(message_total=Count("id"), block_total=Sum("block_count"))
        .order_by()
        .values_list("conversation_id", "message_total", "block_total")
    )
    return {pk: (messages, blocks or 0) for pk, messages, blocks in rows}


def block_counts(conversation: Conversation | uuid.UUID, *, start: int = 0) -> dict[int, int]:
    """Message seq → block count, from `start` on: a client's position, server side
    (for a conversation or its id; an unknown id has none)."""
    rows = Message.objects.filter(conversation=conversation, seq__gte=start).order_by("seq")
    return dict(rows.values_list("seq", "block_count"))


def image_block(conversation: Conversation, seq: int, block: int) -> tuple[str, str] | None:
    """(media type, base64 data) of an image block, or None if that block is no image."""
    return (
        Block.objects.filter(
            message__conversation=conversation, message__seq=seq, seq=block, type="image"
        )
        .values_list("media_type", "data")
        .first()
    )


def source_uuids(conversation: Conversation) -> set[str]:
    """The uuids of every source line stored in a conversation (read once per followed
    file, when `tail` resumes it, so that lines read again are stored only once)."""
    ids: set[str] = set()
    for metadata in Message.objects.filter(conversation=conversation).values_list(
        "metadata", flat=True
    ):
        if isinstance(metadata, dict):
            ids |= live_sources.source_ids(metadata)
    return ids


def block_total_through(conversation: Conversation, last_seq: int) -> int:
    """Blocks in messages 0..last_seq: a frozen link's total."""
    rows = Message.objects.filter(conversation=conversation, seq__lte=last_seq)
    return int(rows.aggregate(n=Sum("block_count"))["n"] or 0)

"""Whole-record reads, streamed (docs/contract.md §3): the record, the replay and the
Markdown export as pieces of bytes, read window by window, and the response that serves
them. A server holds about one message (and one chunk) at a time, whatever the record's
size; the bytes are those of the whole-in-memory reads (`shapes.record_data`,
`selectors.replay_json`, `selectors.markdown_export`), which the tests check.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any, cast

import orjson
from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse

from conversations.core import markdown, replay
from conversations.record.counting import policy_reads
from conversations.record.models.conversation import Conversation, Message
from conversations.record.notes import reads as note_reads
from conversations.record.reads import selectors, shapes
from conversations.record.reads.rows import MessageRow, block_value, shown_time

WINDOW = 1000  # messages whose rows one read holds; their blocks come in bounded batches
NOTE_BATCH = WINDOW  # messages whose notes one read of the Markdown export holds
CHUNK_BYTES = 1024 * 1024  # what one hop to the request's thread reads before it is sent


def _libc_trim() -> Any:
    """glibc's `malloc_trim`, or None where there is none (another C library)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_malloc_trim = _libc_trim()


class RecordGone(Exception):
    """The conversation was deleted while it was being read."""


def message_rows(conversation: Conversation, *, start: int, stop: int) -> Iterator[MessageRow]:
    """The messages of [start, stop) with their blocks whole (image data included), one at a
    time: WINDOW messages' rows and about `selectors.STREAMED_BYTES` of blocks are held.

    Raises RecordGone after the window in which the conversation was deleted (seqs are dense
    and only a deletion removes messages), so a reader can say its output is incomplete.
    """
    for low in range(start, stop, WINDOW):
        high = min(low + WINDOW, stop)
        seen = 0
        for row in selectors.message_rows_streamed(
            conversation, start=low, stop=high, image_data=True
        ):
            seen += 1
            yield row
        if seen != high - low or not Conversation.objects.filter(pk=conversation.pk).exists():
            raise RecordGone


def _stored(
    rows: Iterable[MessageRow], result: policy_reads.PolicyResult | None = None
) -> Iterator[replay.StoredMessage]:
    """The rows as stored messages; after `result`'s policy when one is given (its
    replacements, computed for the whole record first, applied message by message)."""
    for row in rows:
        message = replay.StoredMessage(
            cast(replay.Role, row.role), tuple(map(block_value, row.blocks))
        )
        yield message if result is None else result.in_window(row.seq, message)


def _system_rows(conversation: Conversation, stop: int, start: int = 0) -> Iterator[MessageRow]:
    """The system messages in [start, stop) (what the anthropic shape lifts into `system`)."""
    seqs = Message.objects.filter(
        conversation=conversation, role="system", seq__gte=start, seq__lt=stop
    )
    for seq in seqs.order_by("seq").values_list("seq", flat=True):
        yield from message_rows(conversation, start=seq, stop=seq + 1)


def _items(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """Serialised JSON values joined by commas."""
    comma = b""
    for piece in pieces:
        yield comma + piece
        comma = b","


def record_pieces(
    conversation: Conversation, head: dict[str, Any], *, start: int, stop: int
) -> Iterator[bytes]:
    """`head` (the conversation's fields) with the messages of [start, stop) as `messages`:
    the bytes of `orjson.dumps(head | {"messages": [shapes.message_data(…), …]})`.

    If the conversation is deleted meanwhile, the JSON is left unterminated: never a
    shorter record that parses."""
    yield orjson.dumps(head)[:-1] + b',"messages":['
    rows = message_rows(conversation, start=start, stop=stop)
    try:
        yield from _items(orjson.dumps(shapes.message_data(row, row.blocks)) for row in rows)
    except RecordGone:
        return
    yield b"]}"


def _escaped(text: str) -> bytes:
    """`text` as the inside of a JSON string (orjson escapes character by character, so the
    pieces of a string escape to the pieces of its escape)."""
    return orjson.dumps(text)[1:-1]


def replay_pieces(
    conversation: Conversation,
    *,
    vision: bool,
    shape: replay.Shape,
    stop: int,
    result: policy_reads.PolicyResult | None = None,
) -> Iterator[bytes]:
    """The projection of the messages before `stop`: the bytes of
    `orjson.dumps(replay.project(…))`, message by message. With `result` (a compaction
    policy applied to the whole record, `policy_reads`), the projection of the compacted
    record: the bytes of `preview_counts.compacted_payload`. Unterminated if the
    conversation is deleted meanwhile."""
    start = result.kept_from if result is not None else 0
    try:
        yield b"{"
        if shape == "anthropic":
            separator = b'"system":"'
            system = _stored(_system_rows(conversation, stop, start), result)
            for text in replay.system_texts(system):
                yield separator + _escaped(text)
                separator = b"\\n\\n"
            if separator != b'"system":"':
                yield b'",'
        yield b'"messages":['
        rows = message_rows(conversation, start=start, stop=stop)
        wire = replay.wire_messages(_stored(rows, result), vision=vision, shape=shape)
        yield from _items(orjson.dumps(message) for message in wire)
    except RecordGone:
        return
    yield b"]}"


def markdown_pieces(
    conversation: Conversation,
    *,
    vision: bool,
    shape: replay.Shape,
    stop: int,
    result: policy_reads.PolicyResult | None = None,
) -> Iterator[bytes]:
    """The Markdown export of the messages before `stop` (`markdown.conversation_markdown`'s
    text in UTF-8), message by message; the record is read twice, once per half. The
    anthropic `system` is held whole (its fence depends on all of it). With `result`, the
    projection half is the compacted record's (the record half stays whole). If the
    conversation is deleted meanwhile, the export ends saying so."""
    start = result.kept_from if result is not None else 0
    try:
        system = None
        if shape == "anthropic":
            rows = _system_rows(conversation, stop, start)
            texts = list(replay.system_texts(_stored(rows, result)))
            system = "\n\n".join(texts) if texts else None
        record = _record_messages(conversation, stop)
        wire = replay.wire_messages(
            _stored(message_rows(conversation, start=start, stop=stop), result),
            vision=vision,
            shape=shape,
        )
        for piece in markdown.markdown_pieces(
            title=conversation.title or str(conversation.id),
            record=record,
            system=system,
            wire=wire,
            shape=shape,
            vision=vision,
        ):
            yield piece.encode()
    except RecordGone:
        yield b"\n\n**Incomplete: the conversation was deleted while it was exported.**\n"


def _record_messages(conversation: Conversation, stop: int) -> Iterator[markdown.RecordMessage]:
    """The record half's messages before `stop`, each with its notes (docs/contract.md §10),
    read a batch of NOTE_BATCH messages at a time."""
    for first in range(0, stop, NOTE_BATCH):
        last = min(stop, first + NOTE_BATCH)
        notes = note_reads.notes_between(conversation.id, first, last)
        for row in message_rows(conversation, start=first, stop=last):
            for stored in _stored([row]):
                yield markdown.RecordMessage(
                    row.seq,
                    shown_time(row).isoformat(timespec="seconds"),
                    stored,
                    tuple(notes.get(row.seq, ())),
                )


def _take(pieces: Iterator[bytes]) -> bytes:
    """The next CHUNK_BYTES or so of `pieces` (b"" when they are done)."""
    taken: list[bytes] = []
    size = 0
    for piece in pieces:
        taken.append(piece)
        size += len(piece)
        if size >= CHUNK_BYTES:
            break
    return b"".join(taken)


class StreamedResponse(StreamingHttpResponse):
    """A body of pieces from a generator that reads the database, sent as it is read.

    Under ASGI, Django serves a sync iterator by reading it whole into a list first
    (`StreamingHttpResponse.__aiter__`), which would hold the record; this reads it in the
    request's own thread (its database connection) one chunk of CHUNK_BYTES at a time.
    `content` and `text` read the whole body at once (then keep it), for tests and small
    callers; the server never asks for them.
    """

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pieces = iter(cast(Iterator[bytes], self.streaming_content))  # a generator's
        take = sync_to_async(_take, thread_sensitive=True)
        while chunk := await take(pieces):
            yield chunk

    _read: bytes | None = None

    def close(self) -> None:
        super().close()
        # The answer's messages and chunks are freed by now, but glibc keeps freed heap in
        # its arenas: without this a server that sent a 300 MB record keeps its peak.
        if _malloc_trim is not None:
            _malloc_trim(0)

    @property
    def content(self) -> bytes:  # type: ignore[override]
        if self._read is None:
            self._read = b"".join(cast(Iterator[bytes], self.streaming_content))
        return self._read

    @property
    def text(self) -> str:  # type: ignore[override]
        return self.content.decode(self.charset or "utf-8")

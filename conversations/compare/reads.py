"""Comparing two runs (docs/contract.md §9): the reads behind the alignment, the summaries
and the rows of one page.

Bounded by construction: each run's signatures are streamed (role, block kinds, tool
names; never a text) into one small integer a message; a pair's projections are compared
by digest, a few megabytes of record at a time, and only where the two messages' token
counts are equal (unequal counts are unequal projections); a page holds PAGE_ROWS rows.
"""

from __future__ import annotations

import hashlib
import threading
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import orjson
from cachetools import LRUCache
from django.db.models import Sum, TextField, Value
from django.db.models.functions import Substr

from conversations.core import compare, diff, replay
from conversations.core.compare import PAGE_ROWS, Alignment, MessageText, Row, Summary
from conversations.core.options import ReplayOptions
from conversations.record.counting import token_counts
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.reads import selectors
from conversations.record.reads.rows import BlockRow, MessageRow, block_value, stored_messages
from conversations.record.search import reads as search_reads

CHUNK = 5_000  # rows a streamed signature read fetches at once
DIGEST_MESSAGES = 200  # messages whose sizes one digest read looks up at once
DIGEST_BYTES = 4 * 1024 * 1024  # record text a digest read holds at once (or one message)
SHOWN_CHARS = 4_000  # of a message's projection, on the page
SHOWN_BLOCKS = 20  # blocks of a message the page reads for its text


class PageError(ValueError):
    """`?page=` names no page: the sentence says how many there are."""


@dataclass(frozen=True, slots=True)
class RunRead:
    """One run as the comparison reads it: a signature id per message, its tool calls by
    name, and its summary."""

    conversation: Conversation
    ids: array[int]
    tool_calls: Counter[str]
    summary: Summary


@dataclass(frozen=True, slots=True)
class Comparison:
    """What the API and the page answer: both runs, their alignment, where each first
    leaves a same pair, the line saying what changed, and one page of rows."""

    a: RunRead
    b: RunRead
    options: ReplayOptions
    alignment: Alignment
    first_divergence: Row | None
    first_divergence_row: int | None
    changed: str
    page: int
    first_row: int
    rows: list[Row]
    same: list[bool]
    tokens: list[tuple[int | None, int | None]]  # each row's messages' §7 counts

    def row_data(self) -> list[dict[str, Any]]:
        return [
            {"a_seq": a_seq, "b_seq": b_seq, "same": same, "tokens_a": ta, "tokens_b": tb}
            for (a_seq, b_seq), same, (ta, tb) in zip(
                self.rows, self.same, self.tokens, strict=True
            )
        ]


def compared(
    a: Conversation, b: Conversation, options: ReplayOptions, *, page: int | None
) -> Comparison:
    """Align `a` and `b` and read page `page` (from 1) of the rows; None: the page holding
    the first divergence (page 1 when there is none). PageError past the last page."""
    whole = _whole(a, b, options)
    alignment, where = whole.alignment, whole.first_divergence_row
    if page is None:
        page = 1 + (where or 0) // PAGE_ROWS
    if page > alignment.pages:
        raise PageError(f"page {page} does not exist; there are {alignment.pages}.")
    first_row = (page - 1) * PAGE_ROWS
    rows = alignment.rows(first_row, first_row + PAGE_ROWS)
    same, tokens = _same(whole.a, whole.b, options, rows)
    return Comparison(
        a=whole.a,
        b=whole.b,
        options=options,
        alignment=alignment,
        first_divergence=whole.first_divergence,
        first_divergence_row=where,
        changed=whole.changed,
        page=page,
        first_row=first_row,
        rows=rows,
        same=same,
        tokens=tokens,
    )


@dataclass(frozen=True, slots=True)
class _Whole:
    """What every page of one comparison shares."""

    a: RunRead
    b: RunRead
    alignment: Alignment
    first_divergence: Row | None
    first_divergence_row: int | None
    changed: str


WHOLES_KEPT = 8  # comparisons kept in-process (each about 16 bytes a message)
_wholes: LRUCache[tuple[Any, ...], _Whole] = LRUCache(maxsize=WHOLES_KEPT)
_wholes_lock = threading.Lock()


def _state(conversation: Conversation) -> tuple[Any, ...]:
    # Append-only: the counts name the record's state; `updated_at` also moves when its
    # window or model is set (which the next request's size depends on).
    c = conversation
    return (c.id, c.message_count, c.block_count, c.updated_at)


def _whole(a: Conversation, b: Conversation, options: ReplayOptions) -> _Whole:
    """The alignment, the summaries, the first divergence and what changed: kept for the
    records' states, so paging through a comparison aligns it once."""
    key = (_state(a), _state(b), options)
    with _wholes_lock:
        found = _wholes.get(key)
    if found is not None:
        return found
    interner = compare.Interner()
    run_a, run_b = _run(a, options, interner), _run(b, options, interner)
    alignment = compare.align(run_a.ids, run_b.ids)
    first = _first_divergence(run_a, run_b, options, alignment)
    where = alignment.row_of(*first) if first is not None else None
    swaps = compare.substitutions(alignment, run_a.ids, run_b.ids, interner.signatures)
    shown_swaps: list[tuple[int, int, tuple[str, ...], tuple[str, ...]]] = []
    total = 0
    for swap in swaps:
        total += 1
        if len(shown_swaps) < 3:
            shown_swaps.append(swap)
    changed = compare.what_changed(run_a.summary, run_b.summary, first, shown_swaps, total)
    whole = _Whole(run_a, run_b, alignment, first, where, changed)
    with _wholes_lock:
        _wholes[key] = whole
    return whole


def _run(conversation: Conversation, options: ReplayOptions, interner: compare.Interner) -> RunRead:
    pressure = token_counts.pressure(conversation, options)
    # The messages the conversation's row counts: one appended meanwhile is not compared.
    ids, tool_calls = _signatures(conversation, interner, limit=conversation.message_count)
    first, last = _moments(conversation, len(ids))
    summary = Summary(
        messages=len(ids),
        tokens=pressure.headline.next.tokens,
        tool_calls=compare.top_tools(tool_calls),
        errors=conversation.error_count,
        duration_s=compare.duration(first, last),
    )
    return RunRead(conversation, ids, tool_calls, summary)


def _message_tokens(
    conversation: Conversation, options: ReplayOptions, seqs: Sequence[int]
) -> dict[int, int]:
    """The §7 count of each message at `seqs` (a page's worth), as stored at ingest."""
    return token_counts.stored_tokens(conversation, options, seqs)


def _signatures(
    conversation: Conversation, interner: compare.Interner, *, limit: int
) -> tuple[array[int], Counter[str]]:
    """Each message's signature id in seq order (the first `limit` messages) and the tool
    calls by name: two streamed queries of short columns, never a text."""
    messages = (
        Message.objects.filter(conversation=conversation, seq__lt=limit)
        .order_by("seq")
        .values_list("id", "role", "block_count")
        .iterator(chunk_size=CHUNK)
    )
    # Ids grow with seq in a conversation (appends hold its lock), so (message id, seq)
    # order is seq order, read through the (message, seq) unique index.
    blocks: Iterator[tuple[int, int, str, str]] = (
        Block.objects.filter(message__conversation=conversation, message__seq__lt=limit)
        .order_by("message_id", "seq")
        .values_list("message_id", "seq", "type", "name")
        .iterator(chunk_size=CHUNK)
    )
    ids: array[int] = array("l")
    tools: Counter[str] = Counter()
    pending = next(blocks, None)
    for message_id, role, block_count in messages:
        kinds: list[str] = []
        names: list[str] = []
        while pending is not None and pending[0] <= message_id:
            if pending[0] == message_id and pending[1] < block_count:
                kinds.append(pending[2])
                if pending[2] == "tool_use":
                    names.append(pending[3])
            pending = next(blocks, None)
        tools.update(names)
        ids.append(interner(compare.signature(role, kinds, names)))
    return ids, tools


def _moments(conversation: Conversation, count: int) -> tuple[datetime | None, datetime | None]:
    """When the first and the last of the first `count` messages were written."""
    if count == 0:
        return None, None
    rows = Message.objects.filter(conversation=conversation, seq__in=[0, count - 1])
    found = {
        seq: compare.moment(m, at)
        for seq, m, at in rows.values_list("seq", "metadata", "created_at")
    }
    return found.get(0), found.get(count - 1)


def _first_divergence(
    a: RunRead, b: RunRead, options: ReplayOptions, alignment: Alignment
) -> Row | None:
    """Each run's first message not in a same pair (None for a run with none; None for
    both when the runs are the same throughout), checking pairs a page at a time."""
    a_first: int | None = None
    b_first: int | None = None
    for start in range(0, alignment.total_rows, PAGE_ROWS):
        rows = alignment.rows(start, start + PAGE_ROWS)
        same, _tokens = _same(a, b, options, rows)
        for (a_seq, b_seq), is_same in zip(rows, same, strict=True):
            if is_same:
                continue
            if a_first is None and a_seq is not None:
                a_first = a_seq
            if b_first is None and b_seq is not None:
                b_first = b_seq
        if a_first is not None and b_first is not None:
            break
    if a_first is None and b_first is None:
        return None
    return (a_first, b_first)


def _same(
    a: RunRead,
    b: RunRead,
    options: ReplayOptions,
    rows: Sequence[Row],
) -> tuple[list[bool], list[tuple[int | None, int | None]]]:
    """Whether each row is a pair with equal projections, and its messages' counts. Pairs
    whose counts differ are not read; the others are compared by digest."""
    a_tokens = _message_tokens(a.conversation, options, [r[0] for r in rows if r[0] is not None])
    b_tokens = _message_tokens(b.conversation, options, [r[1] for r in rows if r[1] is not None])
    tokens = [
        (
            None if a_seq is None else a_tokens.get(a_seq),
            None if b_seq is None else b_tokens.get(b_seq),
        )
        for a_seq, b_seq in rows
    ]
    candidates = [
        (a_seq, b_seq)
        for (a_seq, b_seq), (ta, tb) in zip(rows, tokens, strict=True)
        if a_seq is not None and b_seq is not None and ta is not None and ta == tb
    ]
    if not candidates:
        return [False] * len(rows), tokens
    a_digests = _digests(a.conversation, [p[0] for p in candidates], options)
    b_digests = _digests(b.conversation, [p[1] for p in candidates], options)
    out = []
    for a_seq, b_seq in rows:
        if a_seq is None or b_seq is None:
            out.append(False)
            continue
        found = a_digests.get(a_seq)
        out.append(found is not None and found == b_digests.get(b_seq))
    return out, tokens


def _digests(
    conversation: Conversation, seqs: list[int], options: ReplayOptions
) -> dict[int, bytes]:
    """The digest of each message's projection (`replay.project_message`), reading whole
    messages about DIGEST_BYTES of record at a time."""
    out: dict[int, bytes] = {}
    for start in range(0, len(seqs), DIGEST_MESSAGES):
        chunk = seqs[start : start + DIGEST_MESSAGES]
        heads = list(
            Message.objects.filter(conversation=conversation, seq__in=chunk)
            .order_by("seq")
            .values_list("id", "seq", "role", "created_at", "metadata", "block_count")
        )
        sizes = dict(
            Block.objects.filter(message_id__in=[h[0] for h in heads])
            .values("message_id")
            .annotate(size=_size_sum(options))
            .order_by()
            .values_list("message_id", "size")
        )
        batch: list[tuple[Any, ...]] = []
        held = 0
        for head in heads:
            size = int(sizes.get(head[0]) or 0)
            if batch and held + size > DIGEST_BYTES:
                out.update(_digest_batch(batch, options))
                batch, held = [], 0
            batch.append(head)
            held += size
        if batch:
            out.update(_digest_batch(batch, options))
    return out


def _size_sum(options: ReplayOptions) -> Any:
    size = selectors.OctetLength("text") + selectors.OctetLength("input_json")
    if options.vision:
        size = size + selectors.OctetLength("data")
    return Sum(size)


def _digest_batch(heads: list[tuple[Any, ...]], options: ReplayOptions) -> dict[int, bytes]:
    rows = {h[0]: MessageRow(h[0], h[1], h[2], h[3], h[4], []) for h in heads}
    counts = {h[0]: h[5] for h in heads}
    blocks = Block.objects.filter(message_id__in=list(rows))
    columns: tuple[str, ...] = selectors.BLOCK_COLUMNS
    if not options.vision:  # an image crosses as its marker: its data is not read
        blocks = blocks.annotate(no_data=Value("", output_field=TextField()))
        columns = tuple("no_data" if c == "data" else c for c in columns)
    for values in blocks.order_by("message_id", "seq").values_list(*columns):
        block = BlockRow._make(values)
        if block.seq < counts[block.message_id]:
            rows[block.message_id].blocks.append(block)
    out = {}
    for row, message in zip(rows.values(), stored_messages(rows.values()), strict=True):
        wire = replay.project_message(message, vision=options.vision, shape=options.shape)
        out[row.seq] = hashlib.sha256(orjson.dumps(wire)).digest()
    return out


# What the page shows of each message.


def texts(
    conversation: Conversation, seqs: Iterable[int], options: ReplayOptions
) -> dict[int, MessageText]:
    """The projection of each of these messages as text, cut: the first SHOWN_BLOCKS blocks,
    each text read to SHOWN_CHARS (image data never read)."""
    wanted = sorted(set(seqs))
    if not wanted:
        return {}
    heads = {
        pk: (seq, role, count)
        for pk, seq, role, count in Message.objects.filter(
            conversation=conversation, seq__in=wanted
        ).values_list("id", "seq", "role", "block_count")
    }
    blocks: dict[int, list[BlockRow]] = {pk: [] for pk in heads}
    rows = (
        Block.objects.filter(message_id__in=list(heads), seq__lt=SHOWN_BLOCKS)
        .annotate(
            text_start=Substr("text", 1, SHOWN_CHARS + 1),
            input_start=Substr("input_json", 1, SHOWN_CHARS + 1),
            no_data=Value("", output_field=TextField()),
        )
        .order_by("message_id", "seq")
        .values_list(
            "message_id",
            "seq",
            "type",
            "text_start",
            "call_id",
            "name",
            "input_start",
            "is_error",
            "media_type",
            "no_data",
            "origin",
        )
    )
    cut: set[int] = set()
    for values in rows:
        block = BlockRow(*values)
        if block.type == "tool_use" and len(block.input_json) > SHOWN_CHARS:
            # A cut input is no JSON: show its start as the projection would.
            block = block._replace(input_json=block.input_json[:SHOWN_CHARS])
            cut.add(block.message_id)
        if len(block.text) > SHOWN_CHARS:
            cut.add(block.message_id)
        blocks[block.message_id].append(block)
    out = {}
    for pk, (seq, role, count) in heads.items():
        message = replay.StoredMessage(
            cast(replay.Role, role), tuple(block_value(b) for b in blocks[pk])
        )
        wire = replay.project_message(message, vision=options.vision, shape=options.shape)
        text = diff.content_text(wire)  # an image part named by its media type
        whole = pk not in cut and count <= SHOWN_BLOCKS and len(text) <= SHOWN_CHARS
        out[seq] = MessageText(role, text[:SHOWN_CHARS], not whole)
    return out


def run_data(run: RunRead, *, url: str) -> dict[str, Any]:
    """A run's SUMMARY as the API answers it, with the conversation's id, title and URL."""
    conversation = run.conversation
    return {"id": str(conversation.id), "title": conversation.title, "url": url} | (
        run.summary.as_json()
    )


def candidates(
    conversation: Conversation, q: str
) -> tuple[list[Conversation], str, list[Conversation] | None]:
    """What the picker lists: the conversations sharing this one's metadata `source` or
    else `cwd` (most recent first), what they share, and those a search `q` finds (None
    without one); at most PICK_LIMIT each. QueryError for a bad `q`."""
    others = Conversation.objects.exclude(pk=conversation.pk).order_by("-updated_at", "id")
    nearby: list[Conversation] = []
    label = ""
    metadata = conversation.metadata if isinstance(conversation.metadata, dict) else {}
    for key in ("source", "cwd"):
        value = metadata.get(key)
        if isinstance(value, str) and value:
            nearby = list(others.filter(**{f"metadata__{key}": value})[: compare.PICK_LIMIT])
            label = f"{key} {value}"
            break
    found = None
    if q.strip():
        found = list(
            search_reads.conversation_list(q=q).exclude(pk=conversation.pk)[: compare.PICK_LIMIT]
        )
    return nearby, label, found

"""Token figures written with the blocks they count (docs/contract.md §7): each block is
counted once, when it is stored, and each message keeps its count, its running total and
what its measured usage says, so no page or frame counts stored text again.

Called by the append paths (`appending`) inside their transaction, with the
conversation row locked; nothing here broadcasts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache, partial
from typing import Any, cast

from django.db.models import F, JSONField

from conversations.core import replay
from conversations.core.blocks import BlockKind, Role
from conversations.core.counting import next_request as nr
from conversations.core.counting import stored_counts, tokens
from conversations.core.counting.stored_counts import StoredFacts
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.reads.rows import block_value
from conversations.record.services.inserts import quoted_column, stored_value, write_db

VISION, SHAPE = stored_counts.DEFAULT
LATER_BATCH = 1000  # later messages' running totals moved per statement batch


def block_facts(
    row: Block, value: replay.Block | None = None, counted: int | None = None
) -> StoredFacts:
    """Count a block row (not yet stored) once: sets `row.tokens`, returns its facts.
    `value` is the row's value and `counted` its tokens when the caller has them (a
    batch's texts are counted together, `count_new`)."""
    value = block_value(row) if value is None else value
    row.tokens = (
        tokens.block_tokens(value, vision=VISION, shape=SHAPE) if counted is None else counted
    )
    return StoredFacts(
        kind=cast(BlockKind, row.type),
        tokens=row.tokens,
        blank=tokens.blank(value),
        media_type=row.media_type,
        width=row.width,
        height=row.height,
    )


def _fill(message: Message, facts: Sequence[StoredFacts], before: int, run: dict[str, int]) -> int:
    """Set a message's figures after `before` tokens (`run` by kind); its own count."""
    role = cast(Role, message.role)
    data = stored_counts.figures(role, facts)
    count = stored_counts.count(role, data, vision=VISION, shape=SHAPE)
    data["run"] = stored_counts.add_kinds(run, count.by_kind)
    message.tokens = count.tokens
    message.cumulative = before + count.tokens
    message.counts = data
    message.varies = stored_counts.varies(role, data)
    message.heaviest = stored_counts.heaviest(role, facts)
    return count.tokens


# Counting a batch's texts runs beside the request's thread (the encoder releases the
# interpreter's lock), so the database indexes the batch's words meanwhile (`appending`).
_COUNTERS = ThreadPoolExecutor(max_workers=os.cpu_count() or 2, thread_name_prefix="counts")
AT_ONCE_CHARS = 65_536  # text counted in the caller's thread (a handoff costs more)


@dataclass(frozen=True, slots=True)
class Counting:
    """A batch's blocks' values and their texts' counts (`counts`: when done)."""

    values: list[list[replay.Block]]
    counts: Future[list[int]]


def start_counting(rows: Sequence[Sequence[Block]]) -> Counting:
    """Count the prose of every block of `rows` (each distinct text once), as
    `block_tokens` counts it, in another thread when there is much of it."""
    values = [[block_value(row) for row in message_rows] for message_rows in rows]
    texts = [replay.prose(v) for vs in values for v in vs if not isinstance(v, replay.ImageBlock)]
    if sum(map(len, texts)) > AT_ONCE_CHARS:
        return Counting(values, _COUNTERS.submit(tokens.count_texts, texts))
    done: Future[list[int]] = Future()
    done.set_result(tokens.count_texts(texts))
    return Counting(values, done)


def count_new(
    conversation: Conversation,
    messages: Sequence[Message],
    rows: Sequence[Sequence[Block]],
    counting: Counting | None = None,
) -> None:
    """Count new messages (not yet stored, consecutive from the conversation's end) and
    their block rows: sets the blocks' `tokens` and the messages' figures. `counting`:
    `start_counting(rows)`, when the caller started it earlier."""
    if not messages:
        return
    counting = start_counting(rows) if counting is None else counting
    first = messages[0].seq
    before, run = _running(conversation, first)
    # Every text of the batch counted at once; an image's own tokens are arithmetic,
    # counted as it goes.
    counted = iter(counting.counts.result())
    turns: dict[str, int] = {}
    # The latest measured message before the batch: the same for every message of it (none
    # of them is stored yet), so read once, and only if a response id asks for it.
    before_batch = cache(partial(_latest_measured, conversation, first))
    for message, message_rows, message_values in zip(messages, rows, counting.values, strict=True):
        facts = [
            block_facts(row, v, None if isinstance(v, replay.ImageBlock) else next(counted))
            for row, v in zip(message_rows, message_values, strict=True)
        ]
        before += _fill(message, facts, before, run)
        run = cast(dict[str, Any], message.counts)["run"]
        _measure(message, turns, before_batch)


def _running(conversation: Conversation, seq: int) -> tuple[int, dict[str, int]]:
    """The running totals a message at `seq` continues: the tokens up to it and their split
    by kind, from the message before it (none before the first). In SQL of its own: the
    ORM's query building cost more than the database's answer, on every append."""
    if seq == 0:
        return 0, {}
    db = write_db()
    with db.cursor() as cursor:
        cursor.execute(
            _running_sql(db.vendor),
            [stored_value(Message, "conversation", conversation.pk), seq - 1],
        )
        previous = cursor.fetchone()
    if previous is None:
        return 0, {}
    counts = Message._meta.get_field("counts")
    assert isinstance(counts, JSONField)
    data = counts.from_db_value(previous[1], cast(Any, None), db)
    return previous[0] or 0, dict((data or {}).get("run", {}))


@cache
def _running_sql(vendor: str) -> str:
    """`_running`'s statement, built once per database vendor."""
    return (
        f"SELECT {quoted_column(Message, 'cumulative')}, {quoted_column(Message, 'counts')} "
        f"FROM {write_db().ops.quote_name(Message._meta.db_table)} "
        f"WHERE {quoted_column(Message, 'conversation')} = %s"
        f" AND {quoted_column(Message, 'seq')} = %s"
    )


def _measure(
    message: Message,
    turns: dict[str, int],
    before_batch: Callable[[], tuple[int, str | None] | None],
) -> None:
    """`measured` and `turn_start` from the message's metadata: the provider's measured input
    of an assistant turn, and the seq of the first message of the response it belongs to
    (`turns`: response id → first seq, within this write; `before_batch`: the turn start
    and response id of the latest measured message stored before it). A response that
    began before this write continues when that latest measured message is part of it (a
    response stored in pieces, its tool results between them)."""
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    turn = nr.turn_of(metadata)
    start = message.seq
    if turn is not None:
        if turn not in turns:
            earlier = before_batch()
            turns[turn] = earlier[0] if earlier is not None and earlier[1] == turn else start
        start = turns[turn]
    usage = tokens.usage_of(metadata)
    measured = message.role == "assistant" and usage is not None and bool(usage.input)
    message.measured = usage.input if measured and usage is not None else None
    message.turn_start = start if measured else None


def _latest_measured(conversation: Conversation, seq: int) -> tuple[int, str | None] | None:
    """The turn start and response id of the latest measured message before `seq`."""
    earlier = (
        Message.objects.filter(conversation=conversation, seq__lt=seq, measured__isnull=False)
        .order_by("-seq")
        .values_list("turn_start", "metadata")
        .first()
    )
    if earlier is None:
        return None
    metadata = earlier[1] if isinstance(earlier[1], dict) else {}
    return cast(int, earlier[0]), nr.turn_of(metadata)


def block_added(conversation: Conversation, message: Message, row: Block) -> None:
    """Count block `row` (not yet stored) appended to `message` (as read under the lock):
    sets `row.tokens` and moves the message's figures and every later running total."""
    fact = block_facts(row)
    data: dict[str, Any] = message.counts or {}
    role = cast(Role, message.role)
    was_blank = 0 < int(data.get("n", 0)) == len(data.get("bl", ()))
    if "t" in data or fact.kind == "image" or was_blank:
        facts = _stored_facts(message, data) + [fact]
        fresh = stored_counts.figures(role, facts)
        heaviest = stored_counts.heaviest(role, facts)
    else:  # the sums move; no row is read
        fresh = {
            "o": stored_counts.add_kinds(data.get("o", {}), {fact.kind: fact.tokens}),
            "n": int(data.get("n", 0)) + 1,
        }
        blank = [*data.get("bl", ()), *([row.seq] if fact.blank else [])]
        if blank:
            fresh["bl"] = blank
        heaviest = 0 if len(blank) == fresh["n"] else max(message.heaviest, fact.tokens)
    old = stored_counts.count(role, data, vision=VISION, shape=SHAPE)
    new = stored_counts.count(role, fresh, vision=VISION, shape=SHAPE)
    delta = new.tokens - old.tokens
    moved = stored_counts.add_kinds(new.by_kind, {}, old.by_kind)
    fresh["run"] = stored_counts.add_kinds(data.get("run", {}), moved)
    Message.objects.filter(pk=message.pk).update(
        tokens=new.tokens,
        cumulative=F("cumulative") + delta,
        counts=fresh,
        varies=stored_counts.varies(role, fresh),
        heaviest=heaviest,
    )
    if message.seq + 1 < conversation.message_count:
        _move_later(conversation, message.seq, delta, moved)


def _stored_facts(message: Message, data: dict[str, Any]) -> list[StoredFacts]:
    blank = stored_counts.blank_of(data)
    rows = (
        Block.objects.filter(message=message)
        .order_by("seq")
        .values_list("seq", "type", "tokens", "media_type", "width", "height")
    )
    return [
        StoredFacts(
            kind=cast(BlockKind, kind),
            tokens=n or 0,
            blank=seq in blank,
            media_type=media,
            width=width,
            height=height,
        )
        for seq, kind, n, media, width, height in rows
    ]


def _move_later(conversation: Conversation, seq: int, delta: int, moved: dict[str, int]) -> None:
    """A block appended to a message before the last: every later running total moves
    (rare: agents append to their latest message). In batches, memory bounded."""
    if delta:
        Message.objects.filter(conversation=conversation, seq__gt=seq).update(
            cumulative=F("cumulative") + delta
        )
    if not any(moved.values()):
        return
    after = seq
    while True:
        batch = list(
            Message.objects.filter(conversation=conversation, seq__gt=after)
            .order_by("seq")
            .only("pk", "seq", "counts")[:LATER_BATCH]
        )
        if not batch:
            return
        for later in batch:
            data = dict(later.counts or {})
            data["run"] = stored_counts.add_kinds(data.get("run", {}), moved)
            later.counts = data
        Message.objects.bulk_update(batch, ["counts"])
        after = batch[-1].seq


def metadata_changed(conversation: Conversation, message: Message) -> None:
    """A message's metadata was replaced (a followed file's turn grew): its measured usage
    is read again."""
    _measure(message, {}, partial(_latest_measured, conversation, message.seq))
    Message.objects.filter(pk=message.pk).update(
        measured=message.measured, turn_start=message.turn_start
    )

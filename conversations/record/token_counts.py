"""Token counts of stored conversations (docs/contract.md §7), cached per block and per message.

The record is append-only, so a block's count never changes for a given tokenizer and
toggles, and a message's count changes only when a block is appended to it (its block
count grows). Both are cached in-process under those keys: a warm conversation costs one
query of (seq, block count) pairs; a live update recounts only the message that grew,
and within it only the new blocks.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Generic, TypeVar, cast

from conversations.core import compact, context_windows, replay, tokens
from conversations.core import next_request as nr
from conversations.core.compact import Compacted, Policy
from conversations.core.options import OptionError, ReplayOptions
from conversations.record import selectors
from conversations.record.models import Conversation

# The count values, as they were always read from here.
from conversations.record.rows import Counted as Counted
from conversations.record.rows import Headline, PreviewRow, counted_of
from conversations.record.rows import Pressure as Pressure
from conversations.record.rows import Preview as Preview

K = TypeVar("K")
V = TypeVar("V")
BLOCK_CACHE_SIZE = 400_000
MESSAGE_CACHE_SIZE = 200_000


class LRU(Generic[K, V]):
    """A bounded, thread-safe least-recently-used map (pages run in threads)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.items: OrderedDict[K, V] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self.lock:
            value = self.items.get(key)
            if value is not None:
                self.items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        with self.lock:
            self.items[key] = value
            self.items.move_to_end(key)
            while len(self.items) > self.size:
                self.items.popitem(last=False)

    def clear(self) -> None:
        with self.lock:
            self.items.clear()


# (conversation, message seq, block seq, toggles) → tokens; toggles are () for every kind
# but images, whose count depends on vision and shape.
blocks_cache: LRU[tuple[Any, ...], int] = LRU(BLOCK_CACHE_SIZE)
# (conversation, message seq, block count, vision, shape) → Counted
messages_cache: LRU[tuple[Any, ...], Counted] = LRU(MESSAGE_CACHE_SIZE)
# (conversation, message count, block total, toggles, overrides, trigger) → Pressure
pressure_cache: LRU[tuple[Any, ...], Pressure] = LRU(32)
stats = {"blocks_counted": 0}


def _toggles(block: replay.Block, options: ReplayOptions) -> tuple[Any, ...]:
    return (options.vision, options.shape) if type(block) is replay.ImageBlock else ()


def _count_row(
    conversation_id: uuid.UUID, row: selectors.MessageRow, options: ReplayOptions
) -> Counted:
    (stored,) = selectors.stored_messages([row])
    own: list[int] = []
    for block_row, block in zip(row.blocks, stored.blocks, strict=True):
        key = (conversation_id, row.seq, block_row.seq, _toggles(block, options))
        n = blocks_cache.get(key)
        if n is None:
            n = tokens.block_tokens(block, vision=options.vision, shape=options.shape)
            stats["blocks_counted"] += 1
            blocks_cache.put(key, n)
        own.append(n)
    count = tokens.message_count(stored, vision=options.vision, shape=options.shape, counts=own)
    metadata = row.metadata if isinstance(row.metadata, dict) else {}
    model = metadata.get("model")
    return Counted(
        row.seq,
        row.role,
        count,
        tokens.usage_of(metadata),
        model if isinstance(model, str) else "",
        len(row.blocks),
        nr.turn_of(metadata),
        metadata.get("isCompactSummary") is True,
    )


def message_counts(conversation: Conversation, options: ReplayOptions) -> list[Counted]:
    """Every message's count in seq order: one query when warm, plus the rows of the
    messages that are new or grew since they were last counted."""
    cid = conversation.id
    sizes = selectors.block_counts(conversation)
    found: dict[int, Counted] = {}
    missing: list[int] = []
    for seq, size in sizes.items():
        hit = messages_cache.get((cid, seq, size, options.vision, options.shape))
        if hit is None:
            missing.append(seq)
        else:
            found[seq] = hit
    if missing:
        wanted = set(missing)
        # Streamed: a cold count of 60 messages of 10 MB holds one message's texts at a
        # time, not 600 MB.
        rows = selectors.message_rows_streamed(
            conversation, start=min(wanted), stop=max(wanted) + 1
        )
        for row in rows:
            if row.seq in wanted:
                counted = _count_row(cid, row, options)
                key = (cid, row.seq, len(row.blocks), options.vision, options.shape)
                messages_cache.put(key, counted)
                found[row.seq] = counted
    return [found[seq] for seq in sorted(found)]


def counted_at(
    conversation: Conversation, seq: int, blocks: int, options: ReplayOptions
) -> Counted | None:
    """One message's count as it stood with its first `blocks` blocks (what a frame shows
    when the message grew between the frame's reads); None if it has fewer."""
    key = (conversation.id, seq, blocks, options.vision, options.shape)
    hit = messages_cache.get(key)
    if hit is not None:
        return hit
    rows = selectors.message_rows(conversation, start=seq, stop=seq + 1, image_data=False)
    if len(rows) != 1 or len(rows[0].blocks) < blocks:
        return None
    counted = _count_row(conversation.id, rows[0]._replace(blocks=rows[0].blocks[:blocks]), options)
    messages_cache.put(key, counted)
    return counted


def counted_shown(
    conversation: Conversation, p: Pressure, rows: Sequence[PreviewRow]
) -> dict[int, Counted]:
    """The counts of the messages shown (a page's window, a frame's messages), by seq.

    A message may grow between reading the conversation's row (which keys the pressure)
    and reading its own: its count is then of exactly the blocks shown, or a live frame
    would hold a count its next event never corrects.
    """
    out: dict[int, Counted] = {}
    for row in rows:
        counted = counted_of(p, row.seq)
        if counted is None or counted.blocks != row.block_count:
            counted = counted_at(conversation, row.seq, row.block_count, p.options)
        if counted is not None:
            out[row.seq] = counted
    return out


def pressure(
    conversation: Conversation,
    options: ReplayOptions,
    *,
    query: dict[str, str] | None = None,
    policy: Policy | None = None,
    total_blocks: int | None = None,
) -> Pressure:
    """The pressure of the whole conversation for these toggles; `query` may override the
    model and the window, and count as of message `upto` (OptionError on a bad value).
    Append-only: (message count, block total) names the record's state, so a page of an
    unchanged record reuses its answer (`total_blocks`: `selectors.block_total`, when the
    caller has just read it)."""
    query = query or {}
    upto = _upto(query.get("upto"), conversation.message_count)
    if total_blocks is None:
        total_blocks = selectors.block_total(conversation)
    trigger = policy.trigger if policy is not None and policy.name == "clear_tool_uses" else 0
    state = (
        conversation.id, conversation.message_count, total_blocks,
        options, tuple(sorted(query.items())), trigger, upto,
        repr([conversation.metadata.get(k) for k in ("model", "context_window")]),
    )  # fmt: skip
    found = pressure_cache.get(state)
    if found is not None:
        return found
    counted = message_counts(conversation, options)
    result = _pressure(conversation, options, counted, query, policy, upto=upto)
    if len(counted) == conversation.message_count:  # not raced by an append meanwhile
        pressure_cache.put(state, result)
    return result


def _upto(value: str | None, message_count: int) -> int | None:
    """`?upto=SEQ`: a stored seq, or None for the whole record."""
    if value is None or value == "":
        return None
    if not value.isascii() or not value.isdigit() or int(value) >= message_count:
        last = f"0 to {message_count - 1}" if message_count else "none: the record is empty"
        raise OptionError("upto", f"upto must be the seq of a stored message ({last}).")
    return int(value)


def _pressure(
    conversation: Conversation,
    options: ReplayOptions,
    every: Sequence[Counted],
    query: dict[str, str],
    policy: Policy | None,
    *,
    upto: int | None = None,
    window: context_windows.Window | None = None,
    measured: bool = True,
    unrecorded: nr.Unrecorded | None = None,
) -> Pressure:
    """The figures of `every` counted message as of `upto`. A compacted record (a preview's
    `after`) passes the window of the record it came from, and is not `measured`: its
    provider measurements were of the uncompacted requests."""
    counted = [c for c in every if c.seq <= upto] if upto is not None else list(every)
    payload = tokens.total_of([c.count for c in counted], options.shape)
    if window is None:
        models = (c.model for c in reversed(counted))
        window = context_windows.resolve(query, conversation.metadata, models)
    trigger = policy.trigger if policy is not None and policy.name == "clear_tool_uses" else (
        compact.DEFAULT_TRIGGER
    )  # fmt: skip
    running = payload.overhead
    cumulative: list[int] = []
    trigger_seq = None
    for c in counted:
        running += c.count.tokens
        cumulative.append(running)
        if trigger_seq is None and running >= trigger:
            trigger_seq = c.seq
    headline = _headline(
        conversation.metadata, every, counted, payload.overhead, window, upto, measured, unrecorded
    )
    return Pressure(
        options, tuple(counted), payload, window, trigger, trigger_seq, tuple(cumulative), headline
    )


def _headline(
    metadata: dict[str, Any],
    every: Sequence[Counted],
    counted: Sequence[Counted],
    overhead: int,
    window: context_windows.Window,
    upto: int | None,
    measured: bool,
    unrecorded: nr.Unrecorded | None,
) -> Headline:
    """docs/contract.md §7's next request, unrecorded, largest and compactions, from the
    counts already made (nothing is read or counted again)."""
    last_seq = counted[-1].seq if counted else -1
    marks = nr.boundary_marks(metadata)  # each names a seq, in seq order
    kept = [seq for seq in (cast(int, m["seq"]) for m in marks) if seq <= last_seq]
    boundary = kept[-1] if kept else None
    since = [c for c in every if boundary is None or c.seq >= boundary]
    if unrecorded is None:
        unrecorded = nr.unrecorded([c.figure(measured=measured) for c in since], overhead)
    request = [c for c in since if c.seq <= last_seq]
    figures = [c.figure(measured=measured) for c in request]
    after: dict[int, list[nr.MessageFigure]] = {}
    for i, seq in enumerate(kept):
        end = kept[i + 1] if i + 1 < len(kept) else last_seq + 1
        after[seq] = [c.figure() for c in counted[seq:end] if seq <= c.seq < end]
    return Headline(
        upto,
        boundary,
        nr.next_request(
            figures,
            overhead=overhead,
            model=window.model or None,
            unrecorded_tokens=unrecorded.tokens,
        ),  # fmt: skip
        unrecorded,
        tuple(nr.largest(b for c in request for b in nr.heavy_blocks(c.seq, c.count))),
        tuple(nr.compactions([m for m in marks if cast(int, m["seq"]) <= last_seq], after)),
    )


def preview(
    conversation: Conversation,
    options: ReplayOptions,
    policy: Policy,
    *,
    query: dict[str, str] | None = None,
) -> Preview:
    """Compact the whole record with `policy` and count what is left; unchanged blocks are
    counted from the cache, changed ones afresh."""
    query = query or {}
    rows = selectors.message_rows(conversation)
    before = pressure(conversation, options, query=query, policy=policy)
    compacted = _compacted(conversation, rows, options, policy, before.total)
    by_seq = {c.seq: c for c in before.messages}
    rows_by_seq = {r.seq: r for r in rows}
    counted: list[Counted] = []
    for seq, message in zip(compacted.seqs, compacted.messages, strict=True):
        changed = [j for j in range(len(message.blocks)) if (seq, j) in compacted.changed]
        old = by_seq.get(seq)
        if old is not None and not changed:
            counted.append(old)
            continue
        row = rows_by_seq[seq]
        own = []
        for j, (block_row, block) in enumerate(zip(row.blocks, message.blocks, strict=True)):
            key = (conversation.id, seq, block_row.seq, _toggles(block, options))
            cached = None if j in changed else blocks_cache.get(key)
            own.append(
                cached
                if cached is not None
                else tokens.block_tokens(block, vision=options.vision, shape=options.shape)
            )
        count = tokens.message_count(
            message, vision=options.vision, shape=options.shape, counts=own
        )
        model = old.model if old is not None else ""
        usage = old.usage if old is not None else None
        turn, summary = (old.turn, old.summary) if old is not None else (None, False)
        counted.append(Counted(seq, row.role, count, usage, model, len(row.blocks), turn, summary))
    after = _pressure(
        conversation, options, counted, query, policy,
        window=before.window, measured=False, unrecorded=before.headline.unrecorded,
    )  # fmt: skip
    return Preview(before, after, compacted, policy)


def compacted_payload(
    conversation: Conversation, options: ReplayOptions, policy: Policy
) -> replay.Payload:
    """The payload after `policy`: the unchanged projection of the compacted record."""
    rows = selectors.message_rows(conversation)
    input_tokens = None
    if policy.name == "clear_tool_uses":
        input_tokens = pressure(conversation, options, policy=policy).total
    compacted = _compacted(conversation, rows, options, policy, input_tokens)
    return replay.project(compacted.messages, vision=options.vision, shape=options.shape)


def _compacted(
    conversation: Conversation,
    rows: Sequence[selectors.MessageRow],
    options: ReplayOptions,
    policy: Policy,
    input_tokens: int | None,
) -> Compacted:
    """The stored record after `policy`, its boundaries read from the conversation."""
    return compact.compact(
        selectors.stored_messages(rows),
        policy,
        seqs=[r.seq for r in rows],
        boundaries=compact.boundary_seqs(conversation.metadata),
        vision=options.vision,
        shape=options.shape,
        input_tokens=input_tokens,
    )


def _usage_data(counted: Counted, input_estimate: int) -> dict[str, Any] | None:
    usage = counted.usage
    if usage is None:
        return None
    output_estimate = counted.count.tokens - counted.count.framing
    # An output below the estimate of the reply itself is not a count (Claude Code records 1
    # for some streamed turns): `output` is then null and `output_recorded` says what was.
    output = tokens.trusted_output(usage, output_estimate)
    return {
        "input": usage.input,
        "output": output,
        "output_recorded": usage.output,
        "input_estimate": input_estimate,
        "output_estimate": output_estimate,
        "input_ratio": tokens.ratio(usage.input, input_estimate),
        "output_ratio": tokens.ratio(output, output_estimate),
    }


def message_data(p: Pressure) -> list[dict[str, Any]]:
    """Each message's count as the context API answers it (in seq order)."""
    out = []
    before = p.payload.overhead
    for counted, cumulative in zip(p.messages, p.cumulative, strict=True):
        item: dict[str, Any] = {
            "seq": counted.seq,
            "role": counted.role,
            "tokens": counted.count.tokens,
            "framing": counted.count.framing,
            "by_kind": dict(counted.count.by_kind),
            "cumulative": cumulative,
        }
        usage = _usage_data(counted, before)
        if usage is not None:
            item["usage"] = usage
        out.append(item)
        before = cumulative
    return out


VIEW_KEYS = ("model", "window", "upto")  # the query keys a count's view takes


def context_data(p: Pressure, preview: Preview | None = None) -> dict[str, Any]:
    """GET /api/conversations/ID/context (docs/contract.md §7): counts by message and kind, the
    total (messages + `overhead`), the window and where the compaction trigger is reached."""
    data: dict[str, Any] = {
        "tokenizer": tokens.TOKENIZER,
        "estimated": True,
        "shape": p.options.shape,
        "vision": p.options.vision,
        "model": p.window.model or None,
        "window": p.window.tokens,
        "window_source": p.window.source,
        "overhead": p.payload.overhead,
        "total": p.total,
        "by_kind": p.payload.by_kind(),
        "threshold": {"tokens": p.trigger, "seq": p.trigger_seq},
        "upto": p.messages[-1].seq if p.messages else None,
        "next_request": p.headline.next.as_json(),
        "unrecorded": p.headline.unrecorded.as_json(),
        "largest": [block.as_json() for block in p.headline.largest],
        "compactions": [c.as_json() for c in p.headline.compactions],
        "messages": message_data(p),
        "compact": None,
    }
    if preview is not None:
        data["compact"] = {
            "policy": preview.policy.name,
            "parameters": preview.policy.query(),
            "before": preview.before.total,
            "after": preview.after.total,
            "changed": [{"seq": s, "block": b} for s, b in sorted(preview.compacted.changed)],
            "dropped": preview.compacted.dropped,
            "note": preview.compacted.note,
        }
    return data

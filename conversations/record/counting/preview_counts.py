"""Compaction previews counted from the stored figures (docs/contract.md §7), and the context
API's answer.

A policy's decisions never depend on the texts it clears (`policy_reads`: which blocks,
from their kinds, order, names and stored counts), and what it puts in their place is its
own short marker. So a preview reads no text: the request after the policy is the stored
running totals of the messages it keeps, moved by what each changed message counts anew
(its blocks' stored counts, the changed ones' markers counted), and a page shows it a
window at a time through `Preview.rewrite`.
"""

from __future__ import annotations

import bisect
import dataclasses
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

from cachetools import LRUCache, cached

from conversations.core import replay
from conversations.core.blocks import BlockKind, Role, kind_of
from conversations.core.counting import compact, stored_counts, tokens
from conversations.core.counting import next_request as nr
from conversations.core.counting.compact import Compacted, Policy
from conversations.core.counting.stored_counts import StoredFacts
from conversations.core.options import ReplayOptions, ShapeSource
from conversations.record.counting import policy_reads
from conversations.record.counting.token_counts import (
    READ_BATCH,
    Stored,
    counted_message,
    pressure,
    trigger_of,
    window_state,
)
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.reads import selectors
from conversations.record.reads.rows import (
    Counted,
    Headline,
    MessageRow,
    Pressure,
    Preview,
    stored_messages,
)


def policy_result(
    conversation: Conversation, options: ReplayOptions, policy: Policy, input_tokens: int
) -> policy_reads.PolicyResult:
    """What `policy` does to the whole record (kept per record state); `input_tokens`: the
    uncompacted request's, which only clear_tool_uses's trigger reads."""
    return policy_reads.compacted_blocks(
        conversation, policy, vision=options.vision, shape=options.shape,
        input_tokens=input_tokens if policy.name == "clear_tool_uses" else None,
    )  # fmt: skip


# (conversation, its state, toggles, view, policy) → the preview: a page of an unchanged
# record reads only its window (the record is append-only, as for `pressure_cache`).
preview_cache: LRUCache[tuple[Any, ...], Preview] = LRUCache(maxsize=4)


def _preview_key(
    conversation: Conversation,
    options: ReplayOptions,
    policy: Policy,
    *,
    query: dict[str, str] | None = None,
) -> tuple[Any, ...]:
    """A preview's record state: the counts, what the metadata tells the count (the model,
    the window, the compaction boundaries), the toggles, the view and the policy."""
    return (
        conversation.id, conversation.message_count, conversation.block_count,
        *window_state(conversation.metadata), policy_reads.boundary_state(conversation),
        options, tuple(sorted((query or {}).items())), policy,
    )  # fmt: skip


@cached(preview_cache, key=_preview_key, lock=threading.Lock())
def preview(
    conversation: Conversation,
    options: ReplayOptions,
    policy: Policy,
    *,
    query: dict[str, str] | None = None,
) -> Preview:
    """The request before and after `policy` (as of `upto`), from the stored figures: no
    text is read, only the policy's markers are counted (kept per record state)."""
    query = query or {}
    before = pressure(conversation, options, query=query, policy=policy)
    result = policy_result(conversation, options, policy, before.total)
    changes = result.whole()
    last = before.message_total - 1
    first = result.kept_from
    dropped = min(first, conversation.message_count) if policy.name == "boundary" else 0
    compacted = Compacted((), (), frozenset(changes), dropped, result.note)
    moved: dict[int, tuple[int, dict[str, int]]] = {}
    kind_moves: dict[str, int] = {}  # what every change moves the request by, by kind
    for (seq, _), changed in changes.items():
        if first <= seq <= last:
            # A changed block is never blank (its prose names its kind), before or after: so
            # its message moves by what the block's own count moves, under its kind.
            n, kinds = moved.get(seq, (0, {}))
            kind = "system" if changed.role == "system" else kind_of(changed.block)
            step = changed.own - changed.tokens
            kinds[kind] = kinds.get(kind, 0) + step
            kind_moves[kind] = kind_moves.get(kind, 0) + step
            moved[seq] = (n + step, kinds)
    after = _after(conversation, options, before, policy, first, last, moved, kind_moves)
    start = max(first, before.headline.boundary or 0)
    heavy = _largest(conversation, options, result, changes, start, last)
    after = dataclasses.replace(
        after, headline=dataclasses.replace(after.headline, largest=tuple(heavy))
    )
    return Preview(before, after, compacted, policy, result.in_window)


def _after(
    conversation: Conversation,
    options: ReplayOptions,
    before: Pressure,
    policy: Policy,
    first: int,
    last: int,
    moved: Mapping[int, tuple[int, dict[str, int]]],
    kind_moves: Mapping[str, int],
) -> Pressure:
    """The request after the policy: the stored running totals over the kept messages
    [first, last], moved by each changed message's difference. Not measured (the
    provider measured the uncompacted requests); its window, what it lacks and its
    boundaries are the record's."""
    overhead = before.payload.overhead
    stored = Stored(conversation, options, last if last >= 0 else None)
    changed = sorted(moved)
    running = [0]  # running[i]: what the first i changed messages move the total by
    for seq in changed:
        running.append(running[-1] + moved[seq][0])
    kinds: dict[str, int] = dict.fromkeys(tokens.COUNT_KINDS, 0)
    below = 0  # the estimate of the messages before `first`
    if first <= last:
        kinds = stored_counts.add_kinds(kinds, before.payload.kinds)
        if first > 0:
            under = Stored(conversation, options, first - 1).payload()
            below = under.total - under.overhead
            kinds = stored_counts.add_kinds(kinds, {}, under.kinds)
        kinds = stored_counts.add_kinds(kinds, kind_moves)

    def through(seq: int) -> int:
        """The estimate after the policy of the messages in [first, seq], no overhead."""
        if seq < first:
            return 0
        if seq == last:
            return before.total - overhead - below + running[-1]
        return stored.through(seq) - below + running[bisect.bisect_right(changed, seq)]

    total = overhead + (through(last) if first <= last else 0)
    trigger = trigger_of(policy)
    trigger_seq = None
    if first <= last and total >= trigger:
        low, high = first, last  # the running total never falls: a binary search
        while low < high:
            mid = (low + high) // 2
            if overhead + through(mid) >= trigger:
                high = mid
            else:
                low = mid + 1
        trigger_seq = low
    head = before.headline
    start = max(first, head.boundary or 0)
    request = through(last) - through(start - 1) if start <= last else 0
    # The request's messages, as one figure: none is measured, so next_request is the
    # estimate of them all.
    figures = [nr.MessageFigure(last, "user", request, None)] if start <= last else []
    headline = Headline(
        head.upto,
        head.boundary,
        nr.next_request(
            figures,
            overhead=overhead,
            model=before.window.model or None,
            unrecorded_tokens=head.unrecorded.tokens,
        ),  # fmt: skip
        head.unrecorded,
        (),
        head.compactions,
    )
    payload = tokens.PayloadCount((), overhead, total, cast(dict[tokens.CountKind, int], kinds))
    return Pressure(
        options, payload, before.window, trigger, trigger_seq, headline,
        max(0, last - first + 1), None, before.dropped, first=first, moved=moved,
    )  # fmt: skip


def _largest(
    conversation: Conversation,
    options: ReplayOptions,
    result: policy_reads.PolicyResult,
    changes: Mapping[tuple[int, int], policy_reads.Changed],
    start: int,
    last: int,
) -> list[nr.HeavyBlock]:
    """The heaviest blocks of the request after the policy, from `start` to `last`: each
    changed block sends its replacement; every other block sends what it sent before (a
    changed block is never blank, so no blank run around it changes), so the others are
    found among the heaviest stored blocks the policy keeps (and, for other toggles, the
    blocks of the messages whose count varies, as `Stored.largest` finds them)."""
    if start > last:
        return []
    heavy = [
        nr.HeavyBlock(
            seq, block, tokens.count_kind_of(kind_of(c.block), cast(Role, c.role)), c.own,
        )
        for (seq, block), c in changes.items()
        if start <= seq <= last
    ]  # fmt: skip
    rows = Block.objects.filter(
        message__conversation=conversation, message__seq__gte=start, message__seq__lte=last,
        tokens__gt=0,
    )  # fmt: skip
    rows, more = result.unchanged(rows)
    wanted = 2 * nr.LARGEST + more
    top = rows.order_by("-tokens", "message__seq", "seq").values_list("message_id", flat=True)
    candidates = set(top[:wanted])
    if (options.vision, options.shape) != stored_counts.DEFAULT:
        varying = Message.objects.filter(
            conversation=conversation, varies=True, seq__gte=start, seq__lte=last
        ).order_by("seq")
        candidates |= set(varying.values_list("pk", flat=True)[: 10 * nr.LARGEST])
    messages = {
        pk: (seq, role, data or {})
        for pk, seq, role, data in Message.objects.filter(pk__in=candidates).values_list(
            "pk", "seq", "role", "counts"
        )
    }  # fmt: skip
    facts: dict[int, list[StoredFacts]] = {pk: [] for pk in messages}
    found = (
        Block.objects.filter(message_id__in=list(messages))
        .order_by("message_id", "seq")
        .values_list("message_id", "seq", "type", "tokens", "media_type", "width", "height")
    )
    for pk, block, kind, n, media, width, height in found:
        seq, _, data = messages[pk]
        changed = changes.get((seq, block))
        if changed is not None:
            facts[pk].append(StoredFacts(cast(BlockKind, kind), changed.own))
            continue
        blank = block in stored_counts.blank_of(data)
        facts[pk].append(StoredFacts(cast(BlockKind, kind), n or 0, blank, media, width, height))
    for pk, (seq, role, _) in messages.items():
        count = stored_counts.exact_count(
            cast(Role, role), facts[pk], vision=options.vision, shape=options.shape
        )
        heavy.extend(b for b in nr.heavy_blocks(seq, count) if (seq, b.block) not in changes)
    return nr.largest(heavy)


def payload_result(
    conversation: Conversation, options: ReplayOptions, policy: Policy | None
) -> policy_reads.PolicyResult | None:
    """What `policy` does to the whole record, for its payload (`streams.replay_pieces`;
    None without a policy: the whole record): clear_tool_uses's trigger reads the
    uncompacted request's tokens from the stored figures, as `compacted_payload` does."""
    if policy is None:
        return None
    input_tokens = 0
    if policy.name == "clear_tool_uses":
        input_tokens = pressure(conversation, options, policy=policy).total
    return policy_result(conversation, options, policy, input_tokens)


def compacted_payload(
    conversation: Conversation, options: ReplayOptions, policy: Policy
) -> replay.Payload:
    """The payload after `policy`: the unchanged projection of the compacted record, read
    whole (the streamed reads send its bytes: `streams.replay_pieces`)."""
    rows = selectors.message_rows(conversation)
    input_tokens = None
    if policy.name == "clear_tool_uses":
        input_tokens = pressure(conversation, options, policy=policy).total
    compacted = _compacted(conversation, rows, options, policy, input_tokens)
    return replay.project(compacted.messages, vision=options.vision, shape=options.shape)


def _compacted(
    conversation: Conversation,
    rows: Sequence[MessageRow],
    options: ReplayOptions,
    policy: Policy,
    input_tokens: int | None,
) -> Compacted:
    """The stored record after `policy`, its boundaries read from the conversation."""
    return compact.compact(
        stored_messages(rows),
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


def message_data(conversation: Conversation, p: Pressure) -> list[dict[str, Any]]:
    """Each message's count as the context API answers it (in seq order), read from the
    stored figures in batches."""
    out = []
    before = p.payload.overhead
    for counted in _every(conversation, p):
        cumulative = before + counted.count.tokens
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


def _every(conversation: Conversation, p: Pressure) -> Iterator[Counted]:
    """The messages `p` counts, in batches of their stored figures (a preview's changed
    ones with their counts after the policy)."""
    if p.messages:
        yield from p.messages
        return
    after = p.first - 1
    last = p.first + p.message_total - 1
    while after < last:
        rows = list(
            Message.objects.filter(conversation=conversation, seq__gt=after, seq__lte=last)
            .order_by("seq")
            .values_list("seq", "role", "counts", "metadata", "block_count")[:READ_BATCH]
        )
        if not rows:
            return
        for seq, role, data, metadata, blocks in rows:
            counted = counted_message(seq, role, data, metadata, blocks, p.options)
            moved = p.moved.get(seq)
            if moved is not None:
                was = counted.count
                count = tokens.MessageCount(
                    was.tokens + moved[0],
                    cast(dict[tokens.CountKind, int], stored_counts.add_kinds(was.by_kind,
                                                                              moved[1])),
                    was.framing,
                    (),
                )  # fmt: skip
                counted = dataclasses.replace(counted, count=count)
            yield counted
        after = rows[-1][0]


def _last_seq(p: Pressure) -> int | None:
    if p.messages:
        return p.messages[-1].seq
    return p.first + p.message_total - 1 if p.message_total else None


def context_data(
    conversation: Conversation,
    p: Pressure,
    preview: Preview | None = None,
    *,
    shape_source: ShapeSource = "default",
) -> dict[str, Any]:
    """GET /api/conversations/ID/context (docs/contract.md §7): counts by message and kind, the
    total (messages + `overhead`), the window and where the compaction trigger is reached."""
    data: dict[str, Any] = {
        "tokenizer": tokens.TOKENIZER,
        "estimated": True,
        "shape": p.options.shape,
        "shape_source": shape_source,
        "vision": p.options.vision,
        "model": p.window.model or None,
        "window": p.window.tokens,
        "window_source": p.window.source,
        "overhead": p.payload.overhead,
        "total": p.total,
        "by_kind": p.payload.by_kind(),
        "threshold": {"tokens": p.trigger, "seq": p.trigger_seq},
        "upto": _last_seq(p),
        "next_request": p.headline.next.as_json(),
        "unrecorded": p.headline.unrecorded.as_json(),
        "largest": [block.as_json() for block in p.headline.largest],
        "compactions": [c.as_json() for c in p.headline.compactions],
        "messages": message_data(conversation, p),
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

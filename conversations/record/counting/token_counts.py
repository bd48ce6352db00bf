"""Token counts of stored conversations (docs/contract.md §7), read from the figures the
services stored with the blocks (`services.token_figures`): nothing here counts stored text.

The request's total and kinds are one row (the running totals at `upto`), plus the few
messages whose count depends on the toggles (`varies`: images, system messages) when the
toggles are not the default ones; the next request reads the measured turns through
their index, the heaviest blocks the ten heaviest messages, each boundary one row. A
page's margin counts are its window's rows. The answer is also kept per record state in a
small in-process cache (`pressure_cache`), so a warm page reads only the state's key.
"""

from __future__ import annotations

import bisect
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

from cachetools import LRUCache
from django.db import connection

from conversations.core import list_status
from conversations.core.blocks import BlockKind, Role
from conversations.core.counting import compact, context_windows, stored_counts, tokens
from conversations.core.counting import next_request as nr
from conversations.core.counting.compact import Policy
from conversations.core.counting.stored_counts import StoredFacts
from conversations.core.options import OptionError, ReplayOptions
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.reads import selectors
from conversations.record.reads.rows import (
    Counted,
    Headline,
    MeasuredInput,
    Pressure,
    PreviewRow,
)

SUMMARY_MESSAGES = 20  # messages after a boundary searched for the summary it left
FIRST_TURN_ROWS = 20  # measured messages after a boundary read for its first turn
READ_BATCH = 2000  # rows read at once when a whole record is walked
MODEL_MESSAGES = 20  # messages read at once, newest first, for the model named by `upto`


# The models' windows are read on every count: their table loads with this module (with the
# URLs, at a server's start-up), not on the first page after a restart.
context_windows.preload()

# (conversation, message count, block total, toggles, overrides, trigger, model and window)
# → Pressure. Pages run in threads, and cachetools' caches are not thread-safe: the lock.
pressure_cache: LRUCache[tuple[Any, ...], Pressure] = LRUCache(maxsize=32)
_pressure_lock = threading.Lock()


def counted_message(
    seq: int, role: str, data: Mapping[str, Any] | None, metadata: Any, blocks: int,
    options: ReplayOptions,
) -> Counted:  # fmt: skip
    count = stored_counts.count(role, data or {}, vision=options.vision, shape=options.shape)
    meta = metadata if isinstance(metadata, dict) else {}
    model = meta.get("model")
    return Counted(
        seq, role, count, tokens.usage_of(meta), model if isinstance(model, str) else "",
        blocks, nr.turn_of(meta), meta.get("isCompactSummary") is True,
    )  # fmt: skip


def counted_shown(
    conversation: Conversation, p: Pressure, rows: Sequence[PreviewRow]
) -> dict[int, Counted]:
    """The counts of the messages shown (a page's window, a frame's messages), by seq,
    from the stored figures read with their rows (no query).

    Figures that name another block count than the row's are counted again for exactly
    the blocks shown, or a live frame would hold a count its next event never corrects.
    """
    out: dict[int, Counted] = {}
    for row in rows:
        data = row.counts
        if data is None:
            continue
        if int(data.get("n", 0)) != row.block_count:
            found = counted_at(conversation, row.seq, row.block_count, p.options)
            if found is not None:
                out[row.seq] = found
            continue
        out[row.seq] = counted_message(
            row.seq, row.role, data, row.metadata, row.block_count, p.options
        )
    return out


def counted_at(
    conversation: Conversation, seq: int, blocks: int, options: ReplayOptions
) -> Counted | None:
    """One message's count as it stood with its first `blocks` blocks (from its blocks'
    stored counts); None if it has fewer."""
    message = (
        Message.objects.filter(conversation=conversation, seq=seq)
        .values_list("pk", "role", "counts", "metadata")
        .first()
    )
    if message is None:
        return None
    pk, role, data, metadata = message
    facts = _facts(pk, data or {}, stop=blocks)
    if len(facts) < blocks:
        return None
    role = cast(Role, role)
    exact = stored_counts.exact_count(role, facts, vision=options.vision, shape=options.shape)
    meta = metadata if isinstance(metadata, dict) else {}
    model = meta.get("model")
    return Counted(
        seq, role, exact, tokens.usage_of(meta), model if isinstance(model, str) else "",
        blocks, nr.turn_of(meta), meta.get("isCompactSummary") is True,
    )  # fmt: skip


def _facts(
    message_id: int, data: Mapping[str, Any], *, stop: int | None = None
) -> list[StoredFacts]:
    """A stored message's blocks as its count needs them (no texts)."""
    blank = stored_counts.blank_of(data)
    rows = Block.objects.filter(message_id=message_id)
    if stop is not None:
        rows = rows.filter(seq__lt=stop)
    return [
        StoredFacts(cast(BlockKind, kind), n or 0, seq in blank, media, width, height)
        for seq, kind, n, media, width, height in rows.order_by("seq").values_list(
            "seq", "type", "tokens", "media_type", "width", "height"
        )
    ]


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
        *window_state(conversation.metadata),
    )  # fmt: skip
    with _pressure_lock:
        found = pressure_cache.get(state)
    if found is not None:
        return found
    result = Stored(conversation, options, upto).pressure(query, policy)
    with _pressure_lock:
        pressure_cache[state] = result
    return result


def window_state(metadata: Any) -> tuple[str | int | float | bool | None, ...]:
    """What a conversation's metadata tells the count (its model and context window), as
    hashable values for a cache key: a JSON value that is not a scalar as its JSON text."""
    meta = metadata if isinstance(metadata, dict) else {}
    return tuple(_scalar(meta.get(key)) for key in ("model", "context_window"))


def _scalar(value: Any) -> str | int | float | bool | None:
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return json.dumps(value, sort_keys=True)


def _upto(value: str | None, message_count: int) -> int | None:
    """`?upto=SEQ`: a stored seq, or None for the whole record."""
    if value is None or value == "":
        return None
    if not value.isascii() or not value.isdigit() or int(value) >= message_count:
        last = f"0 to {message_count - 1}" if message_count else "none: the record is empty"
        raise OptionError("upto", f"upto must be the seq of a stored message ({last}).")
    return int(value)


def trigger_of(policy: Policy | None) -> int:
    return policy.trigger if policy is not None and policy.name == "clear_tool_uses" else (
        compact.DEFAULT_TRIGGER
    )  # fmt: skip


class Stored:
    """One conversation's stored figures for one pair of toggles, as of message `upto`
    (None: its last as read now). The running totals are the default toggles'; for other
    toggles each running total moves by what the varying messages before it count
    differently (`_offset`)."""

    def __init__(self, conversation: Conversation, options: ReplayOptions, upto: int | None):
        self.conversation = conversation
        self.options = options
        self.upto = upto
        self.default = (options.vision, options.shape) == stored_counts.DEFAULT
        # At most the conversation's row as read: a message appended since is not counted
        # under that state's key.
        top = conversation.message_count - 1 if upto is None else upto
        last_row = self._messages().filter(seq__lte=top).order_by("-seq")
        found = last_row.values_list("seq", "cumulative", "counts").first()
        self.last, through, data = found if found is not None else (-1, 0, {})
        self.through_default = through or 0
        self.kinds_default: dict[str, int] = dict((data or {}).get("run", {}))
        # (seq, this toggles' count − the default's, by kind) of each varying message.
        self.varying: list[tuple[int, int, dict[str, int]]] = []
        self.offsets: list[int] = []  # running sum of those differences
        if not self.default and self.last >= 0:
            rows = self._messages().filter(varies=True, seq__lte=self.last).order_by("seq")
            running = 0
            for seq, role, data_v in rows.values_list("seq", "role", "counts"):
                mine = self._count(role, data_v)
                base = stored_counts.count(role, data_v or {}, vision=True, shape="openai")
                running += mine.tokens - base.tokens
                moved = stored_counts.add_kinds(mine.by_kind, {}, base.by_kind)
                self.varying.append((seq, mine.tokens - base.tokens, moved))
                self.offsets.append(running)

    def _messages(self) -> Any:
        return Message.objects.filter(conversation=self.conversation)

    def _count(self, role: str, data: Mapping[str, Any] | None) -> tokens.MessageCount:
        return stored_counts.count(
            role, data or {}, vision=self.options.vision, shape=self.options.shape
        )

    def _offset(self, seq: int) -> int:
        """What the varying messages up to and including `seq` add for these toggles."""
        i = bisect.bisect_right([v[0] for v in self.varying], seq) if self.varying else 0
        return self.offsets[i - 1] if i else 0

    def running(self, seq: int, default_running: int) -> int:
        """This toggles' running total at `seq` from the default toggles' one."""
        return default_running + self._offset(seq)

    def through(self, seq: int) -> int:
        """The running estimate (no overhead) through message `seq`: one query (0 before
        the first message)."""
        if seq < 0:
            return 0
        value = self._messages().filter(seq=seq).values_list("cumulative", flat=True).first()
        return self.running(seq, value or 0)

    def before_seqs(self, seqs: Sequence[int]) -> dict[int, int]:
        """The running estimate (no overhead) before each of `seqs`: one query."""
        wanted = sorted({s - 1 for s in seqs if s > 0})
        found = dict(
            self._messages().filter(seq__in=wanted).values_list("seq", "cumulative")
        ) if wanted else {}  # fmt: skip
        return {s: self.running(s - 1, found.get(s - 1) or 0) if s > 0 else 0 for s in seqs}

    def payload(self) -> tokens.PayloadCount:
        kinds = dict(self.kinds_default)
        for _, _, moved in self.varying:
            kinds = stored_counts.add_kinds(kinds, moved)
        overhead = tokens.REQUEST_OVERHEAD[self.options.shape]
        total = overhead + self.running(self.last, self.through_default)
        by_kind: dict[tokens.CountKind, int] = dict.fromkeys(tokens.COUNT_KINDS, 0)
        for kind, n in kinds.items():
            by_kind[cast(tokens.CountKind, kind)] = n
        return tokens.PayloadCount((), overhead, total, by_kind)

    def trigger_seq(self, trigger: int, overhead: int) -> int | None:
        """The first message at which the running total (with overhead) reaches `trigger`."""
        need = trigger - overhead
        if self.last < 0 or self.running(self.last, self.through_default) < need:
            return None
        if not self.varying:
            found = (
                self._messages().filter(seq__lte=self.last, cumulative__gte=need)
                .order_by("seq").values_list("seq", flat=True).first()
            )  # fmt: skip
            return cast(int | None, found)
        low, high = 0, self.last  # the running total never falls: a binary search
        while low < high:
            mid = (low + high) // 2
            value = self._messages().filter(seq=mid).values_list("cumulative", flat=True).first()
            if self.running(mid, value or 0) >= need:
                high = mid
            else:
                low = mid + 1
        return low

    def models(self) -> Iterator[str]:
        """The models the messages name, newest first from `last` (the conversation's
        latest when the whole record is asked about: no message is read)."""
        if self.last == self.conversation.message_count - 1 or not self.conversation.model:
            yield self.conversation.model
            return
        top, size = self.last, MODEL_MESSAGES
        while top >= 0:
            rows = (
                self._messages().filter(seq__lte=top, seq__gt=top - size)
                .order_by("-seq").values_list("metadata", flat=True)
            )  # fmt: skip
            for metadata in rows:
                yield list_status.model_of(metadata)
            top -= size
            size *= 2

    def measured_rows(
        self, start: int, stop: int, limit: int | None = None, *, latest: bool = False
    ) -> list[nr.MeasuredRow]:
        """The measured messages with seq in [start, stop] (the first `limit`; `latest`:
        the last `CALIBRATION_MESSAGES`), with the running estimate before each one's turn
        began."""
        rows = (
            self._messages().filter(measured__isnull=False, seq__gte=start, seq__lte=stop)
            .values_list("seq", "measured", "turn_start", "cumulative", "tokens")
        )  # fmt: skip
        if latest:
            found = list(rows.order_by("-seq")[: nr.CALIBRATION_MESSAGES])[::-1]
        else:
            found = list(
                rows.order_by("seq")[:limit] if limit is not None else rows.order_by("seq")
            )
        own = {seq: (cum or 0) - (n or 0) for seq, _, _, cum, n in found}
        starts = [max(t if t is not None else seq, start) for seq, _, t, _, _ in found]
        other = self.before_seqs([s for s in starts if s not in own]) if found else {}
        out = []
        for (seq, measured, _, _, _), turn_start in zip(found, starts, strict=True):
            before = (
                self.running(turn_start - 1, own[turn_start]) if turn_start in own
                else other[turn_start]
            )  # fmt: skip
            out.append(nr.MeasuredRow(seq, measured, turn_start, before))
        return out

    def calibration(self, start: int) -> tuple[int, int]:
        """`nr.calibration` over the measured turns of the latest `CALIBRATION_MESSAGES`
        measured messages in [start, last], in one aggregate query: a turn is its first
        measured message (consecutive ones of one response are one turn), the estimate
        before it the running total before its response began."""
        table = Message._meta.db_table
        sql = f"""
            WITH m AS (
                SELECT seq, measured, cumulative, tokens,
                       CASE WHEN COALESCE(turn_start, seq) < %s THEN %s
                            ELSE COALESCE(turn_start, seq) END AS start
                FROM {table}
                WHERE conversation_id = %s AND measured IS NOT NULL AND seq >= %s AND seq <= %s
                ORDER BY seq DESC LIMIT %s
            ), l AS (
                SELECT m.*, LAG(start) OVER (ORDER BY seq) AS previous FROM m
            ), heads AS (
                SELECT seq, measured,
                       CASE WHEN start = seq THEN COALESCE(cumulative, 0) - COALESCE(tokens, 0)
                            ELSE COALESCE((SELECT p.cumulative FROM {table} p
                                           WHERE p.conversation_id = %s AND p.seq = l.start - 1),
                                          0) END AS before
                FROM l WHERE previous IS NULL OR previous <> start
            ), pairs AS (
                SELECT measured - LAG(measured) OVER (ORDER BY seq) AS grew,
                       before - LAG(before) OVER (ORDER BY seq) AS added
                FROM heads
            )
            SELECT COALESCE(SUM(CASE WHEN grew >= 0 THEN grew ELSE 0 END), 0),
                   COALESCE(SUM(CASE WHEN grew >= 0 THEN added ELSE 0 END), 0)
            FROM pairs
        """  # noqa: S608 (the table's name is the model's, never input)
        cid = Conversation._meta.pk.get_db_prep_value(self.conversation.pk, connection)
        with connection.cursor() as cursor:
            latest = nr.CALIBRATION_MESSAGES
            cursor.execute(sql, [start, start, cid, start, self.last, latest, cid])
            measured, added = cursor.fetchone()
        return int(measured), int(added)

    def latest_measured(self) -> tuple[int, int | None, int, int | None, int | None] | None:
        """The latest measured message up to `last`: (seq, turn_start, measured,
        cumulative, tokens); None when no message up to `last` is measured."""
        return cast(
            tuple[int, int | None, int, int | None, int | None] | None,
            self._messages().filter(measured__isnull=False, seq__lte=self.last)
            .order_by("-seq").values_list("seq", "turn_start", "measured", "cumulative", "tokens")
            .first(),
        )  # fmt: skip

    def basis(self, start: int, latest: tuple[int, int | None] | None = None) -> nr.Turn | None:
        """The latest measured turn in [start, last]: its latest message, then its own
        (`latest`: the latest measured message up to `last`, when already read)."""
        if latest is None:
            latest = (
                self._messages().filter(measured__isnull=False, seq__gte=start, seq__lte=self.last)
                .order_by("-seq").values_list("seq", "turn_start").first()
            )  # fmt: skip
        if latest is None or latest[0] < start:
            return None
        seq, turn_start = latest
        rows = self.measured_rows(max(start, turn_start if turn_start is not None else seq), seq)
        return nr.turns_of(rows)[-1]

    def pressure(self, query: Mapping[str, str], policy: Policy | None) -> Pressure:
        payload = self.payload()
        overhead = payload.overhead
        window = context_windows.resolve(query, self.conversation.metadata, self.models())
        trigger = trigger_of(policy)
        marks = nr.boundary_marks(self.conversation.metadata)
        kept_marks = [m for m in marks if cast(int, m["seq"]) <= self.last]
        kept = [cast(int, m["seq"]) for m in kept_marks]
        boundary = kept[-1] if kept else None
        befores = self.before_seqs(kept)
        since = befores[boundary] if boundary is not None else 0
        through = self.running(self.last, self.through_default)
        start = boundary or 0
        latest = self.latest_measured()
        basis: nr.Turn | None
        if latest is None:  # nothing measured up to `last`: no turn to read
            sums, first, basis = (0, 0), None, None
        elif self.default:  # the growth between turns summed in SQL; two turns read
            sums = self.calibration(start)
            rows = self.measured_rows(start, self.last, FIRST_TURN_ROWS)
            first = next(iter(nr.turns_of(rows)), None)
            basis = self.basis(start, latest[:2])
        else:  # each varying message moves the running totals: the turns are read
            turns = nr.turns_of(self.measured_rows(start, self.last, latest=True))
            sums = nr.calibration(turns)
            rows = self.measured_rows(start, self.last, FIRST_TURN_ROWS)
            first = next(iter(nr.turns_of(rows)), None)
            basis = turns[-1] if turns else None
        # Unrecorded carries across a boundary (a system prompt and tool definitions survive
        # a compaction): with no measured turn after the last one, the latest stretch
        # between boundaries that has one tells it. Nothing after `last` is read.
        unrecorded_since = since
        starts = [0, *kept]
        stretches = list(zip(starts, kept, strict=False))
        while first is None and stretches:
            low, high = stretches.pop()
            rows = self.measured_rows(low, high - 1, FIRST_TURN_ROWS)
            first = next(iter(nr.turns_of(rows)), None)
            unrecorded_since = befores[low] if low else 0
        unrecorded = nr.unrecorded_of(first, overhead=overhead, since=unrecorded_since)
        headline = Headline(
            self.upto,
            boundary,
            nr.next_request_at(
                basis,
                nr.factor_of(sums, window.model or None),
                overhead=overhead,
                since=since,
                through=through,
                unrecorded_tokens=unrecorded.tokens,
            ),  # fmt: skip
            unrecorded,
            tuple(self.largest(boundary or 0)),
            tuple(self.compactions(kept_marks)),
        )
        measured = None
        if latest is not None:
            seq, _, measured_input, cumulative, own = latest
            before_it = self.running(seq - 1, (cumulative or 0) - (own or 0))
            measured = MeasuredInput(seq, measured_input, overhead + before_it)
        return Pressure(
            self.options, payload, window, trigger,
            self.trigger_seq(trigger, overhead), headline, self.last + 1, measured,
            {seq: overhead + n for seq, n in befores.items()},
        )  # fmt: skip

    def largest(self, start: int) -> list[nr.HeavyBlock]:
        """The heaviest blocks from `start` to `last`: among those of the heaviest messages
        (and, for other toggles, the varying ones)."""
        if self.last < 0:
            return []
        candidates = (
            self._messages().filter(seq__gte=start, seq__lte=self.last, heaviest__gt=0)
            .order_by("-heaviest", "seq").values_list("pk", "seq", "role", "counts")
        )  # fmt: skip
        found = list(candidates[: nr.LARGEST])
        if not self.default:
            varying = (
                self._messages().filter(varies=True, seq__gte=start, seq__lte=self.last)
                .order_by("seq").values_list("pk", "seq", "role", "counts")
            )  # fmt: skip
            found += list(varying[: 10 * nr.LARGEST])
        messages = {row[0]: row for row in found}
        facts: dict[int, list[StoredFacts]] = {pk: [] for pk in messages}
        rows = (
            Block.objects.filter(message_id__in=list(messages))
            .order_by("message_id", "seq")
            .values_list("message_id", "seq", "type", "tokens", "media_type", "width", "height")
        )  # one query for the candidates' blocks (no texts)
        for message_id, seq, kind, n, media, width, height in rows:
            blank = stored_counts.blank_of(messages[message_id][3] or {})
            facts[message_id].append(
                StoredFacts(cast(BlockKind, kind), n or 0, seq in blank, media, width, height)
            )
        blocks: list[nr.HeavyBlock] = []
        for pk, seq, role, _ in messages.values():
            vision, shape = self.options.vision, self.options.shape
            count = stored_counts.exact_count(role, facts[pk], vision=vision, shape=shape)
            blocks.extend(nr.heavy_blocks(seq, count))
        return nr.largest(blocks)

    def compactions(self, marks: Sequence[Mapping[str, object]]) -> list[nr.Compaction]:
        """Each boundary with its first measured turn and the summary after it."""
        out = []
        seqs = [cast(int, m["seq"]) for m in marks]
        for i, mark in enumerate(marks):
            seq = seqs[i]
            end = seqs[i + 1] - 1 if i + 1 < len(seqs) else self.last
            turns = nr.turns_of(self.measured_rows(seq, end, FIRST_TURN_ROWS))
            summary = next(
                (s for s, metadata in self._messages()
                 .filter(seq__gte=seq, seq__lte=min(end, seq + SUMMARY_MESSAGES - 1))
                 .order_by("seq").values_list("seq", "metadata")
                 if isinstance(metadata, dict) and metadata.get("isCompactSummary") is True),
                None,
            )  # fmt: skip
            figures = []
            if turns:
                figures.append(
                    nr.MessageFigure(
                        turns[0].last, "assistant", 0, tokens.Usage(turns[0].input, None)
                    )
                )
            if summary is not None:
                figures.append(nr.MessageFigure(summary, "user", 0, None, None, True))
            figures.sort(key=lambda f: f.seq)
            out.extend(nr.compactions([mark], {seq: figures}))
        return out


def stored_tokens(
    conversation: Conversation, options: ReplayOptions, seqs: Sequence[int]
) -> dict[int, int]:
    """The stored count of each message at `seqs` (a window's): one query."""
    rows = Message.objects.filter(conversation=conversation, seq__in=list(seqs))
    return {
        seq: stored_counts.count(
            role, data or {}, vision=options.vision, shape=options.shape
        ).tokens
        for seq, role, data in rows.values_list("seq", "role", "counts")
    }


VIEW_KEYS = ("model", "window", "upto")  # the query keys a count's view takes

"""A compaction policy applied to a whole stored conversation without reading its texts, and
one window of the record as a policy leaves it (docs/contract.md §7): what the diff page
shows a window at a time.

A policy looks only at some blocks (tool results and uses, reasoning, the assistant
turns): `compacted_blocks` reads just those, their texts cut to `MARKER_CHARS` (enough to
tell a block that already holds a policy's marker: every marker is shorter), with their
stored counts, and runs the pure policy over that record. What a block is replaced by
never depends on its text, so the replacements are the policy's own.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, cast

from cachetools import LRUCache, cached
from django.db.models import Q
from django.db.models.functions import Substr

from conversations.core import replay
from conversations.core.blocks import kind_of
from conversations.core.counting import compact, tokens
from conversations.core.counting.compact import Policy
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.reads.rows import block_value
from conversations.record.reads.selectors import preview_rows

MARKER_CHARS = 64  # longer than every policy's marker
LOOKED_AT: dict[compact.PolicyName, tuple[str, ...]] = {
    "microcompact": ("tool_result",),
    "clear_tool_uses": ("tool_use", "tool_result"),
    "clear_thinking": ("reasoning",),
    "boundary": (),
}


class Changed(NamedTuple):
    """A block a policy changes: its replacement, its own stored count, its message's role
    and the replacement's own count (what the request after the policy counts differently:
    `preview_counts`)."""

    block: replay.Block
    tokens: int
    role: str
    own: int


class Markers:
    """Each distinct replacement's own count (default toggles, as stored): a policy's few
    markers, each counted once."""

    def __init__(self) -> None:
        self.known: dict[Any, int] = {}

    def own(self, key: Any, block: replay.Block) -> int:
        found = self.known.get(key)
        if found is None:
            found = self.known[key] = tokens.block_tokens(block, vision=True, shape="openai")
        return found


@dataclass(frozen=True)
class PolicyResult:
    """What a policy does to the whole record: each changed block's replacement by (message
    seq, block seq), and the seqs it leaves out (those before `kept_from`)."""

    changes: Mapping[tuple[int, int], replay.Block]
    kept_from: int
    note: str
    known: dict[int, set[int]] = dataclasses.field(default_factory=dict, compare=False)
    counted: dict[int, int] = dataclasses.field(default_factory=dict, compare=False)
    stored: Mapping[tuple[int, int], tuple[int, str]] = dataclasses.field(
        default_factory=dict, compare=False
    )  # each changed block's own stored count and its message's role

    def in_window(
        self, seq: int, message: replay.StoredMessage, offset: int = 0
    ) -> replay.StoredMessage:
        """Message `seq` (as the window read it: its blocks from block `offset`) with the
        policy's replacements."""
        blocks = tuple(self.changes.get((seq, offset + j), b) for j, b in enumerate(message.blocks))
        return replay.StoredMessage(message.role, blocks)

    def whole(self) -> Mapping[tuple[int, int], Changed]:
        """Every block the policy changes, by (message seq, block seq)."""
        markers = Markers()
        return {
            key: Changed(new, *self.stored[key], markers.own(replay.prose(new), new))
            for key, new in self.changes.items()
        }

    def changed_from(self, seq: int) -> set[int]:
        """The seqs at or after `seq` of the messages the policy changes."""
        return {s for s, _ in self.changes if s >= seq}

    def count_from(self, seq: int) -> int:
        """How many messages at or after `seq` the policy changes."""
        return len(self.changed_from(seq))

    def unchanged(self, rows: Any) -> tuple[Any, int]:
        """Block rows without those the policy changes, in SQL where it can be said there,
        and how many more rows to read for the ones left to leave out here."""
        return rows, len(self.changes)


@dataclass(frozen=True)
class CutoffResult(PolicyResult):
    """A policy that changes every block of `kind` before a cutoff (microcompact: every tool
    result but the `keep` latest) or outside the `kept` messages (clear_thinking: every
    reasoning block but those of the `keep` latest assistant turns), unless the block
    already holds its marker: found with one query, its changes per window."""

    conversation: Conversation | None = None
    kind: str = ""
    marker: str = ""
    cutoff: tuple[int, int] | None = None  # (message seq, block seq): blocks before change
    kept: frozenset[int] = frozenset()  # message seqs whose blocks do not change

    def _changes(self, seq: int, j: int, block: replay.Block) -> bool:
        if kind_of(block) != self.kind or compact.clearable_text(block) == self.marker:
            return False
        if self.cutoff is not None:
            return (seq, j) < self.cutoff
        return seq not in self.kept

    def in_window(
        self, seq: int, message: replay.StoredMessage, offset: int = 0
    ) -> replay.StoredMessage:
        blocks = tuple(
            compact.cleared(b, self.marker) if self._changes(seq, offset + j, b) else b
            for j, b in enumerate(message.blocks)
        )
        return replay.StoredMessage(message.role, blocks)

    def _rows(self, seq: int = 0) -> Any:
        """The changed blocks of the messages from `seq` on: one query (no text read)."""
        rows = Block.objects.filter(
            message__conversation=self.conversation, type=self.kind, message__seq__gte=seq
        ).exclude(text=self.marker)
        if self.cutoff is not None:
            at, block = self.cutoff
            return rows.filter(Q(message__seq__lt=at) | Q(message__seq=at, seq__lt=block))
        return rows.exclude(message__seq__in=list(self.kept))

    def changed_from(self, seq: int) -> set[int]:
        rows = self._rows(seq).order_by().values_list("message__seq", flat=True).distinct()
        return set(rows)

    def count_from(self, seq: int) -> int:
        """From the messages' stored figures (which kinds each holds), without reading
        their blocks: every message holding a block of `kind` in the range the policy
        changes, but those holding a block that already holds the marker (found through
        their partial index) and the cutoff's own message, which are asked one by one."""
        holding = Message.objects.filter(
            conversation=self.conversation, seq__gte=seq, **{"counts__o__has_key": self.kind}
        )
        special = set(
            Block.objects.filter(
                message__conversation=self.conversation, type=self.kind, text=self.marker,
                message__seq__gte=seq,
            ).values_list("message__seq", flat=True)
        )  # fmt: skip
        if self.cutoff is not None:
            at = self.cutoff[0]
            holding = holding.filter(seq__lt=at)
            special.add(at)
        else:
            holding = holding.exclude(seq__in=list(self.kept))
        plain = holding.exclude(seq__in=list(special)).count()
        asked = self._rows(seq).filter(message__seq__in=list(special))
        return int(plain + asked.order_by().values_list("message__seq").distinct().count())

    def unchanged(self, rows: Any) -> tuple[Any, int]:
        changed = Q(type=self.kind) & ~Q(text=self.marker)
        if self.cutoff is not None:
            at, block = self.cutoff
            changed &= Q(message__seq__lt=at) | Q(message__seq=at, seq__lt=block)
        else:
            changed &= ~Q(message__seq__in=list(self.kept))
        return rows.exclude(changed), 0

    def whole(self) -> Mapping[tuple[int, int], Changed]:
        # Read again for each preview computed (previews are kept, this result is kept
        # longer: it holds no per-block data, so a record's many views stay small).
        rows = self._rows().order_by("message__seq", "seq")
        markers = Markers()
        found = {}
        for seq, block, call_id, name, is_error, n, role in rows.values_list(
            "message__seq", "seq", "call_id", "name", "is_error", "tokens", "message__role"
        ):
            new = compact.cleared(
                replay.ToolResultBlock(call_id, name, "", is_error)
                if self.kind == "tool_result" else replay.ReasoningBlock(""),
                self.marker,
            )  # fmt: skip
            # Its count depends on its prose: the marker, and a result's name and flag.
            own = markers.own((name, is_error), new)
            found[(seq, block)] = Changed(new, n or 0, role, own)
        return found


def _cutoff_result(conversation: Conversation, policy: Policy) -> CutoffResult | None:
    """microcompact and clear_thinking without reading the blocks they look at."""
    if policy.name == "microcompact":
        found: tuple[int, int] | None = None
        if policy.keep:
            # The latest messages holding a tool result (their stored figures say so), then
            # their results: no read of every block.
            holding = (
                Message.objects.filter(conversation=conversation, counts__o__has_key="tool_result")
                .order_by("-seq").values_list("pk", flat=True)[: policy.keep]
            )  # fmt: skip
            latest = (
                Block.objects.filter(message_id__in=list(holding), type="tool_result")
                .order_by("-message__seq", "-seq")
                .values_list("message__seq", "seq")[policy.keep - 1 : policy.keep]
            )
            found = next(iter(latest), None)
            if found is None:  # no more results than it keeps
                return CutoffResult(
                    {}, 0, _within_keep(conversation, policy.keep), conversation=conversation,
                    kind="tool_result", marker=compact.CLEARED_RESULT, cutoff=(-1, -1),
                )  # fmt: skip
        return CutoffResult(
            {}, 0, _within_keep(conversation, policy.keep), conversation=conversation,
            kind="tool_result", marker=compact.CLEARED_RESULT,
            cutoff=found if found is not None else (1 << 62, 0),
        )  # fmt: skip
    if policy.name == "clear_thinking":
        assistant = Message.objects.filter(conversation=conversation, role="assistant")
        kept = frozenset(assistant.order_by("-seq").values_list("seq", flat=True)[: policy.keep])
        if not policy.keep:
            kept = frozenset()
        outside = Block.objects.filter(message__conversation=conversation, type="reasoning")
        note = "" if outside.exclude(message__seq__in=list(kept)).exists() else (
            "No reasoning outside the kept assistant turns."
        )  # fmt: skip
        return CutoffResult(
            {}, 0, note, conversation=conversation, kind="reasoning",
            marker=compact.CLEARED_REASONING, cutoff=None, kept=kept,
        )  # fmt: skip
    return None


def _within_keep(conversation: Conversation, keep: int) -> str:
    """microcompact's note when the record holds no more tool results than it keeps (as the
    pure policy says it; "" otherwise): one count of at most keep + 1 rows."""
    results = Block.objects.filter(message__conversation=conversation, type="tool_result")
    n = results.order_by()[: keep + 1].count()
    return f"{n} tool results, all within keep={keep}." if n <= keep else ""


# (conversation, its state, policy, toggles, input tokens) → what the policy does; and
# (…, seq) → the messages it changes from seq on. The record is append-only, so a state
# (message count, block count, boundaries) names the answer, as for the pressure.
results_cache: LRUCache[tuple[Any, ...], PolicyResult] = LRUCache(maxsize=16)


def boundary_state(conversation: Conversation) -> tuple[int, ...]:
    """The compaction boundaries the metadata names: with the counts, a policy's state."""
    return tuple(compact.boundary_seqs(conversation.metadata))


def _state(conversation: Conversation) -> tuple[Any, ...]:
    return (
        conversation.id, conversation.message_count, conversation.block_count,
        boundary_state(conversation),
    )  # fmt: skip


def count_from(result: PolicyResult, seq: int) -> int:
    """`result.count_from(seq)`, kept with the result (per record state)."""
    found = result.counted.get(seq)
    if found is None:
        found = result.counted[seq] = result.count_from(seq)
    return found


def changed_from(result: PolicyResult, seq: int) -> set[int]:
    """`result.changed_from(seq)`, kept with the result (per record state)."""
    found = result.known.get(seq)
    if found is None:
        found = result.known[seq] = result.changed_from(seq)
    return found


def _results_key(
    conversation: Conversation, policy: Policy, *, vision: bool, shape: replay.Shape,
    input_tokens: int | None,
) -> tuple[Any, ...]:  # fmt: skip
    return (*_state(conversation), policy, vision, shape, input_tokens)


@cached(results_cache, key=_results_key, lock=threading.Lock())
def compacted_blocks(
    conversation: Conversation, policy: Policy, *, vision: bool, shape: replay.Shape,
    input_tokens: int | None,
) -> PolicyResult:  # fmt: skip
    """Apply `policy` to the stored record, reading only the blocks it looks at (kept per
    record state)."""
    cutoff = _cutoff_result(conversation, policy)
    if cutoff is not None:
        return cutoff
    if policy.name == "boundary":
        seqs = compact.boundary_seqs(conversation.metadata)
        last = max(seqs) if seqs else 0
        note = f"From the boundary before message #{last}." if seqs else (
            "No compaction boundary is stored."
        )  # fmt: skip
        return PolicyResult({}, last, note)
    kinds = LOOKED_AT[policy.name]
    rows = (
        Block.objects.filter(message__conversation=conversation, type__in=kinds)
        .annotate(
            text_start=Substr("text", 1, MARKER_CHARS + 1),
            input_start=Substr("input_json", 1, MARKER_CHARS + 1),
        )
        .order_by("message__seq", "seq")
        .values_list(
            "message__seq",
            "message__role",
            "seq",
            "type",
            "call_id",
            "name",
            "is_error",
            "text_start",
            "input_start",
            "tokens",
        )  # fmt: skip
    )
    grouped: dict[int, tuple[str, list[tuple[int, replay.Block, int]]]] = {}
    for seq, role, block_seq, kind, call_id, name, is_error, text, input_json, n in rows:
        value = block_value(_Cut(kind, text, call_id, name, input_json, is_error))
        grouped.setdefault(seq, (role, []))[1].append((block_seq, value, n or 0))
    if policy.name == "clear_thinking":  # which assistant turns are the latest counts too
        assistant = Message.objects.filter(conversation=conversation, role="assistant")
        for seq in assistant.values_list("seq", flat=True):
            grouped.setdefault(seq, ("assistant", []))
    seqs = sorted(grouped)
    messages = [
        replay.StoredMessage(
            cast(replay.Role, grouped[s][0]), tuple(b for _, b, _ in grouped[s][1])
        )
        for s in seqs
    ]
    own = {(i, j): n for i, s in enumerate(seqs) for j, (_, _, n) in enumerate(grouped[s][1])}
    result = compact.compact(
        messages, policy, seqs=seqs, vision=vision, shape=shape, input_tokens=input_tokens,
        own_tokens=own,
    )  # fmt: skip
    index = {s: i for i, s in enumerate(seqs)}
    changes = {
        (seq, grouped[seq][1][j][0]): result.messages[index[seq]].blocks[j]
        for seq, j in result.changed
    }
    stored = {
        (seq, grouped[seq][1][j][0]): (grouped[seq][1][j][2], grouped[seq][0])
        for seq, j in result.changed
    }
    return PolicyResult(changes, 0, result.note, stored=stored)


@dataclass(frozen=True, slots=True)
class _Cut:
    """A block row with its texts cut (`block_value` reads these columns)."""

    type: str
    text: str
    call_id: str
    name: str
    input_json: str
    is_error: bool
    media_type: str = ""
    data: str = ""
    width: int | None = None
    height: int | None = None


def window(
    conversation: Conversation, seqs: range, results: Sequence[PolicyResult | None]
) -> tuple[list[int], list[str], list[list[replay.StoredMessage | None]]]:
    """The messages at `seqs` as each side's policy leaves them (None: left out), with
    their texts cut as pages cut them: seqs, roles, and one list per side."""
    rows = preview_rows(conversation, seqs)
    stored = [
        replay.StoredMessage(cast(replay.Role, r.role), tuple(map(block_value, r.blocks)))
        for r in rows
    ]
    sides: list[list[replay.StoredMessage | None]] = []
    for result in results:
        side: list[replay.StoredMessage | None] = []
        for row, message in zip(rows, stored, strict=True):
            if result is None:
                side.append(message)
            elif row.seq < result.kept_from:
                side.append(None)
            else:
                side.append(result.in_window(row.seq, message))
        sides.append(side)
    return [r.seq for r in rows], [r.role for r in rows], sides


def image_seqs(conversation: Conversation) -> set[int]:
    """The seqs of the messages holding an image (their projection depends on vision)."""
    rows = Block.objects.filter(message__conversation=conversation, type="image")
    return set(rows.values_list("message__seq", flat=True).distinct())

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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from django.db.models.functions import Substr

from conversations.core import compact, replay
from conversations.core.compact import Policy
from conversations.record.models import Block, Conversation, Message
from conversations.record.rows import block_value
from conversations.record.selectors import preview_rows

MARKER_CHARS = 64  # longer than every policy's marker
LOOKED_AT: dict[compact.PolicyName, tuple[str, ...]] = {
    "microcompact": ("tool_result",),
    "clear_tool_uses": ("tool_use", "tool_result"),
    "clear_thinking": ("reasoning",),
    "boundary": (),
}


@dataclass(frozen=True)
class PolicyResult:
    """What a policy does to the whole record: each changed block's replacement by (message
    seq, block seq), and the seqs it leaves out (those before `kept_from`)."""

    changes: Mapping[tuple[int, int], replay.Block]
    kept_from: int
    note: str

    @property
    def changed_seqs(self) -> set[int]:
        return {seq for seq, _ in self.changes}


def compacted_blocks(
    conversation: Conversation, policy: Policy, *, vision: bool, shape: replay.Shape,
    input_tokens: int | None,
) -> PolicyResult:  # fmt: skip
    """Apply `policy` to the stored record, reading only the blocks it looks at."""
    if policy.name == "boundary":
        seqs = compact.boundary_seqs(conversation.metadata)
        last = max(seqs) if seqs else 0
        return PolicyResult({}, last, "" if seqs else "No compaction boundary is stored.")
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
    return PolicyResult(changes, 0, result.note)


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
                blocks = tuple(
                    result.changes.get((row.seq, j), block)
                    for j, block in enumerate(message.blocks)
                )
                side.append(replay.StoredMessage(message.role, blocks))
        sides.append(side)
    return [r.seq for r in rows], [r.role for r in rows], sides


def image_seqs(conversation: Conversation) -> set[int]:
    """The seqs of the messages holding an image (their projection depends on vision)."""
    rows = Block.objects.filter(message__conversation=conversation, type="image")
    return set(rows.values_list("message__seq", flat=True).distinct())

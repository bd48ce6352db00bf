"""The compaction preview (docs/contract.md §7): tokens before → after, the full or
effective payload a window at a time, each block the policy changed marked."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.urls import reverse

from conversations.core import blocks, replay
from conversations.core import diff as diff_core
from conversations.core.counting import compact as compact_core
from conversations.core.counting import words
from conversations.core.counting.compact import Compacted
from conversations.core.options import ReplayOptions
from conversations.dashboard.presenters.pressure import pressure_view
from conversations.dashboard.presenters.texts import escaped_bytes, shown
from conversations.record.reads.rows import Pressure
from conversations.web.links import query, toggle
from conversations.web.protocols import ConversationLike

PREVIEW_WINDOW = 100
# Blocks of one message the preview shows at once, and their escaped bytes at most (besides
# the markup; docs/contract.md §4 Bounds): the rest are counted, with how many of them the
# policy changed, and loaded on demand.
MESSAGE_BLOCKS = 100
MESSAGE_BYTES = 1024 * 1024
BLOCK_MARKUP = 300  # bytes of a block's markup on this page


@dataclass(frozen=True)
class PreviewBlock:
    seq: int
    label: str
    text: str
    changed: bool


@dataclass(frozen=True)
class BlockFold:
    """A message's blocks past the ones shown: how many, how many of them the policy
    changed, and the URL of the next MESSAGE_BLOCKS (an htmx fragment)."""

    seq: int
    start: int  # the first block folded
    count: int
    changed: int
    url: str

    @property
    def label(self) -> str:
        changed = f", {self.changed:,} of them changed by the policy" if self.changed else ""
        return f"{words.count(self.count, 'more block')} folded (from block {self.start}){changed}."


@dataclass(frozen=True)
class PreviewMessage:
    seq: int
    role: str
    before: int | None
    after: int | None
    blocks: list[PreviewBlock]
    wire: str
    changed: bool
    fold: BlockFold | None = field(default=None)

    @property
    def anchor(self) -> str:
        return f"m-{self.seq}"


def compact_query(policy: compact_core.Policy | None) -> dict[str, str]:
    return policy.query() if policy is not None else {}


@dataclass(frozen=True)
class ContextRead:
    """What the compaction preview was read as (the view fetches it): the pressure before and
    after the policy, the compacted record's changes, and one window of the record shown
    (`messages` at `seqs`, the first at `index` of `size`) with their counts before and
    after; `earlier`/`later`: where the windows beside it start (None: none)."""

    seqs: Sequence[int]
    messages: Sequence[replay.StoredMessage]
    before: Pressure
    after: Pressure
    compacted: Compacted
    before_by: Mapping[int, int]
    after_by: Mapping[int, int]
    earlier: int | None
    later: int | None
    # Without a policy only a preview of each message is read: its stored block count, and
    # the first block the read holds (`blocks_from`), so its fold counts what is stored.
    block_counts: Mapping[int, int] = field(default_factory=dict)
    blocks_from: int = 0


def window_at(seqs: Sequence[int], start: int | None, changed: Sequence[int]) -> range:
    """The positions in `seqs` of the window shown: from the first seq at or after `start`
    (by default the first changed message's), at most `PREVIEW_WINDOW`, kept inside."""
    first = start if start is not None else (changed[0] if changed else 0)
    index = bisect.bisect_left(seqs, first)
    index = max(0, min(index, max(0, len(seqs) - PREVIEW_WINDOW)))
    return range(index, min(len(seqs), index + PREVIEW_WINDOW))


def context_page(
    conversation: ConversationLike,
    options: ReplayOptions,
    policy: compact_core.Policy | None,
    read: ContextRead,
    *,
    view: dict[str, str],
    effective: bool,
    start: int | None,
) -> dict[str, Any]:
    """The compaction preview: tokens before → after, the full or effective payload (a
    window of it), each block the policy changed marked, copy and download following."""
    cid = str(conversation.id)
    here = reverse("conversation-context", args=[cid])
    base: dict[str, object] = {"vision": int(options.vision), "shape": options.shape, **view}
    before, after, compacted = read.before, read.after, read.compacted
    effective = effective and policy is not None
    changed_blocks = _changed_by_message(compacted)
    mode = {} if effective or policy is None else {"payload": "full"}

    def more_url(seq: int, start: int) -> str:
        return here + query(
            **(base | compact_query(policy) | mode), blocks_of=seq, blocks_from=start
        )

    shown_messages = []
    for seq, message in zip(read.seqs, read.messages, strict=True):
        blocks_shown, fold = _blocks(
            message, seq, changed_blocks.get(seq, []), 0, more_url, read.block_counts.get(seq)
        )
        wire = replay.project_message(message, vision=options.vision, shape=options.shape)
        shown_messages.append(
            PreviewMessage(
                seq=seq,
                role=message.role,
                before=read.before_by.get(seq),
                after=read.after_by.get(seq),
                blocks=blocks_shown,
                wire=shown(diff_core.content_text(wire)),
                changed=seq in changed_blocks,
                fold=fold,
            )
        )
    policy_query = compact_query(policy)
    payload_query = base | (policy_query if effective else {})
    policies = [
        toggle("No compaction", here, base, policy is None),
        *(
            toggle(name, here, base | {"compact": name}, policy is not None and policy.name == name)
            for name in compact_core.POLICIES
        ),
    ]
    modes = []
    if policy is not None:
        modes = [
            toggle("Full payload", here, base | policy_query | {"payload": "full"}, not effective),
            toggle("Effective payload", here, base | policy_query, effective),
        ]

    def page_url(at: int) -> str:
        mode = {} if effective or policy is None else {"payload": "full"}
        return here + query(**(base | policy_query | mode), **{"from": at})

    return {
        "conversation": conversation,
        "conversation_url": reverse("conversation", args=[cid]) + query(**base),
        "policy": policy,
        "policy_line": policy.describe() if policy is not None else "none",
        "params": {
            "keep": str(policy.keep) if policy is not None else "",
            "trigger": str(policy.trigger) if policy is not None else "",
            "clear_at_least": str(policy.clear_at_least) if policy is not None else "",
            "exclude_tools": ",".join(sorted(policy.exclude_tools)) if policy else "",
            "clear_tool_inputs": policy_query.get("clear_tool_inputs", "") if policy else "",
        },
        "policies": policies,
        "modes": modes,
        "effective": effective,
        "before": f"{before.total:,}",
        "after": f"{after.total:,}",
        "before_total": before.total,
        "after_total": after.total,
        "saved": f"{before.total - after.total:,}",
        "changed_count": len(compacted.changed),
        "changed_line": words.count(len(compacted.changed), "block") + " changed",
        "dropped_line": words.count(compacted.dropped, "message") + " before the boundary left out"
        if compacted.dropped
        else "",
        "note": compacted.note,
        "pressure": pressure_view(after if effective else before, 0),
        "messages": shown_messages,
        "vision": options.vision,
        "shape": options.shape,
        "download_url": reverse("replay-download", args=[cid]) + query(**payload_query),
        "earlier_url": page_url(read.earlier) if read.earlier is not None else "",
        "later_url": page_url(read.later) if read.later is not None else "",
        "diff_url": reverse("conversation-diff", args=[cid])
        + query(**base, **{f"b_{k}": v for k, v in policy_query.items()}),
    }


def _changed_by_message(compacted: Compacted) -> dict[int, list[int]]:
    """Message seq → the seqs of its blocks the policy changed, in order."""
    found: dict[int, list[int]] = {}
    for seq, block in compacted.changed:
        found.setdefault(seq, []).append(block)
    for changed in found.values():
        changed.sort()
    return found


def _blocks(
    message: replay.StoredMessage,
    seq: int,
    changed: list[int],
    start: int,
    more_url: Any,
    total: int | None = None,
    offset: int = 0,
) -> tuple[list[PreviewBlock], BlockFold | None]:
    """The blocks of a message from `start` the preview shows (at most MESSAGE_BLOCKS, and
    MESSAGE_BYTES of their texts), and the fold of the ones after them (None if none).
    `message` holds its blocks from block `offset`, of `total` stored (default: all)."""
    total = len(message.blocks) + offset if total is None else total
    marked = set(changed)
    shown_blocks: list[PreviewBlock] = []
    spent = 0
    stop = start
    for b in message.blocks[start - offset : start - offset + MESSAGE_BLOCKS]:
        text = shown(replay.prose(b))
        spent += escaped_bytes(text) + BLOCK_MARKUP
        if spent > MESSAGE_BYTES and shown_blocks:
            break
        shown_blocks.append(PreviewBlock(stop, blocks.label(b), text, stop in marked))
        stop += 1
    if stop >= total:
        return shown_blocks, None
    later = len(changed) - bisect.bisect_left(changed, stop)
    fold = BlockFold(seq, stop, total - stop, later, more_url(seq, stop))
    return shown_blocks, fold


def context_blocks(
    conversation: ConversationLike,
    options: ReplayOptions,
    policy: compact_core.Policy | None,
    read: ContextRead,
    *,
    view: dict[str, str],
    effective: bool,
    seq: int,
    start: int,
) -> dict[str, Any] | None:
    """The next blocks of message `seq` on the compaction preview (from block `start`), as
    `context_page` would show them, with the fold after them; None if the payload shown
    has no such message or block."""
    here = reverse("conversation-context", args=[str(conversation.id)])
    base: dict[str, object] = {"vision": int(options.vision), "shape": options.shape, **view}
    effective = effective and policy is not None
    compacted = read.compacted
    seqs, messages = read.seqs, read.messages  # the window holding `seq`, as shown
    index = bisect.bisect_left(seqs, seq)
    if index == len(seqs) or seqs[index] != seq:
        return None
    total = read.block_counts.get(seq, len(messages[index].blocks) + read.blocks_from)
    if not 0 <= start < total or (start < read.blocks_from):
        return None
    mode = {} if effective or policy is None else {"payload": "full"}

    def more_url(at: int, first: int) -> str:
        return here + query(
            **(base | compact_query(policy) | mode), blocks_of=at, blocks_from=first
        )

    changed = _changed_by_message(compacted).get(seq, [])
    shown_blocks, fold = _blocks(
        messages[index], seq, changed, start, more_url, total, read.blocks_from
    )
    return {"blocks": shown_blocks, "fold": fold, "effective": effective}

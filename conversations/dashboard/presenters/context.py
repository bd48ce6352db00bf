"""The compaction preview (docs/contract.md §7): tokens before → after, the full or
effective payload a window at a time, each block the policy changed marked."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.urls import reverse

from conversations.core import blocks, replay
from conversations.core import compact as compact_core
from conversations.core import diff as diff_core
from conversations.core.compact import Compacted
from conversations.core.options import ReplayOptions
from conversations.dashboard.presenters.links import query, toggle
from conversations.dashboard.presenters.pressure import pressure_view
from conversations.dashboard.presenters.protocols import ConversationLike
from conversations.dashboard.presenters.texts import shown
from conversations.record.rows import Pressure

PREVIEW_WINDOW = 100


@dataclass(frozen=True)
class PreviewBlock:
    seq: int
    label: str
    text: str
    changed: bool


@dataclass(frozen=True)
class PreviewMessage:
    seq: int
    role: str
    before: int | None
    after: int | None
    blocks: list[PreviewBlock]
    wire: str
    changed: bool

    @property
    def anchor(self) -> str:
        return f"m-{self.seq}"


def compact_query(policy: compact_core.Policy | None) -> dict[str, str]:
    return policy.query() if policy is not None else {}


@dataclass(frozen=True)
class ContextRead:
    """What the compaction preview was read as (the view fetches it): the record's messages
    and their seqs, the pressure before and after the policy, and the compacted record
    (the record itself, unchanged, without a policy)."""

    seqs: Sequence[int]
    messages: Sequence[replay.StoredMessage]
    before: Pressure
    after: Pressure
    compacted: Compacted


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
    before_by = {c.seq: c.count.tokens for c in before.messages}
    after_by = {c.seq: c.count.tokens for c in after.messages}
    if effective:
        seqs, messages = list(compacted.seqs), list(compacted.messages)
    else:
        seqs, messages = list(read.seqs), list(read.messages)
    changed_seqs = sorted({s for s, _ in compacted.changed})
    first = start if start is not None else (changed_seqs[0] if changed_seqs else 0)
    index = next((i for i, s in enumerate(seqs) if s >= first), len(seqs))
    index = max(0, min(index, max(0, len(seqs) - PREVIEW_WINDOW)))
    window = range(index, min(len(seqs), index + PREVIEW_WINDOW))
    shown_messages = []
    for i in window:
        seq, message = seqs[i], messages[i]
        blocks_shown = [
            PreviewBlock(j, blocks.label(b), shown(replay.prose(b)), (seq, j) in compacted.changed)
            for j, b in enumerate(message.blocks)
        ]
        wire = replay.project_message(message, vision=options.vision, shape=options.shape)
        shown_messages.append(
            PreviewMessage(
                seq, message.role, before_by.get(seq), after_by.get(seq),
                blocks_shown, shown(diff_core.content_text(wire)),
                any(b.changed for b in blocks_shown),
            )
        )  # fmt: skip
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
        "dropped": compacted.dropped,
        "note": compacted.note,
        "pressure": pressure_view(after if effective else before, 0),
        "messages": shown_messages,
        "vision": options.vision,
        "shape": options.shape,
        "download_url": reverse("replay-download", args=[cid]) + query(**payload_query),
        "earlier_url": page_url(seqs[max(0, index - PREVIEW_WINDOW)]) if index > 0 else "",
        "later_url": page_url(seqs[window.stop]) if window.stop < len(seqs) else "",
        "diff_url": reverse("conversation-diff", args=[cid])
        + query(**base, **{f"b_{k}": v for k, v in policy_query.items()}),
    }

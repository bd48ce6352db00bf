"""The compaction preview and the projection diff (docs/contract.md §7): each view reads
the record and its counts, then hands them to its presenter."""

from __future__ import annotations

from typing import cast

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from conversations.core import diff as diff_core
from conversations.core import replay
from conversations.core.counting import compact
from conversations.core.counting.compact import Compacted, Policy
from conversations.core.options import OptionError, ReplayOptions
from conversations.dashboard.presenters.context import (
    PREVIEW_WINDOW,
    ContextRead,
    context_blocks,
    context_page,
    window_at,
)
from conversations.dashboard.presenters.diff import (
    DIFF_WINDOW,
    DiffSide,
    diff_page,
    diff_window_page,
)
from conversations.record.counting import policy_reads, preview_counts, token_counts
from conversations.record.models.conversation import Conversation
from conversations.record.reads import selectors
from conversations.record.reads.rows import block_value
from conversations.web.pages import (
    bad_request,
    conversation_or_404,
    operator_required,
    with_options,
)


def _filled(request: HttpRequest) -> dict[str, str]:
    """The query without empty values (a form sends every field, filled or not)."""
    return {k: request.GET[k] for k in request.GET if request.GET[k] != ""}


def _form_policy(params: dict[str, str], prefix: str = "") -> Policy | None:
    """The policy a form asks for, ignoring the fields of other policies; OptionError names
    the parameter (with its prefix)."""
    own = {k.removeprefix(prefix): v for k, v in params.items() if k.startswith(prefix)}
    name = own.get("compact", "")
    if name in compact.POLICIES:
        wanted = {"compact", *compact.PARAMETERS[name]}
        own = {k: v for k, v in own.items() if k in wanted or k not in compact.ALL_PARAMETERS}
    else:
        own = {k: v for k, v in own.items() if k not in compact.ALL_PARAMETERS}
    try:
        return Policy.from_query(own)
    except OptionError as exc:
        raise OptionError(prefix + exc.field, exc.message) from None


def _start(params: dict[str, str]) -> int | None:
    value = params.get("from")
    if value is None:
        return None
    if not value.isascii() or not value.isdigit() or len(value) > 9:
        raise OptionError("from", "from must be a message number.")
    return int(value)


def _context_read(
    conversation: Conversation,
    options: ReplayOptions,
    policy: Policy | None,
    view: dict[str, str],
    *,
    effective: bool,
    start: int | None,
    blocks_from: int = 0,
) -> ContextRead:
    """The counts before and after `policy` and one window of the record shown (the
    compacted one when `effective`); OptionError on a bad `view`. Only the window's
    messages are read (their texts cut, as on every page); a policy's counts come from
    the stored figures (`preview_counts`)."""
    if policy is None:
        before = token_counts.pressure(conversation, options, query=view)
        window = window_at(range(conversation.message_count), start, ())
        rows = selectors.preview_rows(conversation, window, blocks_from=blocks_from)
        shown = token_counts.counted_shown(conversation, before, rows)
        counts = {s: c.count.tokens for s, c in shown.items()}
        seqs = [r.seq for r in rows]
        messages = [
            replay.StoredMessage(cast(replay.Role, r.role), tuple(map(block_value, r.blocks)))
            for r in rows
        ]
        return ContextRead(
            seqs=seqs,
            messages=messages,
            before=before,
            after=before,
            compacted=compact.unchanged(messages, seqs, ""),
            before_by=counts,
            after_by=counts,
            earlier=window.start - PREVIEW_WINDOW if window.start > 0 else None,
            later=window.stop if window.stop < conversation.message_count else None,
            block_counts={r.seq: r.block_count for r in rows},
            blocks_from=blocks_from,
        )
    result = preview_counts.preview(conversation, options, policy, query=view)
    compacted, after, rewrite = result.compacted, result.after, result.rewrite
    assert rewrite is not None
    every = range(compacted.dropped if effective else 0, conversation.message_count)
    changed = min((s for s, _ in compacted.changed), default=None)
    window = window_at(every, start, () if changed is None else (changed,))
    shown_seqs = every[window.start : window.stop]
    rows = selectors.preview_rows(conversation, shown_seqs, blocks_from=blocks_from)
    seqs = [r.seq for r in rows]
    messages = [
        replay.StoredMessage(cast(replay.Role, r.role), tuple(map(block_value, r.blocks)))
        for r in rows
    ]
    if effective:
        messages = [rewrite(s, m, blocks_from) for s, m in zip(seqs, messages, strict=True)]
    before_by = token_counts.stored_tokens(conversation, options, seqs)
    last = after.first + after.message_total - 1
    after_by = {
        s: before_by[s] + (after.moved[s][0] if s in after.moved else 0)
        for s in seqs
        if after.first <= s <= last and s in before_by
    }
    return ContextRead(
        seqs=seqs,
        messages=messages,
        before=result.before,
        after=after,
        compacted=Compacted(
            messages=tuple(messages),
            seqs=tuple(seqs),
            changed=compacted.changed,
            dropped=compacted.dropped,
            note=compacted.note,
        ),
        before_by=before_by,
        after_by=after_by,
        earlier=(every[max(0, window.start - PREVIEW_WINDOW)] if window.start > 0 else None),
        later=every[window.stop] if window.stop < len(every) else None,
        block_counts={r.seq: r.block_count for r in rows},
        blocks_from=blocks_from,
    )


def _more_blocks(
    request: HttpRequest,
    conversation: Conversation,
    options: ReplayOptions,
    policy: Policy | None,
    view: dict[str, str],
    params: dict[str, str],
) -> HttpResponse:
    """`?blocks_of=SEQ&blocks_from=N`: the next blocks of one message of the preview, the
    fragment its fold loads (404 for a message or block the payload shown lacks)."""
    seq, start = _number(params, "blocks_of"), _number(params, "blocks_from")
    effective = params.get("payload") != "full"
    # The window that holds message `seq`, as the page showed it.
    read = _context_read(
        conversation,
        options,
        policy,
        view,
        effective=effective and policy is not None,
        start=seq,
        blocks_from=start,
    )
    context = context_blocks(
        conversation, options, policy, read, view=view, effective=effective, seq=seq, start=start
    )
    if context is None:
        raise Http404("No such message or block in this payload.")
    return render(request, "conversations/context.html#more-blocks", context)


def _number(params: dict[str, str], name: str) -> int:
    value = params.get(name, "")
    if not value.isascii() or not value.isdigit() or len(value) > 9:
        raise OptionError(name, f"{name} must be a whole number.")
    return int(value)


@require_GET
@operator_required
@with_options
def conversation_context(
    request: HttpRequest, conversation_id: str, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    """The compaction preview (docs/contract.md §7): tokens before → after, changed blocks
    marked."""
    conversation = conversation_or_404(conversation_id)
    params = _filled(request)
    options = ReplayOptions(vision, shape)
    try:
        policy = _form_policy(params)
        view: dict[str, str] = {k: params[k] for k in token_counts.VIEW_KEYS if k in params}
        if "blocks_of" in params:
            return _more_blocks(request, conversation, options, policy, view, params)
        start = _start(params)
        effective = params.get("payload") != "full"
        read = _context_read(
            conversation,
            options,
            policy,
            view,
            effective=effective and policy is not None,
            start=start,
        )
        context = context_page(
            conversation, options, policy, read, view=view, effective=effective, start=start
        )
    except OptionError as exc:
        return bad_request(request, exc.message)
    return render(request, "conversations/context.html", context)


@require_GET
@operator_required
@with_options
def conversation_diff(
    request: HttpRequest, conversation_id: str, *, vision: bool, shape: replay.Shape
) -> HttpResponse:
    """Two projections aligned message by message: this conversation's (the page's toggles
    and `compact`) against `b_…` toggles, policy or `b_conversation`."""
    conversation = conversation_or_404(conversation_id)
    params = _filled(request)
    try:
        right_options = ReplayOptions.from_query(
            {
                "vision": params.get("b_vision", str(int(vision))),
                "shape": params.get("b_shape", shape),
            }
        )
    except OptionError as exc:
        return bad_request(request, exc.message.replace(exc.field, "b_" + exc.field, 1))
    other = params.get("b_conversation")
    right_conversation = conversation_or_404(other) if other else conversation
    try:
        left = DiffSide(
            label="A",
            vision=vision,
            shape=shape,
            policy=_form_policy({k: v for k, v in params.items() if not k.startswith("b_")}),
            conversation=conversation,
        )
        right = DiffSide(
            label="B",
            vision=right_options.vision,
            shape=right_options.shape,
            policy=_form_policy(params, "b_"),
            conversation=right_conversation,
        )
        start = _start(params) or 0
        if right_conversation == conversation and left.shape == right.shape == "openai":
            context = _diff_window(conversation, left, right, start, params)
        else:
            payloads = (
                _side_payload(conversation, left),
                _side_payload(right_conversation, right),
            )
            context = diff_page(left, right, payloads, start=start, here_query=params)
    except OptionError as exc:
        return bad_request(request, exc.message)
    return render(request, "conversations/diff.html", context)


def _policy_result(conversation: Conversation, side: DiffSide) -> policy_reads.PolicyResult | None:
    if side.policy is None:
        return None
    input_tokens = None
    if side.policy.name == "clear_tool_uses":
        options = ReplayOptions(side.vision, side.shape)
        input_tokens = token_counts.pressure(conversation, options, policy=side.policy).total
    return policy_reads.compacted_blocks(
        conversation, side.policy, vision=side.vision, shape=side.shape, input_tokens=input_tokens
    )


def _diff_window(
    conversation: Conversation,
    left: DiffSide,
    right: DiffSide,
    start: int,
    params: dict[str, str],
) -> dict[str, object]:
    """One conversation against itself (toggles, policies; one message shape): its messages
    pair by seq, so only a window of them is read and diffed. A policy is applied to the
    whole record from the blocks it looks at (`policy_reads`), never from their texts."""
    results = (_policy_result(conversation, left), _policy_result(conversation, right))
    kept = [r.kept_from if r is not None else 0 for r in results]
    first, both = min(kept), max(kept)
    total_rows = max(0, conversation.message_count - first)
    start = max(0, min(start, max(0, total_rows - 1)))
    seqs = range(first + start, min(conversation.message_count, first + start + DIFF_WINDOW))
    found, roles, (lefts, rights) = policy_reads.window(conversation, seqs, results)
    rows = []
    for seq, role, a, b in zip(found, roles, lefts, rights, strict=True):
        x, y = (
            _diff_side(m, side, index=seq - k, role=role)
            for m, side, k in ((a, left, kept[0]), (b, right, kept[1]))
        )
        if x is not None and y is not None and x.text == y.text:
            rows.append(diff_core.Row("same", x, y))
        elif x is not None and y is not None:
            rows.append(diff_core.Row("changed", x, y, diff_core.text_diff(x.text, y.text)))
        else:
            rows.append(diff_core.Row("left" if x is not None else "right", x, y))
    differs: set[int] = set()
    only = [r for r in results if r is not None]
    if left.policy != right.policy and len(only) == 1 and left.vision == right.vision:
        # One side's policy is the only difference: its changed messages, counted in SQL.
        differing = policy_reads.count_from(only[0], both) + (both - first)
        return diff_window_page(
            left,
            right,
            rows,
            total_rows=total_rows,
            differing=differing,
            start=start,
            here_query=params,
        )
    if left.policy != right.policy:
        for r in results:
            differs |= policy_reads.changed_from(r, both) if r is not None else set()
    if left.vision != right.vision:
        differs |= policy_reads.image_seqs(conversation)
    differing = len({s for s in differs if s >= both}) + (both - first)
    return diff_window_page(
        left,
        right,
        rows,
        total_rows=total_rows,
        differing=differing,
        start=start,
        here_query=params,
    )


def _diff_side(
    message: replay.StoredMessage | None, side: DiffSide, *, index: int, role: str
) -> diff_core.Side | None:
    """One message of one side of the diff as `side` projects it (None: that side lacks it)."""
    if message is None:
        return None
    projected = replay.project_message(message, vision=side.vision, shape=side.shape)
    return diff_core.Side(index=index, role=role, text=diff_core.content_text(projected))


def _side_payload(conversation: Conversation, side: DiffSide) -> replay.Payload:
    """One side's projection of `conversation` (its toggles, after its policy if any) for
    the page, from its messages with their texts cut as pages cut them (docs/contract.md
    §7): read a window at a time, so the page's memory is bounded by its messages' count,
    never by their size."""
    result = _policy_result(conversation, side)
    messages: list[replay.StoredMessage] = []
    for low in range(0, conversation.message_count, DIFF_WINDOW):
        seqs = range(low, min(conversation.message_count, low + DIFF_WINDOW))
        _, _, (found,) = policy_reads.window(conversation, seqs, [result])
        messages.extend(m for m in found if m is not None)
    return replay.project(messages, vision=side.vision, shape=side.shape)

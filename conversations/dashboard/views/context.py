"""The compaction preview and the projection diff (docs/contract.md §7): each view reads
the record and its counts, then hands them to its presenter."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from conversations.core import compact, replay
from conversations.core.compact import Policy
from conversations.core.options import OptionError, ReplayOptions
from conversations.dashboard import presenters
from conversations.dashboard.views.common import (
    bad_request,
    conversation_or_404,
    operator_required,
    with_options,
)
from conversations.record import selectors, token_counts
from conversations.record.models import Conversation


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
    if not value.isdigit() or len(value) > 9:
        raise OptionError("from", "from must be a message number.")
    return int(value)


def _context_read(
    conversation: Conversation, options: ReplayOptions, policy: Policy | None, view: dict[str, str]
) -> presenters.ContextRead:
    """The record and its counts before and after `policy` (none: the record unchanged);
    OptionError on a bad `view`."""
    rows = selectors.message_rows(conversation)
    stored = selectors.stored_messages(rows)
    seqs = [r.seq for r in rows]
    if policy is not None:
        result = token_counts.preview(conversation, options, policy, query=view)
        before, after, compacted = result.before, result.after, result.compacted
    else:
        before = after = token_counts.pressure(conversation, options, query=view)
        compacted = compact.unchanged(stored, seqs, "")
    return presenters.ContextRead(seqs, stored, before, after, compacted)


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
        context = presenters.context_page(
            conversation,
            options,
            policy,
            _context_read(conversation, options, policy, view),
            view=view,
            effective=params.get("payload") != "full",
            start=start,
        )
    except OptionError as exc:
        return bad_request(request, exc.message)
    return render(request, "conversations/context.html", context)


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
    context = presenters.context_blocks(
        conversation,
        options,
        policy,
        _context_read(conversation, options, policy, view),
        view=view,
        effective=params.get("payload") != "full",
        seq=seq,
        start=start,
    )
    if context is None:
        raise Http404("No such message or block in this payload.")
    return render(request, "conversations/context.html#more-blocks", context)


def _number(params: dict[str, str], name: str) -> int:
    value = params.get(name, "")
    if not value.isdigit() or len(value) > 9:
        raise OptionError(name, f"{name} must be a whole number.")
    return int(value)


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
            {"vision": params.get("b_vision", str(int(vision))),
             "shape": params.get("b_shape", shape)}
        )  # fmt: skip
    except OptionError as exc:
        return bad_request(request, exc.message.replace(exc.field, "b_" + exc.field, 1))
    other = params.get("b_conversation")
    right_conversation = conversation_or_404(other) if other else conversation
    try:
        left = presenters.DiffSide(
            "A", vision, shape, _form_policy(
                {k: v for k, v in params.items() if not k.startswith("b_")}
            ), conversation,
        )  # fmt: skip
        right = presenters.DiffSide(
            "B", right_options.vision, right_options.shape, _form_policy(params, "b_"),
            right_conversation,
        )  # fmt: skip
        start = _start(params) or 0
        payloads = (
            _side_payload(conversation, left), _side_payload(right_conversation, right)
        )  # fmt: skip
        context = presenters.diff_page(left, right, payloads, start=start, here_query=params)
    except OptionError as exc:
        return bad_request(request, exc.message)
    return render(request, "conversations/diff.html", context)


def _side_payload(conversation: Conversation, side: presenters.DiffSide) -> replay.Payload:
    """One side's projection of `conversation`: its toggles, after its policy if any."""
    if side.policy is None:
        return selectors.replay_payload(conversation, vision=side.vision, shape=side.shape)
    options = ReplayOptions(side.vision, side.shape)
    return token_counts.compacted_payload(conversation, options, side.policy)

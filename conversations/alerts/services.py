"""Alerts (docs/contract.md §11): rules made with a secret shown once, evaluated after an
append commits (never inside the request that appended: in a server the alert loop
evaluates, conversations/alerts/loop.py), one alert per episode, acknowledged by
operators; an alert of a rule with a webhook stores its delivery in the same transaction.

Episodes: `pressure` runs while the next request is at or over the threshold and re-arms
below it; `unanswered` runs from the due open call until the last message has none;
`tool_error` runs until acknowledged; each `compaction` boundary is an episode of its own.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, assert_never, cast

import httpx2
import orjson
from django.conf import settings
from django.db import IntegrityError, transaction
from django.dispatch import Signal
from django.utils import timezone

from conversations.alerts.models import Alert, AlertKind, AlertRule, AlertTimer, Delivery
from conversations.core import alerts as core
from conversations.core.counting import next_request as nr
from conversations.core.counting.tokens import whole_number
from conversations.core.options import ReplayOptions
from conversations.record import events
from conversations.record.counting import token_counts
from conversations.record.errors import IngestError
from conversations.record.models.conversation import Conversation

log = logging.getLogger(__name__)

# Sent once new deliveries are stored: the webhook sender (`alerts.loop`) wakes on it.
deliveries_queued = Signal()


MAX_RULES = 200  # rules are few; every evaluation reads them all, so they stay few
MAX_THRESHOLD_PERCENT = 1000
MAX_AFTER_SECONDS = 7 * 24 * 3600
URL_CHARS = 2000
TIMERS_PER_TICK = 200  # due `unanswered` clocks read per tick (the rest wait one tick)


# -- rules ---------------------------------------------------------------------------------------


def alert_rule_create(
    *,
    kind: str,
    threshold_percent: int | None = None,
    after_seconds: int | None = None,
    match: str | None = None,
    webhook_url: str | None = None,
    created_by: str = "",
) -> AlertRule:
    """A new rule with a new secret (returned on the rule, shown once by the caller).
    Raises IngestError naming the field for a bad or misplaced parameter."""
    if kind not in core.KINDS:
        raise IngestError("kind", f"kind must be one of {', '.join(core.KINDS)}, not {kind[:40]!r}")
    if threshold_percent is not None:
        if kind != "pressure":
            raise IngestError(
                "threshold_percent", "threshold_percent applies to pressure rules only"
            )
        if not 1 <= threshold_percent <= MAX_THRESHOLD_PERCENT:
            raise IngestError(
                "threshold_percent", f"threshold_percent must be from 1 to {MAX_THRESHOLD_PERCENT}"
            )
    if after_seconds is not None:
        if kind != "unanswered":
            raise IngestError("after_seconds", "after_seconds applies to unanswered rules only")
        if not 1 <= after_seconds <= MAX_AFTER_SECONDS:
            raise IngestError(
                "after_seconds", f"after_seconds must be from 1 to {MAX_AFTER_SECONDS}"
            )
    match = (match or "").strip()
    if len(match) > core.MATCH_CHARS or "\x00" in match:
        raise IngestError("match", f"match must be at most {core.MATCH_CHARS} characters, no NUL")
    webhook_url = (webhook_url or "").strip()
    if webhook_url:
        webhook_url_check(url=webhook_url)
    if AlertRule.objects.count() >= MAX_RULES:
        raise IngestError("kind", f"there are {MAX_RULES} rules already; delete one first")
    if kind == "pressure" and threshold_percent is None:
        threshold_percent = core.DEFAULT_THRESHOLD_PERCENT
    if kind == "unanswered" and after_seconds is None:
        after_seconds = core.DEFAULT_AFTER_SECONDS
    return AlertRule.objects.create(
        kind=kind,
        threshold_percent=threshold_percent,
        after_seconds=after_seconds,
        match=match,
        webhook_url=webhook_url,
        secret=secrets.token_hex(32),
        created_by=created_by[:200],
    )


def webhook_url_check(*, url: str) -> None:
    """Raise IngestError naming `webhook_url` unless the sender can POST to `url`: it is
    parsed by the sender's own HTTP client (`0177.0.0.1` is refused here, not at every
    attempt). Whether its address may be sent to is checked at send time (§11)."""
    if len(url) > URL_CHARS:
        raise IngestError("webhook_url", f"webhook_url must be at most {URL_CHARS} characters")
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise IngestError("webhook_url", "webhook_url must not hold spaces or control characters")
    try:
        parsed = httpx2.URL(url)
    except (httpx2.InvalidURL, TypeError, ValueError) as exc:
        raise IngestError("webhook_url", f"webhook_url is not a valid URL: {exc}") from None
    if parsed.scheme not in {"http", "https"} or not parsed.host:
        raise IngestError(
            "webhook_url", "webhook_url must be an http:// or https:// URL with a host"
        )


def alert_rule_delete(*, rule: AlertRule) -> None:
    """Delete a rule with its alerts and their pending deliveries; badges update on commit.

    While the alert loop writes: its clocks, the rule and its deliveries are locked before
    Django collects what to delete, so an alert fired or an attempt recorded meanwhile is
    either collected (committed first) or waits and finds the rule gone (never a foreign
    key error here). Locked in the order the loop takes them: clocks, rule, deliveries."""
    with transaction.atomic():
        list(AlertTimer.objects.select_for_update().filter(rule=rule).order_by("pk"))
        list(AlertRule.objects.select_for_update().filter(pk=rule.pk))
        list(
            Delivery.objects.select_for_update(of=("self",))
            .filter(alert__rule=rule)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        touched = list(
            Alert.objects.filter(rule=rule, acknowledged_at__isnull=True)
            .values_list("conversation_id", flat=True)
            .distinct()[:1000]
        )
        rule_id = rule.pk
        rule.delete()
        for conversation_id in touched:
            _announce(str(conversation_id), rule_id, "deleted")


# -- acknowledging -------------------------------------------------------------------------------


def alert_acknowledge(*, alert: Alert, by: str) -> bool:
    """Acknowledge an open alert (a `tool_error` episode ends with it: the next error fires
    again). False if it was acknowledged already. Badges update on commit."""
    now = timezone.now()
    with transaction.atomic():
        changed = Alert.objects.filter(pk=alert.pk, acknowledged_at__isnull=True).update(
            acknowledged_at=now, acknowledged_by=by[:200]
        )
        if not changed:
            return False
        if alert.rule.kind == AlertKind.TOOL_ERROR:
            Alert.objects.filter(pk=alert.pk, ended_at__isnull=True).update(ended_at=now)
        _announce(str(alert.conversation_id), alert.pk, "acknowledged")
    return True


def _announce(
    conversation_id: str, alert_id: int, change: Literal["fired", "acknowledged", "deleted"]
) -> None:
    events.publish_on_commit(
        {
            "type": "conversation.alerts_changed",
            "conversation_id": conversation_id,
            "alert_id": alert_id,
            "change": change,
        }
    )


# -- evaluation ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Change:
    """What one or more commits appended to a conversation: from message `first_seq`, with
    `errors` new error results, the first of them in message `error_seq` (merged when the
    alert loop has several waiting).
    `pressure`: whether `pressure` rules are evaluated now (the alert loop evaluates them
    at most every few seconds per conversation: their figure is the dear one); `others`:
    whether the other kinds are (not when only a deferred pressure check is due)."""

    conversation_id: str
    first_seq: int
    errors: int
    pressure: bool = True
    others: bool = True
    error_seq: int | None = None

    def merged(self, other: Change) -> Change:
        seqs = [s for s in (self.error_seq, other.error_seq) if s is not None]
        return Change(
            self.conversation_id,
            min(self.first_seq, other.first_seq),
            self.errors + other.errors,
            self.pressure or other.pressure,
            self.others or other.others,
            min(seqs, default=None),
        )


def next_request_figure(conversation: Conversation) -> tuple[int, int | None]:
    """The next request's tokens and the window they count against (docs/contract.md §7).

    The one place evaluation reads token figures. For now it asks token_counts.pressure,
    which reads the conversation's per-message block counts (cached by state); it is meant
    to read the per-message figures kept at ingest once they are stored."""
    p = token_counts.pressure(conversation, ReplayOptions())
    return p.headline.next.tokens, p.window.tokens


@dataclass(slots=True)
class State:
    """What evaluation reads of one conversation's alert state, in two queries whatever
    the number of rules: the rules with a running episode, and the `unanswered` clocks."""

    running: set[int]
    timers: dict[int, int]  # rule → the seq its clock started at


def alerts_evaluate(change: Change) -> int:
    """Evaluate every rule watching the conversation after `change`; the number fired.

    Reads the rules, the conversation's row and its alert state: nothing that
    grows with the conversation, but for `pressure`'s figure (`next_request_figure`)."""
    rules = list(AlertRule.objects.order_by("id")[:MAX_RULES])  # a small table, read whole
    if not rules:
        return 0
    conversation = Conversation.objects.filter(pk=change.conversation_id).first()
    if conversation is None or conversation.message_count == 0:
        return 0
    watching = [
        r for r in rules if core.matches(r.match, conversation.title, conversation.metadata)
    ]
    if not watching:
        return 0
    state = State(
        set(
            Alert.objects.filter(conversation=conversation, ended_at__isnull=True).values_list(
                "rule_id", flat=True
            )
        ),
        dict(AlertTimer.objects.filter(conversation=conversation).values_list("rule_id", "seq"))
        if any(r.kind == "unanswered" for r in watching)
        else {},
    )
    fired = 0
    figure: tuple[int, int | None] | None = None
    now = timezone.now()
    last = conversation.message_count - 1
    for rule in watching:
        running = rule.pk in state.running
        kind = cast(core.Kind, rule.kind)
        match kind:
            case "pressure":
                if figure is None:
                    figure = next_request_figure(conversation)
                tokens, window = figure
                percent = rule.threshold_percent or core.DEFAULT_THRESHOLD_PERCENT
                if core.pressure_reached(tokens, window, percent):
                    assert window is not None
                    if not running:
                        detail = core.pressure_detail(tokens, window, percent)
                        fired += _fire(rule, conversation, last, detail)
                elif running:
                    _end(rule, conversation, now)
            case "tool_error":
                if change.errors and not running:
                    # The message holding the error, not the last one: more may have been
                    # appended since (the alert loop evaluates after later commits too).
                    at = last if change.error_seq is None else change.error_seq
                    detail = _tool_error_detail(change.errors, at, conversation.error_count)
                    fired += _fire(rule, conversation, at, detail)
            case "unanswered":
                _clock(rule, conversation, last, now, running, state.timers.get(rule.pk))
            case "compaction":
                for mark in nr.boundary_marks(conversation.metadata):
                    seq = whole_number(mark.get("seq"))
                    if seq is not None and change.first_seq <= seq <= last:
                        fired += _fire(
                            rule, conversation, seq, _compaction_detail(seq, mark), ended=True
                        )
            case _:
                assert_never(kind)
    return fired


def _tool_error_detail(errors: int, seq: int, total: int) -> str:
    if errors == 1:
        return f"1 tool error in message #{seq} ({total:,} in the conversation)."
    return f"{errors} tool errors, the first in message #{seq} ({total:,} in the conversation)."


def _compaction_detail(seq: int, mark: Any) -> str:
    trigger = mark.get("trigger")
    pre = whole_number(mark.get("pre_tokens"))
    said = f" ({trigger})" if isinstance(trigger, str) and trigger else ""
    tokens = f" at {pre:,} tokens" if pre is not None else ""
    return f"Compacted before message #{seq}{said}{tokens}."


def _end(rule: AlertRule, conversation: Conversation, now: Any) -> None:
    Alert.objects.filter(rule=rule, conversation=conversation, ended_at__isnull=True).update(
        ended_at=now
    )


def _clock(
    rule: AlertRule,
    conversation: Conversation,
    last: int,
    now: Any,
    running: bool,
    timer_seq: int | None,
) -> None:
    """An `unanswered` rule after an append: the last message's open calls start (or keep)
    its clock; none stop it and end the episode. Writes only what changes."""
    if conversation.unanswered_calls == 0:
        if timer_seq is not None:
            AlertTimer.objects.filter(rule=rule, conversation=conversation).delete()
        if running:
            _end(rule, conversation, now)
        return
    if running:
        return
    due = now + timedelta(seconds=rule.after_seconds or core.DEFAULT_AFTER_SECONDS)
    if timer_seq is None:
        try:
            with transaction.atomic():
                AlertTimer.objects.create(
                    rule=rule, conversation=conversation, seq=last, due_at=due
                )
        except IntegrityError:
            pass  # another process started it
    elif timer_seq != last:  # a new last message holds the open calls: they wait from now
        AlertTimer.objects.filter(rule=rule, conversation=conversation).update(seq=last, due_at=due)


def alerts_due(*, now: Any = None) -> int:
    """Fire the `unanswered` clocks that are due (the alert loop's tick: this fires also
    when nothing is written); each clock is claimed by one process. The number fired."""
    now = now or timezone.now()
    fired = 0
    with transaction.atomic():
        due = list(
            AlertTimer.objects.select_for_update(skip_locked=True)
            .filter(due_at__lte=now)
            .order_by("due_at")[:TIMERS_PER_TICK]
        )
        for timer in due:
            conversation = Conversation.objects.filter(pk=timer.conversation_id).first()
            rule = AlertRule.objects.filter(pk=timer.rule_id).first()
            timer.delete()
            if conversation is None or rule is None:
                continue
            if conversation.unanswered_calls and conversation.message_count - 1 == timer.seq:
                after = rule.after_seconds or core.DEFAULT_AFTER_SECONDS
                calls = conversation.unanswered_calls
                plural = "calls" if calls != 1 else "call"
                detail = (
                    f"{calls} tool {plural} in message #{timer.seq} unanswered for {after:,} s."
                )
                fired += _fire(rule, conversation, timer.seq, detail)
    return fired


def _fire(
    rule: AlertRule, conversation: Conversation, seq: int, detail: str, *, ended: bool = False
) -> int:
    """Store an alert (and its delivery), announce it on commit; 0 if this episode or this
    seq has fired already (the constraints decide, across processes)."""
    now = timezone.now()
    try:
        with transaction.atomic():
            alert = Alert.objects.create(
                rule=rule,
                conversation=conversation,
                seq=seq,
                detail=core.cut(detail, core.DETAIL_CHARS),
                fired_at=now,
                ended_at=now if ended else None,
            )
            if rule.webhook_url:
                Delivery.objects.create(
                    alert=alert,
                    url=rule.webhook_url,
                    body=webhook_body(alert, rule, conversation),
                    created_at=now,
                    next_attempt_at=now,
                )
                transaction.on_commit(wake_sender)
            _announce(str(conversation.pk), alert.pk, "fired")
    except IntegrityError:
        return 0
    return 1


def webhook_body(alert: Alert, rule: AlertRule, conversation: Conversation) -> bytes:
    """The JSON every attempt of the alert's delivery sends (docs/contract.md §11)."""
    url = settings.REPLAY_BASE_URL + conversation.get_absolute_url() + f"#m-{alert.seq}"
    return orjson.dumps(
        {
            "id": alert.pk,
            "rule": rule.pk,
            "kind": rule.kind,
            "conversation": str(conversation.pk),
            "url": url,
            "seq": alert.seq,
            "detail": alert.detail,
            "fired_at": alert.fired_at.isoformat(),
        }
    )


def wake_sender() -> None:
    deliveries_queued.send(sender=Delivery)

"""`/api/alert-rules` (docs/contract.md §11): list, create (the secret in the answer, this
once) and delete alert rules."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from django.http import HttpRequest, HttpResponse
from pydantic import Field

from conversations.alerts import reads as alert_reads
from conversations.alerts.models import AlertRule
from conversations.alerts.services import alert_rule_create, alert_rule_delete
from conversations.core import alerts as core
from conversations.record.schemas import Strict
from conversations.web.api import api, authenticate, json_response, parse_json, validate
from conversations.web.errors import ApiError


class AlertRuleIn(Strict):
    """A rule as `POST /api/alert-rules` takes it; the service checks which parameters go
    with which kind and the webhook's URL."""

    kind: Literal["pressure", "tool_error", "unanswered", "compaction"]
    threshold_percent: Annotated[int, Field(ge=1, le=1000)] | None = None
    after_seconds: Annotated[int, Field(ge=1, le=7 * 24 * 3600)] | None = None
    match: Annotated[str, Field(max_length=core.MATCH_CHARS)] | None = None
    webhook_url: Annotated[str, Field(max_length=2000)] | None = None


def rule_data(rule: AlertRule) -> dict[str, Any]:
    """A rule as the API shows it: never its secret (only the create answer holds it), and
    its webhook URL's credentials masked (docs/contract.md §11)."""
    return {
        "id": rule.pk,
        "kind": rule.kind,
        "threshold_percent": rule.threshold_percent,
        "after_seconds": rule.after_seconds,
        "match": rule.match or None,
        "webhook_url": core.masked_url(rule.webhook_url) if rule.webhook_url else None,
        "created_by": rule.created_by,
        "created_at": rule.created_at.isoformat(),
    }


@api("GET", "POST", idempotent=False)
def alert_rules(request: HttpRequest) -> HttpResponse:
    """GET: every rule (they are few: at most services.alerts.MAX_RULES); POST: a new
    rule, 201 with its `secret`, shown this once."""
    if request.method == "POST":
        data = validate(AlertRuleIn, parse_json(request))
        token = authenticate(request)  # again, for its label (the decorator keeps it not)
        rule = alert_rule_create(
            kind=data.kind,
            threshold_percent=data.threshold_percent,
            after_seconds=data.after_seconds,
            match=data.match,
            webhook_url=data.webhook_url,
            created_by=f"token {token.label}",
        )
        return json_response(rule_data(rule) | {"secret": rule.secret}, 201)
    return json_response({"results": [rule_data(r) for r in alert_reads.rule_list()]})


@api("DELETE")
def alert_rule(request: HttpRequest, rule_id: int) -> HttpResponse:
    """Delete a rule, its alerts and their pending deliveries."""
    rule = alert_reads.rule_get(rule_id)
    if rule is None:
        raise ApiError(404, f"Alert rule {rule_id} was not found.")
    alert_rule_delete(rule=rule)
    return HttpResponse(status=204)

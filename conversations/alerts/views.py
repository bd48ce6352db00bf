"""The conversation page's alerts (docs/contract.md §11): the header's open alerts, and
acknowledging one (an htmx form; without htmx, back to the page), which needs
conversations.change_alert: the button is offered only to those who hold it."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import permission_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from conversations.alerts import reads as alert_reads
from conversations.alerts import services as services_module
from conversations.alerts.presenters import AlertsPanel, alerts_panel
from conversations.web.pages import conversation_or_404, operator_required


def alerts_context(request: HttpRequest, conversation_id: Any) -> AlertsPanel:
    found, total = alert_reads.open_alerts(conversation_id)
    acknowledge = request.user.has_perm(alert_reads.ACKNOWLEDGE_PERMISSION)
    return alerts_panel(conversation_id, found, total, acknowledge=acknowledge)


@require_POST
@operator_required
@permission_required(alert_reads.ACKNOWLEDGE_PERMISSION, raise_exception=True)
def alert_acknowledge(request: HttpRequest, conversation_id: str, alert_id: int) -> HttpResponse:
    conversation = conversation_or_404(conversation_id)
    alert = alert_reads.alert_get(conversation.pk, alert_id)
    if alert is None:
        raise Http404("No such alert.")
    services_module.alert_acknowledge(alert=alert, by=request.user.get_username())
    if getattr(request, "htmx", None):
        return render(
            request,
            "conversations/alerts.html#alerts",
            {"alerts": alerts_context(request, conversation.pk)},
        )
    return redirect(conversation.get_absolute_url())

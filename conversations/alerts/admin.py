"""Django admin for alerts (docs/contract.md §11): rules (made through the service, the
secret shown once), alerts (acknowledged from here too), and every webhook delivery with
each of its attempts (time, status, error), redelivered by an action. A webhook URL is
shown with its credentials masked; they are write-only."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from conversations.alerts.models import Alert, AlertRule, Delivery, DeliveryAttempt
from conversations.alerts.services import (
    alert_acknowledge,
    alert_rule_create,
    alert_rule_delete,
    webhook_url_check,
)
from conversations.alerts.webhooks import delivery_redeliver
from conversations.core import alerts as core
from conversations.record.admin import ReplayAdmin
from conversations.record.errors import IngestError


class AlertRuleForm(forms.ModelForm[AlertRule]):
    class Meta:
        model = AlertRule
        fields = ["kind", "threshold_percent", "after_seconds", "match", "webhook_url"]
        help_texts = {
            "threshold_percent": "pressure: % of the window the next request reaches (80)",
            "after_seconds": "unanswered: seconds a tool call waits for its result (60)",
            "match": "only conversations whose title or metadata source contains this",
        }

    def clean_webhook_url(self) -> str:
        """The service's own check of the URL, on the field (docs/contract.md §11)."""
        url = str(self.cleaned_data.get("webhook_url") or "").strip()
        if url:
            try:
                webhook_url_check(url=url)
            except IngestError as exc:
                raise forms.ValidationError(str(exc)) from None
        return url


@admin.register(AlertRule)
class AlertRuleAdmin(ReplayAdmin[AlertRule]):
    form = AlertRuleForm
    list_display = ["id", "kind", "threshold_percent", "after_seconds", "match", "webhook"]
    list_filter = ["kind"]
    readonly_fields = ["webhook"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a rule is made or deleted, never edited (its alerts keep their sense)

    def get_fields(self, request: HttpRequest, obj: AlertRule | None = None) -> tuple[str, ...]:
        """The add form takes the URL; a stored rule shows it masked."""
        fields = AlertRuleForm.Meta.fields
        if obj is None:
            return tuple(fields)
        return tuple("webhook" if name == "webhook_url" else name for name in fields)

    @admin.display(description="webhook url")
    def webhook(self, obj: AlertRule) -> str:
        return core.masked_url(obj.webhook_url)

    def save_model(self, request: HttpRequest, obj: AlertRule, form: Any, change: bool) -> None:
        try:
            rule = alert_rule_create(
                kind=obj.kind,
                threshold_percent=obj.threshold_percent,
                after_seconds=obj.after_seconds,
                match=obj.match,
                webhook_url=obj.webhook_url,
                created_by=request.user.get_username(),
            )
        except IngestError as exc:
            messages.error(request, f"{exc.field}: {exc}")
            return
        obj.pk, obj.secret, obj.created_at = rule.pk, rule.secret, rule.created_at
        if rule.webhook_url:
            messages.warning(
                request,
                f"Webhook secret of rule {rule.pk}: {rule.secret} — copy it now, "
                "it is not shown again.",
            )

    def delete_model(self, request: HttpRequest, obj: AlertRule) -> None:
        alert_rule_delete(rule=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AlertRule]) -> None:
        for rule in queryset:
            alert_rule_delete(rule=rule)


@admin.register(Alert)
class AlertAdmin(ReplayAdmin[Alert]):
    list_display = ["id", "rule", "conversation", "seq", "detail", "fired_at", "acknowledged_at"]
    list_filter = ["rule__kind", "acknowledged_at"]
    list_select_related = ["rule", "conversation"]
    readonly_fields = [
        "rule",
        "conversation",
        "seq",
        "detail",
        "fired_at",
        "ended_at",
        "acknowledged_at",
        "acknowledged_by",
    ]
    actions = ["acknowledge"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.action(description="Acknowledge selected alerts", permissions=["change"])
    def acknowledge(self, request: HttpRequest, queryset: QuerySet[Alert]) -> None:
        done = sum(
            alert_acknowledge(alert=alert, by=request.user.get_username())
            for alert in queryset.select_related("rule")
        )
        self.message_user(request, f"Acknowledged {done} alert(s).")


class AttemptInline(admin.TabularInline[DeliveryAttempt, Delivery]):
    model = DeliveryAttempt
    fields = ["number", "at", "status_code", "error", "duration_ms"]
    readonly_fields = ["number", "at", "status_code", "error", "duration_ms"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Delivery)
class DeliveryAdmin(ReplayAdmin[Delivery]):
    list_display = ["id", "alert", "webhook", "state", "attempts", "next_attempt_at", "last_error"]
    list_filter = ["state"]
    list_select_related = ["alert"]
    readonly_fields = [
        "id",
        "alert",
        "webhook",
        "state",
        "attempts",
        "created_at",
        "next_attempt_at",
        "last_error",
        "sent_body",
    ]
    exclude = ["body", "url"]
    inlines = [AttemptInline]
    actions = ["redeliver"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="url")
    def webhook(self, obj: Delivery) -> str:
        return core.masked_url(obj.url)

    @admin.display(description="body")
    def sent_body(self, obj: Delivery) -> str:
        return bytes(obj.body).decode("utf-8", "replace")

    @admin.action(description="Redeliver selected deliveries now", permissions=["change"])
    def redeliver(self, request: HttpRequest, queryset: QuerySet[Delivery]) -> None:
        for delivery in queryset:
            delivery_redeliver(delivery=delivery)
        self.message_user(request, f"{queryset.count()} delivery(ies) will be attempted again.")

"""Alerts (docs/contract.md §11): rules through the API and the services, one alert per
episode for each kind, the list's badge and `?alerts=open`, acknowledging from the page,
and hostile text shown as text."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from conversations.alerts.models import Alert, AlertRule, AlertTimer, Delivery
from conversations.alerts.services import (
    Change,
    alert_acknowledge,
    alert_rule_create,
    alerts_due,
    alerts_evaluate,
)
from conversations.record.models.conversation import Conversation
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create, conversation_update
from conversations.sharing.services import share_create
from tests.builders import text, tool_result, tool_use

pytestmark = [pytest.mark.sqlite, pytest.mark.django_db]

HOSTILE = '<script>alert(1)</script><b hx-get="/x">bold</b>'


@pytest.fixture(autouse=True)
def at_commit(django_capture_on_commit_callbacks: Any) -> None:
    """Each append's on-commit work (alert evaluation among it) runs as after a commit."""
    global commit
    commit = django_capture_on_commit_callbacks


commit: Any = None


def append(conversation: Any, role: str, *blocks: dict[str, Any], **metadata: Any) -> None:
    with commit(execute=True):
        message_append(
            conversation=conversation,
            role=role,
            blocks=[BLOCK_ADAPTER.validate_python(b) for b in blocks],
            metadata=metadata,
        )
    conversation.refresh_from_db()


def conversation(title: str = "agent run", **metadata: Any) -> Any:
    return conversation_create(title=title, metadata=metadata)


# -- the API --------------------------------------------------------------------------------------


def test_a_rule_is_created_with_defaults_and_its_secret_shown_once(api: Any) -> None:
    made = api.post(
        "/api/alert-rules", {"kind": "pressure", "webhook_url": "https://example.com/h"}
    )
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["kind"] == "pressure" and body["threshold_percent"] == 80
    assert len(body["secret"]) == 64
    assert AlertRule.objects.get(pk=body["id"]).secret == body["secret"]
    listed = api.get("/api/alert-rules").json()["results"]
    assert [r["id"] for r in listed] == [body["id"]]
    assert "secret" not in listed[0]
    unanswered = api.post("/api/alert-rules", {"kind": "unanswered"}).json()
    assert unanswered["after_seconds"] == 60 and unanswered["webhook_url"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"kind": "loud"}, "kind"),
        ({}, "kind"),
        ({"kind": "tool_error", "threshold_percent": 50}, "threshold_percent"),
        ({"kind": "pressure", "threshold_percent": 0}, "threshold_percent"),
        ({"kind": "pressure", "after_seconds": 5}, "after_seconds"),
        ({"kind": "unanswered", "after_seconds": "60"}, "after_seconds"),
        ({"kind": "compaction", "webhook_url": "ftp://example.com/h"}, "webhook_url"),
        ({"kind": "compaction", "webhook_url": "https://"}, "webhook_url"),
        ({"kind": "compaction", "webhook_url": "javascript:alert(1)"}, "webhook_url"),
        ({"kind": "compaction", "webhook_url": "http://0177.0.0.1:8204/"}, "webhook_url"),
        ({"kind": "compaction", "webhook_url": "http://127.000.000.001/"}, "webhook_url"),
        ({"kind": "compaction", "match": "x" * 201}, "match"),
        ({"kind": "compaction", "colour": "red"}, "colour"),
    ],
)
def test_a_bad_rule_is_a_400_naming_the_field_and_stores_nothing(
    api: Any, body: dict[str, Any], field: str
) -> None:
    answer = api.post("/api/alert-rules", body)
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["error"]
    assert not AlertRule.objects.exists()


def test_a_rule_is_deleted_with_its_alerts(api: Any) -> None:
    rule = api.post("/api/alert-rules", {"kind": "tool_error"}).json()
    c = conversation()
    append(c, "user", tool_result("t1", "boom", is_error=True))
    assert Alert.objects.filter(rule_id=rule["id"]).count() == 1
    assert delete(api, rule["id"]).status_code == 204
    assert not Alert.objects.exists()
    missing = delete(api, rule["id"])
    assert missing.status_code == 404 and str(rule["id"]) in missing.json()["error"]


def delete(api: Any, rule_id: int) -> Any:
    return api.client.delete(f"/api/alert-rules/{rule_id}", headers=api._headers(None))


def test_the_rules_api_wants_a_token(anonymous_api: Any) -> None:
    assert anonymous_api.get("/api/alert-rules").status_code == 401
    assert delete(anonymous_api, 1).status_code == 401
    assert anonymous_api.post("/api/alert-rules", {"kind": "pressure"}).status_code == 401
    assert not AlertRule.objects.exists()


def test_a_secret_is_never_stored_by_an_idempotency_key(api: Any) -> None:
    answer = api.post("/api/alert-rules", {"kind": "pressure"}, headers={"Idempotency-Key": "k1"})
    assert answer.status_code == 400 and "Idempotency-Key" in answer.json()["error"]


# -- one alert per episode ------------------------------------------------------------------------


def test_tool_errors_fire_once_until_acknowledged() -> None:
    rule = alert_rule_create(kind="tool_error")
    c = conversation()
    append(c, "assistant", tool_use("t1"))
    assert not Alert.objects.exists()
    append(c, "user", tool_result("t1", "boom", is_error=True))
    append(c, "assistant", tool_use("t2"))
    append(c, "user", tool_result("t2", "boom again", is_error=True))
    (alert,) = Alert.objects.all()
    assert alert.rule == rule and alert.seq == 1 and "1 tool error" in alert.detail
    assert alert_acknowledge(alert=alert, by="ops")
    assert not alert_acknowledge(alert=alert, by="ops")
    append(c, "assistant", tool_use("t3"))
    append(c, "user", tool_result("t3", "and again", is_error=True))
    assert Alert.objects.count() == 2
    assert Alert.objects.latest("fired_at").seq == 5


def test_pressure_fires_once_and_rearms_below_the_threshold() -> None:
    alert_rule_create(kind="pressure", threshold_percent=50)
    c = conversation(context_window=2000)
    append(c, "user", text("hello " * 100))  # ≈100 tokens: 5%
    assert not Alert.objects.exists()
    append(c, "user", text("hello " * 1000))  # past 50%
    append(c, "user", text("more"))
    (alert,) = Alert.objects.all()
    assert alert.seq == 1 and "threshold 50%" in alert.detail and alert.ended_at is None
    # A bigger window (as a compaction would leave a smaller request): the episode ends…
    conversation_update(conversation=c, title=c.title, metadata={"context_window": 100_000})
    append(c, "user", text("after"))
    alert.refresh_from_db()
    assert alert.ended_at is not None
    # …and the next time the request reaches the threshold is a new alert.
    conversation_update(conversation=c, title=c.title, metadata={"context_window": 2000})
    append(c, "user", text("again"))
    assert Alert.objects.count() == 2


def test_unanswered_fires_when_the_call_has_waited_and_not_before() -> None:
    alert_rule_create(kind="unanswered", after_seconds=30)
    c = conversation()
    append(c, "assistant", tool_use("t1"))
    (timer,) = AlertTimer.objects.all()
    assert alerts_due(now=timezone.now()) == 0
    assert alerts_due(now=timezone.now() + timedelta(seconds=31)) == 1
    (alert,) = Alert.objects.all()
    assert alert.seq == 0 and "unanswered for 30 s" in alert.detail
    assert not AlertTimer.objects.exists()
    append(c, "assistant", text("still thinking"), tool_use("t2"))  # the episode runs on
    assert alerts_due(now=timezone.now() + timedelta(hours=1)) == 0
    append(c, "user", tool_result("t2"))  # answered: the episode ends
    alert.refresh_from_db()
    assert alert.ended_at is not None


def test_an_answered_call_fires_nothing() -> None:
    alert_rule_create(kind="unanswered", after_seconds=30)
    c = conversation()
    append(c, "assistant", tool_use("t1"))
    append(c, "user", tool_result("t1"))
    assert alerts_due(now=timezone.now() + timedelta(minutes=5)) == 0
    assert not Alert.objects.exists() and not AlertTimer.objects.exists()


def test_each_compaction_boundary_fires_once() -> None:
    alert_rule_create(kind="compaction")
    c = conversation()
    append(c, "user", text("before"))
    marks = [{"seq": 1, "trigger": HOSTILE, "pre_tokens": 150000}]
    conversation_update(conversation=c, title=c.title, metadata={"compact_boundaries": marks})
    append(c, "user", text("summary"))
    append(c, "user", text("after"))
    (alert,) = Alert.objects.all()
    assert alert.seq == 1 and "150,000 tokens" in alert.detail and alert.ended_at is not None


def test_a_match_limits_a_rule_to_titles_or_sources_holding_it() -> None:
    alert_rule_create(kind="tool_error", match="Prod")
    watched = conversation("nightly prod run")
    sourced = conversation("run", source="claude-code:prod")
    other = conversation("staging run")
    for c in (watched, sourced, other):
        append(c, "user", tool_result("t", "boom", is_error=True))
    assert set(Alert.objects.values_list("conversation_id", flat=True)) == {watched.pk, sourced.pk}


def test_a_webhook_rule_stores_one_delivery_with_the_body_it_sends() -> None:
    rule = alert_rule_create(kind="tool_error", webhook_url="http://127.0.0.1:9/h")
    c = conversation()
    append(c, "user", tool_result("t", "boom", is_error=True))
    (delivery,) = Delivery.objects.all()
    import orjson

    body = orjson.loads(bytes(delivery.body))
    assert set(body) == {"id", "rule", "kind", "conversation", "url", "seq", "detail", "fired_at"}
    assert body["rule"] == rule.pk and body["conversation"] == str(c.pk) and body["seq"] == 0
    assert body["url"].endswith(f"{c.get_absolute_url()}#m-0")
    assert delivery.state == "pending" and delivery.next_attempt_at is not None


def test_evaluating_with_no_rules_is_one_query(django_assert_num_queries: Any) -> None:
    c = conversation()
    append(c, "user", text("hello"))
    with django_assert_num_queries(1):
        assert alerts_evaluate(Change(str(c.pk), 0, 0)) == 0


def test_evaluating_rules_that_do_not_fire_reads_four_rows_sets_whatever_their_number(
    django_assert_num_queries: Any,
) -> None:
    for _ in range(5):
        for kind in ("tool_error", "compaction", "unanswered"):
            alert_rule_create(kind=kind)
    c = conversation()
    for n in range(30):
        append(c, "user", text(f"message {n}"))
    # The rules, the conversation's row, its running episodes, its clocks: no writes.
    with django_assert_num_queries(4):
        assert alerts_evaluate(Change(str(c.pk), 29, 0)) == 0


# -- the pages ------------------------------------------------------------------------------------


@pytest.fixture
def acknowledger_client(operator: Any) -> Client:
    """An operator who may also acknowledge alerts (conversations.change_alert)."""
    operator.user_permissions.add(Permission.objects.get(codename="change_alert"))
    client = Client()
    client.force_login(operator)
    return client


def fired(title: str = "agent run") -> tuple[Any, Alert]:
    alert_rule_create(kind="tool_error")
    c = conversation(title)
    append(c, "user", tool_result("t", "boom", is_error=True))
    return c, Alert.objects.get(conversation=c)


def test_the_list_shows_a_badge_and_filters_open_alerts(operator_client: Client) -> None:
    c, alert = fired("alerted run")
    quiet = conversation("quiet run")
    page = operator_client.get("/").content.decode()
    assert "1 open alert" in page and "quiet run" in page
    only = operator_client.get("/?alerts=open").content.decode()
    assert "alerted run" in only and "quiet run" not in only
    assert 'name="alerts" value="open" checked' in only
    alert_acknowledge(alert=alert, by="ops")
    after = operator_client.get("/?alerts=open").content.decode()
    assert "alerted run" not in after
    assert quiet.pk


def test_a_bad_alerts_filter_is_a_400_naming_it(operator_client: Client, api: Any) -> None:
    page = operator_client.get("/?alerts=%3Cb%3Eall")
    assert page.status_code == 400 and b"alerts must be" in page.content
    assert b"<b>all" not in page.content
    answer = api.get("/api/conversations", alerts="closed")
    assert answer.status_code == 400 and answer.json()["field"] == "alerts"


def test_the_conversation_page_lists_open_alerts_and_acknowledges_one(
    acknowledger_client: Client,
) -> None:
    c, alert = fired()
    page = acknowledger_client.get(c.get_absolute_url()).content.decode()
    assert 'id="alerts"' in page and "1 open alert" in page and alert.detail in page
    url = f"/c/{c.pk}/alerts/{alert.pk}/acknowledge"
    assert f'hx-post="{url}"' in page
    answer = acknowledger_client.post(url, HTTP_HX_REQUEST="true")
    assert answer.status_code == 200
    assert 'id="alerts"' in answer.content.decode() and "open alert" not in answer.content.decode()
    alert.refresh_from_db()
    assert alert.acknowledged_at is not None and alert.acknowledged_by == "operator"


def test_acknowledging_wants_an_operator_and_csrf(outsider_client: Client, operator: Any) -> None:
    c, alert = fired()
    url = f"/c/{c.pk}/alerts/{alert.pk}/acknowledge"
    assert outsider_client.post(url).status_code == 403
    assert Client().post(url).status_code == 302  # to the login page
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(operator)
    assert strict.post(url).status_code == 403
    assert strict.get(url).status_code == 405
    alert.refresh_from_db()
    assert alert.acknowledged_at is None


def test_another_conversations_alert_is_not_found(acknowledger_client: Client) -> None:
    c, alert = fired()
    other = conversation("other")
    answer = acknowledger_client.post(f"/c/{other.pk}/alerts/{alert.pk}/acknowledge")
    assert answer.status_code == 404


def test_hostile_text_in_titles_and_details_is_shown_as_text(operator_client: Client) -> None:
    alert_rule_create(kind="compaction")
    c = conversation(HOSTILE)
    append(c, "user", text("before"))
    marks = [{"seq": 1, "trigger": HOSTILE}]
    conversation_update(conversation=c, title=c.title, metadata={"compact_boundaries": marks})
    append(c, "user", text("summary"))
    assert Alert.objects.filter(detail__contains="<script>").exists()
    for url in ("/", c.get_absolute_url()):
        page = operator_client.get(url).content.decode()
        assert "<script>alert(1)" not in page and '<b hx-get="/x">' not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def test_a_share_page_shows_no_alerts(operator_client: Client) -> None:
    c, alert = fired()
    _, token = share_create(conversation=c)
    page = Client().get(f"/s/{token}/").content.decode()
    assert alert.detail not in page and 'id="alerts"' not in page


def test_without_htmx_acknowledging_goes_back_to_the_page(acknowledger_client: Client) -> None:
    c, alert = fired()
    answer = acknowledger_client.post(f"/c/{c.pk}/alerts/{alert.pk}/acknowledge")
    assert answer.status_code == 302 and answer["Location"] == c.get_absolute_url()
    alert.refresh_from_db()
    assert alert.acknowledged_at is not None


def test_the_admin_acknowledges_alerts(admin_client: Client) -> None:
    c, alert = fired()
    listed = admin_client.get("/admin/conversations/alert/").content.decode()
    assert alert.detail in listed
    answer = admin_client.post(
        "/admin/conversations/alert/",
        {"action": "acknowledge", "_selected_action": [str(alert.pk)]},
    )
    assert answer.status_code == 302
    alert.refresh_from_db()
    assert alert.acknowledged_at is not None and alert.acknowledged_by == "admin"


def test_acknowledging_wants_the_change_alert_permission(operator_client: Client) -> None:
    c, alert = fired()
    url = f"/c/{c.pk}/alerts/{alert.pk}/acknowledge"
    page = operator_client.get(c.get_absolute_url()).content.decode()
    assert "1 open alert" in page and alert.detail in page
    assert url not in page and "Acknowledge" not in page
    assert operator_client.post(url, HTTP_HX_REQUEST="true").status_code == 403
    assert operator_client.post(url).status_code == 403
    alert.refresh_from_db()
    assert alert.acknowledged_at is None


def test_the_admin_does_not_acknowledge_with_the_view_permission(operator: Any) -> None:
    c, alert = fired()
    operator.is_staff = True
    operator.save()
    operator.user_permissions.add(Permission.objects.get(codename="view_alert"))
    client = Client()
    client.force_login(operator)
    answer = client.post(
        "/admin/conversations/alert/",
        {"action": "acknowledge", "_selected_action": [str(alert.pk)]},
    )
    assert answer.status_code == 403
    alert.refresh_from_db()
    assert alert.acknowledged_at is None


# -- webhook credentials are write-only -------------------------------------------------------

SECRET_URL = "https://hook-user:hook-pass@hooks.example.com:8443/in?x=1"
MASKED_URL = "https://***:***@hooks.example.com:8443/in?x=1"


def test_the_rules_api_masks_a_webhook_urls_credentials(api: Any) -> None:
    made = api.post("/api/alert-rules", {"kind": "tool_error", "webhook_url": SECRET_URL})
    assert made.status_code == 201, made.content
    assert "hook-pass" not in made.content.decode() and made.json()["webhook_url"] == MASKED_URL
    listed = api.get("/api/alert-rules")
    assert "hook-pass" not in listed.content.decode() and "hook-user" not in listed.content.decode()
    assert listed.json()["results"][0]["webhook_url"] == MASKED_URL
    assert AlertRule.objects.get().webhook_url == SECRET_URL  # stored whole, for the sender


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://example.com/h", "https://example.com/h"),
        ("http://token@[::1]:8080/h", "http://***:***@[::1]:8080/h"),
        ("https://:pass@example.com", "https://***:***@example.com"),
        ("https://a:b@c@example.com/p#f", "https://***:***@example.com/p#f"),
    ],
)
def test_a_webhook_url_is_shown_without_its_credentials(url: str, shown: str) -> None:
    from conversations.core.alerts import masked_url

    assert masked_url(url) == shown


def test_the_admin_masks_webhook_credentials_to_viewers(operator: Any) -> None:
    rule = alert_rule_create(kind="tool_error", webhook_url=SECRET_URL)
    c = conversation()
    append(c, "user", tool_result("t", "boom", is_error=True))
    delivery = Delivery.objects.get()
    operator.is_staff = True
    operator.save()
    for codename in ("view_alertrule", "view_delivery"):
        operator.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(operator)
    for url in (
        "/admin/conversations/alertrule/",
        f"/admin/conversations/alertrule/{rule.pk}/change/",
        "/admin/conversations/delivery/",
        f"/admin/conversations/delivery/{delivery.pk}/change/",
    ):
        page = client.get(url)
        assert page.status_code == 200, url
        text = page.content.decode()
        assert "hook-pass" not in text and "hook-user" not in text, url
        assert "https://***:***@hooks.example.com:8443/in?x=1" in html.unescape(text), url


def test_the_admin_add_form_still_takes_a_webhook_url(admin_client: Client) -> None:
    page = admin_client.get("/admin/conversations/alertrule/add/").content.decode()
    assert 'name="webhook_url"' in page
    answer = admin_client.post(
        "/admin/conversations/alertrule/add/",
        {"kind": "tool_error", "webhook_url": SECRET_URL},
    )
    assert answer.status_code == 302
    assert AlertRule.objects.get().webhook_url == SECRET_URL


# -- a tool_error alert names the message holding the error ---------------------------------------

HOOK = "http://127.0.0.1:9/h"


def before_the_error(api: Any) -> Any:
    """A watched conversation with messages #0 and #1; the error comes at #2."""
    alert_rule_create(kind="tool_error", webhook_url=HOOK)
    c = conversation()
    append(c, "user", text("start"))
    append(c, "assistant", tool_use("t1"))
    return c


def assert_names_message_two(client: Client, c: Any) -> None:
    """The alert, the page's link to it and the webhook's body all name message #2."""
    (alert,) = Alert.objects.all()
    assert alert.seq == 2 and "message #2" in alert.detail, alert.detail
    page = client.get(c.get_absolute_url()).content.decode()
    (item,) = re.findall(r'<li class="alert-item".*?</li>', page, re.S)
    assert 'href="#m-2">#2</a>' in item and "#m-3" not in item
    import orjson

    (delivery,) = Delivery.objects.all()
    body = orjson.loads(bytes(delivery.body))
    assert body["seq"] == 2 and body["url"].endswith(f"{c.get_absolute_url()}#m-2")


def test_an_error_posted_in_a_message_names_it_though_a_later_one_landed_first(
    api: Any, operator_client: Client
) -> None:
    c = before_the_error(api)
    path = f"/api/conversations/{c.pk}/messages"
    # The alert loop evaluates off the request: the next message may be stored by then.
    with commit(execute=False) as callbacks:
        error = {"role": "user", "blocks": [tool_result("t1", "boom", is_error=True)]}
        assert api.post(path, error).status_code == 201
        assert (
            api.post(path, {"role": "assistant", "blocks": [text("retrying")]}).status_code == 201
        )
    for callback in callbacks:
        callback()
    assert_names_message_two(operator_client, c)


def test_an_error_appended_to_a_message_names_that_message(
    api: Any, operator_client: Client
) -> None:
    c = before_the_error(api)
    append(c, "user", tool_result("t0", "fine"))
    append(c, "assistant", text("later"))
    with commit(execute=True):
        block = tool_result("t1", "boom", is_error=True)
        answer = api.post(f"/api/conversations/{c.pk}/messages/2/blocks", block)
    assert answer.status_code == 201, answer.content
    assert_names_message_two(operator_client, c)


def test_an_error_in_a_batch_names_its_message_not_the_batch_last(
    api: Any, operator_client: Client
) -> None:
    c = before_the_error(api)
    batch = {
        "messages": [
            {"role": "user", "blocks": [tool_result("t1", "boom", is_error=True)]},
            {"role": "assistant", "blocks": [text("retrying")]},
        ]
    }
    with commit(execute=True):
        answer = api.post(f"/api/conversations/{c.pk}/messages/batch", batch)
    assert answer.status_code == 201, answer.content
    assert_names_message_two(operator_client, c)


def test_an_error_in_an_import_names_its_message(api: Any, operator_client: Client) -> None:
    alert_rule_create(kind="tool_error", webhook_url=HOOK)
    body = {
        "model": "claude-sonnet-4-5",
        "messages": [
            {"role": "user", "content": "start"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "x", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": "boom",
                        "is_error": True,
                    }
                ],
            },
            {"role": "assistant", "content": "retrying"},
        ],
    }
    with commit(execute=True):
        answer = api.post("/api/imports?format=anthropic", body)
    assert answer.status_code == 201, answer.content
    assert_names_message_two(operator_client, Conversation.objects.get())


def test_merged_changes_name_the_earliest_error() -> None:
    """The alert loop merges what several commits appended: the first error stays named."""
    one = Change("c", 2, 1, error_seq=2)
    later = Change("c", 3, 0)
    assert one.merged(later).error_seq == 2 and later.merged(one).error_seq == 2
    assert one.merged(Change("c", 4, 1, error_seq=4)).error_seq == 2
    assert later.merged(later).error_seq is None

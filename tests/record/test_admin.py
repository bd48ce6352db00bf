"""The Django admin (docs/contract.md §4): conversations, messages with their blocks and projection,
API tokens; the record stays append-only and everything hostile is escaped."""

from __future__ import annotations

import hashlib
import html
import json
import re
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Group, Permission
from django.contrib.messages import get_messages
from django.db import transaction
from django.test import Client, RequestFactory
from django.urls import reverse

from conversations.alerts.services import alert_rule_create
from conversations.record import events
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.models.tokens import ApiToken
from conversations.record.notes.services import note_add
from conversations.record.reads import selectors
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.search import reads as search_reads
from conversations.record.services.api_tokens import api_token_create
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create
from conversations.sharing.services import share_create
from tests.builders import tool_result

pytestmark = pytest.mark.django_db

CONVERSATIONS = "/admin/conversations/conversation/"
MESSAGES = "/admin/conversations/message/"
TOKENS = "/admin/conversations/apitoken/"
PNG = (  # 1×1 pixel
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5E"
    "rkJggg=="
)
HOSTILE = "<script>alert(1)</script>"


def append(conversation: Conversation, role: str, *blocks: dict[str, Any]) -> Message:
    message, _ = message_append(
        conversation=conversation,
        role=role,
        blocks=[BLOCK_ADAPTER.validate_python(block) for block in blocks],
    )
    return message


@pytest.fixture
def conversation() -> Conversation:
    conversation = conversation_create(title="Incident on api-7")
    append(conversation, "system", {"type": "text", "text": "Be careful."})
    append(
        conversation,
        "user",
        {"type": "text", "text": "What does this show?"},
        {"type": "image", "media_type": "image/png", "data": PNG},
    )
    append(
        conversation,
        "assistant",
        {"type": "tool_use", "id": "call_9", "name": "lookup", "input": {"z": 1, "a": "é"}},
    )
    return conversation


def message(conversation: Conversation, seq: int) -> Message:
    return Message.objects.get(conversation=conversation, seq=seq)


def json_in_pre(page: str) -> list[Any]:
    """Every <pre> of the page that holds JSON, parsed."""
    found = []
    for raw in re.findall(r"<pre[^>]*>(.*?)</pre>", page, flags=re.S):
        try:
            found.append(json.loads(html.unescape(raw)))
        except ValueError:
            continue
    return found


def staff(django_user_model: Any, *permissions: str) -> Client:
    user = django_user_model.objects.create_user(
        "staffer", "s@x.test", "a long passphrase 3", is_staff=True
    )
    for codename in permissions:
        user.user_permissions.add(Permission.objects.get(codename=codename))
    client = Client()
    client.force_login(user)
    return client


def api_status(clear: str | None) -> int:
    """The API's answer to a token: 200 when it authenticates."""
    return (
        Client().get("/api/conversations", headers={"Authorization": f"Bearer {clear}"}).status_code
    )


def token_in_messages(response: Any, digest: str) -> str | None:
    """The clear token shown in the response's messages: the word whose SHA-256 is `digest`."""
    for shown in get_messages(response.wsgi_request):
        for word in re.split(r"[\s'\"—:,()]+", str(shown)):
            if word and hashlib.sha256(word.encode()).hexdigest() == digest:
                return word
    return None


# Conversations


def test_conversation_changelist_lists_with_message_count_and_dashboard_link(
    admin_client: Client, conversation: Conversation
) -> None:
    response = admin_client.get(CONVERSATIONS)

    assert response.status_code == 200
    page = response.content.decode()
    assert "Incident on api-7" in page
    assert re.search(r'<td class="field-message_count">\s*3\s*</td>', page)
    assert f'href="/c/{conversation.id}/"' in page


@pytest.mark.sqlite
def test_conversation_changelist_searches_titles(admin_client: Client) -> None:
    conversation_create(title="Alpha deploy")
    conversation_create(title="Beta rollback")

    page = admin_client.get(CONVERSATIONS, {"q": "alpha"}).content.decode()

    assert "Alpha deploy" in page
    assert "Beta rollback" not in page


def test_conversation_change_page_shows_the_conversation(
    admin_client: Client, conversation: Conversation
) -> None:
    response = admin_client.get(f"{CONVERSATIONS}{conversation.id}/change/")

    assert response.status_code == 200
    page = response.content.decode()
    assert 'value="Incident on api-7"' in page
    assert str(conversation.id) in page
    assert f'href="/c/{conversation.id}/"' in page


def test_hostile_title_is_escaped_in_the_admin(admin_client: Client) -> None:
    hostile = conversation_create(title=HOSTILE)

    for url in (CONVERSATIONS, f"{CONVERSATIONS}{hostile.id}/change/"):
        page = admin_client.get(url).content.decode()
        assert HOSTILE not in page, url
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page, url


def test_adding_a_conversation_in_the_admin_creates_it_through_the_services(
    admin_client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(events.LIST_GROUP, channel)

    with django_capture_on_commit_callbacks(execute=True):
        response = admin_client.post(
            f"{CONVERSATIONS}add/", {"title": "Made in admin", "metadata": '{"team": "ops"}'}
        )

    assert response.status_code == 302
    created = Conversation.objects.get(title="Made in admin")
    assert created.metadata == {"team": "ops"}
    assert created.message_count == 0
    event = async_to_sync(layer.receive)(channel)
    assert event == {"type": "conversation.created", "conversation_id": str(created.id)}


def test_changing_a_conversation_title_in_the_admin_keeps_its_messages(
    admin_client: Client, conversation: Conversation
) -> None:
    response = admin_client.post(
        f"{CONVERSATIONS}{conversation.id}/change/", {"title": "Renamed", "metadata": "{}"}
    )

    assert response.status_code == 302
    conversation.refresh_from_db()
    assert conversation.title == "Renamed"
    assert conversation.message_count == 3
    assert Message.objects.filter(conversation=conversation).count() == 3


# Messages and blocks


def test_message_change_page_shows_blocks_inline(
    admin_client: Client, conversation: Conversation
) -> None:
    response = admin_client.get(f"{MESSAGES}{message(conversation, 2).pk}/change/")

    assert response.status_code == 200
    page = response.content.decode()
    assert "call_9" in page
    assert "lookup" in page
    assert "tool_use" in page


def test_message_projection_preview_is_exactly_the_projection(
    admin_client: Client, conversation: Conversation
) -> None:
    page = admin_client.get(f"{MESSAGES}{message(conversation, 2).pk}/change/").content.decode()

    shown = json_in_pre(page)
    expected = {"role": "assistant", "content": 'Tool use: lookup({"z":1,"a":"é"})'}
    assert expected in shown


def test_message_projection_preview_shows_images_as_not_seen_with_vision_off(
    admin_client: Client, conversation: Conversation
) -> None:
    page = admin_client.get(f"{MESSAGES}{message(conversation, 1).pk}/change/").content.decode()

    shown = json_in_pre(page)
    marker = "[Image (image/png): not seen — this model cannot view images]"
    assert {"role": "user", "content": f"What does this show?\n\n{marker}"} in shown
    openai_on = {
        "role": "user",
        "content": [
            {"type": "text", "text": "What does this show?"},
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        ],
    }
    assert openai_on in shown


def test_empty_message_previews_as_empty_message(admin_client: Client) -> None:
    conversation = conversation_create(title="Quiet")
    empty = append(conversation, "assistant")

    page = admin_client.get(f"{MESSAGES}{empty.pk}/change/").content.decode()

    assert {"role": "assistant", "content": "[Empty message]"} in json_in_pre(page)


def test_anthropic_preview_lifts_a_system_message_into_system_as_the_payload_does(
    admin_client: Client, conversation: Conversation
) -> None:
    page = admin_client.get(f"{MESSAGES}{message(conversation, 0).pk}/change/").content.decode()

    shown = json_in_pre(page)
    wire = {"role": "system", "content": "Be careful."}
    assert shown.count(wire) == 2  # openai, vision on and off: system messages stay
    assert shown.count({"system": "Be careful."}) == 2  # anthropic: lifted, as its payload
    payload = selectors.replay_payload(conversation, vision=True, shape="anthropic")
    assert payload["system"] == "Be careful."  # type: ignore[typeddict-item]
    assert wire not in payload["messages"]
    headings = re.findall(r"<h4>(.*?)</h4>", page)
    assert headings == [
        "openai · vision on",
        "openai · vision off",
        "anthropic · vision on · lifted into system",
        "anthropic · vision off · lifted into system",
    ]


def listed_messages(page: str) -> set[int]:
    return {int(pk) for pk in re.findall(r'href="/admin/conversations/message/(\d+)/change/', page)}


@pytest.mark.sqlite
def test_message_search_finds_block_text_tools_titles_and_ids(admin_client: Client) -> None:
    incident = conversation_create(title="Quarterly incident review")
    said = append(incident, "user", {"type": "text", "text": "Is the zebra-42 invoice paid?"})
    called = append(
        incident,
        "assistant",
        {"type": "reasoning", "text": "look it up"},
        {"type": "tool_use", "id": "c1", "name": "ledger_lookup", "input": {"ref": "INV-77"}},
    )
    answered = append(
        incident,
        "user",
        {"type": "tool_result", "tool_use_id": "c1", "content": "unpaid since May"},
    )
    other = conversation_create(title="Other")
    unrelated = append(other, "user", {"type": "text", "text": "nothing to see"})

    def found(q: str) -> set[int]:
        response = admin_client.get(MESSAGES, {"q": q})
        assert response.status_code == 200
        return listed_messages(response.content.decode())

    assert found("zebra") == {said.pk}
    assert found("ZEBRA-42 invoice") == {said.pk}
    assert found("ledger_lookup") == {called.pk, answered.pk}  # the result takes its name
    assert found("inv-77") == {called.pk}
    assert found("unpaid may") == {answered.pk}
    assert found("quarterly") == {said.pk, called.pk, answered.pk}  # the title
    assert found(str(other.pk)) == {unrelated.pk}
    assert found("elephant") == set()


@pytest.mark.sqlite
def test_message_search_reads_a_bounded_number_of_blocks(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation = conversation_create(title="Many")
    for n in range(5):
        append(conversation, "user", {"type": "text", "text": f"needle {n}"})
    monkeypatch.setattr(search_reads, "MESSAGE_SEARCH_BLOCKS", 3)

    response = admin_client.get(MESSAGES, {"q": "needle"})

    assert len(listed_messages(response.content.decode())) == 3
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("More than 3 blocks" in m for m in shown), shown


@pytest.mark.sqlite
def test_message_search_lists_the_messages_of_a_bounded_number_of_titles(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(4):
        conversation = conversation_create(title=f"Quarterly {n}")
        append(conversation, "user", {"type": "text", "text": f"nothing to find {n}"})
    monkeypatch.setattr(search_reads, "MESSAGE_SEARCH_TITLES", 2)

    response = admin_client.get(MESSAGES, {"q": "quarterly"})

    assert len(listed_messages(response.content.decode())) == 2
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("or 2 titles" in m for m in shown), shown


@pytest.mark.sqlite
def test_message_search_says_why_a_long_query_is_refused(admin_client: Client) -> None:
    response = admin_client.get(MESSAGES, {"q": "word " * 50}, follow=True)

    assert response.status_code == 200
    shown = [str(m) for m in get_messages(response.wsgi_request)]
    assert any("at most" in m for m in shown), shown


def test_hostile_block_content_is_escaped_in_the_message_page(admin_client: Client) -> None:
    conversation = conversation_create(title="Hostile")
    hostile = append(
        conversation,
        "user",
        {"type": "text", "text": HOSTILE},
        {"type": "tool_result", "tool_use_id": "x", "name": "t", "content": "</pre><b>x</b>"},
    )

    response = admin_client.get(f"{MESSAGES}{hostile.pk}/change/")

    page = response.content.decode()
    assert HOSTILE not in page
    assert "</pre><b>x</b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    content = f"{HOSTILE}\n\nResult (t): </pre><b>x</b>"
    assert {"role": "user", "content": content} in json_in_pre(page)


def test_messages_cannot_be_added_in_the_admin(
    admin_client: Client, conversation: Conversation
) -> None:
    assert admin_client.get(f"{MESSAGES}add/").status_code == 403
    response = admin_client.post(
        f"{MESSAGES}add/", {"conversation": str(conversation.id), "role": "user"}
    )
    assert response.status_code == 403
    assert Message.objects.filter(conversation=conversation).count() == 3


def test_messages_cannot_be_changed_in_the_admin(
    admin_client: Client, conversation: Conversation
) -> None:
    target = message(conversation, 0)

    response = admin_client.post(f"{MESSAGES}{target.pk}/change/", {"role": "assistant"})

    assert response.status_code == 403
    target.refresh_from_db()
    assert target.role == "system"
    page = admin_client.get(f"{MESSAGES}{target.pk}/change/").content.decode()
    assert 'name="role"' not in page
    assert 'name="_save"' not in page


def test_messages_cannot_be_deleted_in_the_admin(
    admin_client: Client, conversation: Conversation
) -> None:
    # Deleting one would leave a gap in the dense seq and a wrong message_count.
    target = message(conversation, 1)

    response = admin_client.post(f"{MESSAGES}{target.pk}/delete/", {"post": "yes"})

    assert response.status_code == 403
    assert Message.objects.filter(conversation=conversation).count() == 3
    changelist = admin_client.get(MESSAGES).content.decode()
    assert 'value="delete_selected"' not in changelist


def test_blocks_have_no_admin_of_their_own(
    admin_client: Client, conversation: Conversation
) -> None:
    block = Block.objects.filter(message__conversation=conversation).first()
    assert block is not None

    assert admin_client.get("/admin/conversations/block/").status_code == 404
    assert admin_client.get(f"/admin/conversations/block/{block.pk}/change/").status_code == 404


def test_blocks_inline_cannot_be_added_or_deleted(
    admin_client: Client, conversation: Conversation
) -> None:
    page = admin_client.get(f"{MESSAGES}{message(conversation, 1).pk}/change/").content.decode()

    # No room for a new row (max forms = the rows there are) and no delete boxes.
    assert re.search(r'name="blocks-MAX_NUM_FORMS" value="0"', page)
    assert re.search(r'name="blocks-TOTAL_FORMS" value="2"', page)
    assert "-DELETE" not in page


# API tokens


def test_adding_a_token_shows_it_once_and_stores_only_its_digest(admin_client: Client) -> None:
    response = admin_client.post(f"{TOKENS}add/", {"label": "agent 7"}, follow=True)

    assert response.status_code == 200
    stored = ApiToken.objects.get(label="agent 7")
    clear = token_in_messages(response, stored.digest)
    assert clear is not None
    assert clear in response.content.decode()
    assert len(stored.digest) == 64
    assert clear not in stored.digest + stored.prefix + stored.label
    for url in (TOKENS, f"{TOKENS}{stored.pk}/change/"):
        assert clear not in admin_client.get(url).content.decode()


def test_token_made_in_the_admin_authenticates_against_the_api(admin_client: Client) -> None:
    response = admin_client.post(f"{TOKENS}add/", {"label": "agent 8"}, follow=True)
    clear = token_in_messages(response, ApiToken.objects.get(label="agent 8").digest)

    assert api_status(clear) == 200


def test_revoke_action_revokes_the_token(admin_client: Client) -> None:
    token, clear = api_token_create(label="to revoke")
    _, kept = api_token_create(label="to keep")
    assert api_status(clear) == 200

    response = admin_client.post(
        TOKENS, {"action": "revoke", "_selected_action": [str(token.pk)]}, follow=True
    )

    assert response.status_code == 200
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert api_status(clear) == 401
    assert api_status(kept) == 200


def test_token_changelist_shows_label_and_prefix_not_the_digest(admin_client: Client) -> None:
    token, _ = api_token_create(label="listed")

    page = admin_client.get(TOKENS).content.decode()

    assert "listed" in page
    assert token.prefix in page
    assert token.digest not in page


# Permissions


def test_staff_without_permission_is_refused_the_conversations(
    django_user_model: Any, conversation: Conversation
) -> None:
    client = staff(django_user_model)

    assert client.get(CONVERSATIONS).status_code == 403
    assert client.get(f"{CONVERSATIONS}{conversation.id}/change/").status_code == 403
    assert client.get(TOKENS).status_code == 403


def test_anonymous_is_sent_to_the_admin_login(conversation: Conversation) -> None:
    response = Client().get(CONVERSATIONS)

    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/")


def test_view_permission_can_view_but_not_add_or_change(
    django_user_model: Any, conversation: Conversation
) -> None:
    client = staff(django_user_model, "view_conversation")

    listing = client.get(CONVERSATIONS)
    assert listing.status_code == 200
    assert "Incident on api-7" in listing.content.decode()
    assert f"{CONVERSATIONS}add/" not in listing.content.decode()
    change_page = client.get(f"{CONVERSATIONS}{conversation.id}/change/")
    assert change_page.status_code == 200
    assert 'name="title"' not in change_page.content.decode()
    assert client.get(f"{CONVERSATIONS}add/").status_code == 403
    assert client.post(f"{CONVERSATIONS}add/", {"title": "x", "metadata": "{}"}).status_code == 403
    changed = client.post(
        f"{CONVERSATIONS}{conversation.id}/change/", {"title": "Hijacked", "metadata": "{}"}
    )
    assert changed.status_code == 403
    conversation.refresh_from_db()
    assert conversation.title == "Incident on api-7"
    assert Conversation.objects.count() == 1


# Actions: each needs a permission of its own, never the view permission


SHARE_LINKS = "/admin/conversations/sharelink/"


def test_a_token_cannot_be_revoked_with_the_view_permission(django_user_model: Any) -> None:
    token, clear = api_token_create(label="agent")
    client = staff(django_user_model, "view_apitoken")

    answer = client.post(TOKENS, {"action": "revoke", "_selected_action": [str(token.pk)]})

    assert answer.status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None
    assert api_status(clear) == 200


def test_a_token_is_revoked_with_the_change_permission(django_user_model: Any) -> None:
    token, clear = api_token_create(label="agent")
    client = staff(django_user_model, "view_apitoken", "change_apitoken")

    answer = client.post(TOKENS, {"action": "revoke", "_selected_action": [str(token.pk)]})

    assert answer.status_code == 302
    assert api_status(clear) == 401


def test_a_share_link_is_revoked_with_the_change_permission_only(
    django_user_model: Any, conversation: Conversation
) -> None:
    link, token = share_create(conversation=conversation)
    client = staff(django_user_model, "view_sharelink")
    posted = {"action": "revoke", "_selected_action": [str(link.pk)]}

    assert client.post(SHARE_LINKS, posted).status_code == 403
    assert Client().get(f"/s/{token}/").status_code == 200
    assert 'value="revoke"' not in client.get(SHARE_LINKS).content.decode()

    user = django_user_model.objects.get(username="staffer")
    user.user_permissions.add(Permission.objects.get(codename="change_sharelink"))
    assert client.post(SHARE_LINKS, posted).status_code == 302
    link.refresh_from_db()
    assert link.revoked_at is not None


def every_row() -> dict[str, list[dict[str, Any]]]:
    """Every row of every model, to tell whether a request changed anything."""
    return {
        model._meta.label: list(model.objects.order_by("pk").values())
        for model in apps.get_models()
    }


def test_no_admin_action_runs_with_view_permissions_alone(
    django_user_model: Any,
    conversation: Conversation,
    admin_user: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """Every action of every registered admin (a new one is walked too) names the
    permissions it needs; a staff user holding every view permission and nothing else is
    refused each one and changes nothing, while a superuser's same request does change
    something (so the request is one that would act)."""
    api_token_create(label="agent")
    share_create(conversation=conversation)
    note_add(conversation=conversation, message_seq=0, text="a note", user=admin_user)
    alert_rule_create(kind="tool_error", webhook_url="http://127.0.0.1:9/h")
    with django_capture_on_commit_callbacks(execute=True):
        message_append(
            conversation=conversation,
            role="user",
            blocks=[BLOCK_ADAPTER.validate_python(tool_result("t", "boom", is_error=True))],
        )
    Group.objects.create(name="operators")
    viewer = staff(django_user_model)
    user = django_user_model.objects.get(username="staffer")
    user.user_permissions.set(Permission.objects.filter(codename__startswith="view_"))
    superuser = Client()
    superuser.force_login(admin_user)
    request = RequestFactory().get("/admin/")
    request.user = admin_user

    walked = []
    for model, model_admin in admin.site._registry.items():
        for name, (func, _, _) in model_admin.get_actions(request).items():
            assert getattr(func, "allowed_permissions", ()), f"{model.__name__}.{name}"
            target = model._default_manager.order_by("pk").first()
            assert target is not None, f"no {model.__name__} to act on"
            url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
            posted = {
                "action": name,
                "_selected_action": [str(target.pk)],
                "index": "0",
                "post": "yes",  # past a confirmation page
            }
            before = every_row()
            answer = viewer.post(url, posted)
            assert every_row() == before, f"{model.__name__}.{name}"
            if model._meta.app_label == "conversations":
                assert answer.status_code == 403, f"{model.__name__}.{name}"
            with transaction.atomic():
                superuser.post(url, posted)
                assert every_row() != before, f"{model.__name__}.{name} did nothing"
                transaction.set_rollback(True)
            walked.append(f"{model.__name__}.{name}")
    assert {
        "ApiToken.revoke",
        "ShareLink.revoke",
        "Alert.acknowledge",
        "Delivery.redeliver",
    } <= set(walked)

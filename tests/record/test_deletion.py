"""Deleting whole conversations (docs/contract.md §1, §3; docs/guide/dashboard.md, Deletion and
retention): the API, the admin and the retention command, all through services.conversation_delete;
nothing else touched, and messages and blocks still never deleted one by one."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from conversations.record import events
from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.models.tokens import ApiToken
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create, conversation_delete
from tests.builders import make_user, png, text, tool_result, tool_use
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

CONVERSATIONS = "/admin/conversations/conversation/"
MESSAGES = "/admin/conversations/message/"


def stored(title: str, messages: int = 3) -> Conversation:
    conversation = conversation_create(title=title)
    for i in range(messages):
        message_append(
            conversation=conversation,
            role="user",
            blocks=[
                BLOCK_ADAPTER.validate_python(b)
                for b in (text(f"{title} {i}"), tool_use(f"c{i}"), tool_result(f"c{i}"), png())
            ],
        )
    return conversation


def snapshot(exclude: Conversation | None = None) -> tuple[Any, ...]:
    """Every stored row but those of `exclude`: what a deletion must leave alone."""
    others = Conversation.objects.exclude(pk=getattr(exclude, "pk", None))
    return (
        list(others.order_by("id").values_list("id", "title", "message_count", "updated_at")),
        list(
            Message.objects.filter(conversation__in=others)
            .order_by("id")
            .values_list("id", "seq", "block_count")
        ),
        list(
            Block.objects.filter(message__conversation__in=others)
            .order_by("id")
            .values_list("id", "seq", "text")
        ),
        list(ApiToken.objects.order_by("id").values_list("id", "revoked_at")),
        list(User.objects.order_by("id").values_list("id", "username")),
    )


def gone(conversation: Conversation) -> bool:
    return not (
        Conversation.objects.filter(pk=conversation.pk).exists()
        or Message.objects.filter(conversation_id=conversation.pk).exists()
        or Block.objects.filter(message__conversation_id=conversation.pk).exists()
    )


# -- the service --------------------------------------------------------------------------------


def test_the_service_deletes_the_whole_conversation_and_announces_it_on_commit(
    django_capture_on_commit_callbacks: Any,
) -> None:
    doomed, kept = stored("doomed"), stored("kept")
    before = snapshot(exclude=doomed)
    layer = get_channel_layer()
    async_to_sync(layer.group_add)(events.conversation_group(str(doomed.id)), "watcher")
    with django_capture_on_commit_callbacks(execute=True):
        assert conversation_delete(conversation=doomed) == (3, 12)
    assert gone(doomed)
    assert snapshot(exclude=doomed) == before
    assert Conversation.objects.filter(pk=kept.pk).exists()
    event = async_to_sync(layer.receive)("watcher")
    assert event == {"type": "conversation.deleted", "conversation_id": str(doomed.id)}


# -- the API ------------------------------------------------------------------------------------


def test_delete_api_answers_204_and_leaves_everything_else(api: ApiClient) -> None:
    doomed, _kept = stored("doomed"), stored("kept")
    before = snapshot(exclude=doomed)
    response = api.client.delete(f"/api/conversations/{doomed.id}", headers=api._headers(None))
    assert response.status_code == 204
    assert response.content == b""
    assert gone(doomed)
    assert snapshot(exclude=doomed) == before
    again = api.client.delete(f"/api/conversations/{doomed.id}", headers=api._headers(None))
    assert again.status_code == 404
    assert api.get(f"/api/conversations/{doomed.id}").status_code == 404


@pytest.mark.parametrize("target", ["00000000-0000-4000-8000-000000000000", "not-a-uuid"])
def test_deleting_an_unknown_conversation_is_a_json_404(api: ApiClient, target: str) -> None:
    stored("kept")
    before = snapshot()
    response = api.client.delete(f"/api/conversations/{target}", headers=api._headers(None))
    assert response.status_code == 404
    assert target in response.json()["error"]
    assert snapshot() == before


def test_delete_without_a_token_is_401_and_deletes_nothing(
    anonymous_api: ApiClient, operator_client: Client
) -> None:
    doomed = stored("doomed")
    before = snapshot()
    response = anonymous_api.client.delete(f"/api/conversations/{doomed.id}")
    assert response.status_code == 401
    assert "Authorization" in response.json()["error"]
    # A dashboard session is no API credential either (docs/contract.md §3: bearer tokens only).
    assert operator_client.delete(f"/api/conversations/{doomed.id}").status_code == 401
    assert snapshot() == before


def test_messages_and_blocks_still_have_no_delete_in_the_api(api: ApiClient) -> None:
    doomed = stored("doomed")
    before = snapshot()
    for path in (
        f"/api/conversations/{doomed.id}/messages",
        f"/api/conversations/{doomed.id}/messages/0/blocks",
    ):
        response = api.client.delete(path, headers=api._headers(None))
        assert response.status_code == 405, path
    assert snapshot() == before


# -- the admin ----------------------------------------------------------------------------------


def staff(*codenames: str) -> Client:
    user = make_user(f"staff-{'-'.join(codenames) or 'none'}", operator=False)
    user.is_staff = True
    user.save()
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="conversations")
        )
    client = Client()
    client.force_login(user)
    return client


def test_a_user_with_delete_conversation_deletes_one_in_the_admin() -> None:
    client = staff("view_conversation", "delete_conversation")
    doomed, _kept = stored("doomed"), stored("kept")
    before = snapshot(exclude=doomed)
    confirm = client.get(f"{CONVERSATIONS}{doomed.pk}/delete/")
    page = confirm.content.decode()
    assert confirm.status_code == 200
    assert "permission to delete" not in page
    assert "3 messages, 12 blocks" in page  # counted, not one line per row
    response = client.post(f"{CONVERSATIONS}{doomed.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert gone(doomed)
    assert snapshot(exclude=doomed) == before


def test_the_superuser_deletes_several_with_the_bulk_action(admin_client: Client) -> None:
    first, second, kept = stored("first"), stored("second"), stored("kept")
    picked = {"action": "delete_selected", "_selected_action": [str(first.pk), str(second.pk)]}
    confirm = admin_client.post(CONVERSATIONS, picked)
    assert confirm.status_code == 200
    assert "permission to delete" not in confirm.content.decode()
    response = admin_client.post(CONVERSATIONS, picked | {"post": "yes"})
    assert response.status_code == 302
    assert gone(first) and gone(second)
    assert Message.objects.filter(conversation=kept).count() == 3


def test_without_delete_conversation_the_admin_refuses() -> None:
    client = staff("view_conversation", "change_conversation")
    doomed = stored("doomed")
    before = snapshot()
    assert client.get(f"{CONVERSATIONS}{doomed.pk}/delete/").status_code == 403
    assert client.post(f"{CONVERSATIONS}{doomed.pk}/delete/", {"post": "yes"}).status_code == 403
    assert 'value="delete_selected"' not in client.get(CONVERSATIONS).content.decode()
    assert snapshot() == before


def test_a_single_message_is_still_not_deletable_even_by_the_superuser(
    admin_client: Client,
) -> None:
    doomed = stored("doomed")
    target = Message.objects.get(conversation=doomed, seq=1)
    response = admin_client.post(f"{MESSAGES}{target.pk}/delete/", {"post": "yes"})
    assert response.status_code == 403
    assert Message.objects.filter(conversation=doomed).count() == 3


# -- retention ----------------------------------------------------------------------------------


def age(conversation: Conversation, days: int) -> None:
    Conversation.objects.filter(pk=conversation.pk).update(
        updated_at=timezone.now() - timedelta(days=days)
    )


def test_prune_dry_run_lists_and_deletes_nothing_then_prune_deletes_only_the_stale() -> None:
    old, older, fresh = stored("old one"), stored("older one"), stored("fresh one")
    age(old, 40)
    age(older, 400)
    age(fresh, 5)
    before = snapshot()

    out = StringIO()
    call_command("prune", "--older-than", "30", "--dry-run", stdout=out)
    lines = out.getvalue().splitlines()
    assert lines == [
        f"{older.pk} older one",
        f"{old.pk} old one",
        "Would delete 2 conversation(s) without activity for 30 day(s).",
    ]
    assert snapshot() == before

    out = StringIO()
    call_command("prune", "--older-than", "30", stdout=out)
    assert out.getvalue().splitlines()[-1] == (
        "Deleted 2 conversation(s) without activity for 30 day(s)."
    )
    assert gone(old) and gone(older)
    assert Message.objects.filter(conversation=fresh).count() == 3


@pytest.mark.parametrize("days", ["0", "-3"])
def test_prune_refuses_a_window_under_a_day(days: str) -> None:
    stored("kept")
    before = snapshot()
    with pytest.raises(CommandError, match="--older-than must be at least 1 day"):
        call_command("prune", "--older-than", days)
    assert snapshot() == before


def test_prune_requires_older_than() -> None:
    with pytest.raises(CommandError, match="--older-than"):
        call_command("prune")

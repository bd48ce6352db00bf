"""Token rotation (docs/contract.md §5): `revoke_api_token` by id or prefix, `--list` to see
which tokens are still in use; a revoked token is refused at once; a token may expire
(`create_api_token --expires-in DAYS`)."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from conversations.record.models.tokens import ApiToken
from conversations.record.services.api_tokens import api_token_create

pytestmark = [pytest.mark.django_db, pytest.mark.sqlite]


def command(name: str, *args: str) -> list[str]:
    out = StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue().splitlines()


def answers(token: str) -> int:
    response = Client().get("/api/conversations", headers={"Authorization": f"Bearer {token}"})
    return response.status_code


def test_rotation_revokes_the_old_token_by_id_and_keeps_the_new_one() -> None:
    old, old_clear = api_token_create(label="agent on build-7")
    new_clear = command("create_api_token", "agent on build-7 (rotated)")[-1]
    assert answers(old_clear) == answers(new_clear) == 200

    lines = command("revoke_api_token", str(old.pk))

    assert lines == [f"Revoked API token {old.pk} (agent on build-7 ({old.prefix}…))."]
    assert answers(old_clear) == 401
    assert answers(new_clear) == 200


def test_a_token_is_revoked_by_its_prefix() -> None:
    token, clear = api_token_create(label="ci")

    command("revoke_api_token", clear[:8])

    token.refresh_from_db()
    assert token.revoked_at is not None
    assert answers(clear) == 401


def test_revoking_twice_says_so_and_keeps_the_first_time() -> None:
    token, _ = api_token_create(label="ci")
    command("revoke_api_token", str(token.pk))
    token.refresh_from_db()
    first = token.revoked_at

    lines = command("revoke_api_token", str(token.pk))

    assert "already revoked" in lines[0]
    token.refresh_from_db()
    assert token.revoked_at == first


def test_list_shows_each_token_with_its_last_use_and_state() -> None:
    used, used_clear = api_token_create(label="in use")
    idle, _ = api_token_create(label="idle")
    assert answers(used_clear) == 200
    command("revoke_api_token", str(idle.pk))

    lines = command("revoke_api_token", "--list")

    assert len(lines) == 2
    first, second = (line.split("\t") for line in lines)
    assert first[:3] == [str(used.pk), used.prefix, "in use"]
    assert first[4] != "last used -" and first[5] == "active"
    assert second[:3] == [str(idle.pk), idle.prefix, "idle"]
    assert second[4] == "last used -" and second[5].startswith("revoked ")
    assert not any(used_clear in line for line in lines)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("999999", "No API token"),
        ("rpl_zzzz", "No API token"),
        ("label", "id or its 8-character prefix"),
    ],
)
def test_an_unknown_or_malformed_token_is_refused_naming_the_problem(
    given: str, message: str
) -> None:
    token, _ = api_token_create(label="kept")

    with pytest.raises(CommandError, match=message):
        call_command("revoke_api_token", given, stdout=StringIO())

    token.refresh_from_db()
    assert token.revoked_at is None


def test_a_whole_token_given_by_mistake_is_not_echoed() -> None:
    _, clear = api_token_create(label="kept")

    with pytest.raises(CommandError) as refused:
        call_command("revoke_api_token", clear, stdout=StringIO())

    assert clear not in str(refused.value)
    assert ApiToken.objects.get().revoked_at is None


def test_a_prefix_shared_by_two_tokens_is_refused_listing_their_ids() -> None:
    first, _ = api_token_create(label="one")
    second, _ = api_token_create(label="two")
    ApiToken.objects.filter(pk=second.pk).update(prefix=first.prefix)

    with pytest.raises(CommandError, match=f"ids {first.pk}, {second.pk}"):
        call_command("revoke_api_token", first.prefix, stdout=StringIO())

    assert not ApiToken.objects.filter(revoked_at__isnull=False).exists()


def test_without_a_token_or_list_it_asks_for_one() -> None:
    with pytest.raises(CommandError, match="--list"):
        call_command("revoke_api_token", stdout=StringIO())


# Optional expiry (create_api_token --expires-in DAYS)


def test_a_token_with_an_expiry_works_until_then_and_is_refused_after() -> None:
    lines = command("create_api_token", "contractor", "--expires-in", "30")
    clear = lines[-1]
    token = ApiToken.objects.get()
    assert token.expires_at is not None
    left = token.expires_at - timezone.now()
    assert timedelta(days=29, hours=23) < left <= timedelta(days=30)
    assert f"until {token.expires_at:%Y-%m-%d}" in lines[0]
    assert answers(clear) == 200

    ApiToken.objects.filter(pk=token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = Client().get("/api/conversations", headers={"Authorization": f"Bearer {clear}"})

    assert response.status_code == 401
    assert "expired" in response.json()["error"]
    listed = command("revoke_api_token", "--list")[0].split("\t")
    assert listed[5].startswith("expired ")


def test_a_token_without_an_expiry_never_expires() -> None:
    clear = command("create_api_token", "forever")[-1]

    assert ApiToken.objects.get().expires_at is None
    assert answers(clear) == 200


@pytest.mark.parametrize("days", ["0", "-1", "3651"])
def test_create_api_token_refuses_an_expiry_out_of_range(days: str) -> None:
    with pytest.raises(CommandError, match="--expires-in"):
        call_command("create_api_token", "x", "--expires-in", days, stdout=StringIO())

    assert not ApiToken.objects.exists()


def test_an_expiry_set_in_the_admin_is_kept_and_then_refuses_the_token(
    admin_client: Client,
) -> None:
    response = admin_client.post(
        "/admin/conversations/apitoken/add/",
        {"label": "temp", "expires_at_0": "2020-01-01", "expires_at_1": "00:00:00"},
        follow=True,
    )
    assert response.status_code == 200
    token = ApiToken.objects.get(label="temp")
    assert token.expires_at is not None and token.expires_at.year == 2020
    clear = next(
        word
        for message in response.context["messages"]
        for word in str(message).split()
        if word.startswith("rpl_")
    )

    assert answers(clear) == 401

    changed = admin_client.post(
        f"/admin/conversations/apitoken/{token.pk}/change/",
        {"label": "temp", "expires_at_0": "", "expires_at_1": ""},
    )
    assert changed.status_code == 302
    token.refresh_from_db()
    assert token.expires_at is None
    assert answers(clear) == 200

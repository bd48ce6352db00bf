"""Management commands (docs/contract.md §3, §5): create_api_token, load_demo, ensure_operator, and
the Makefile's `run` target that strings them together."""

from __future__ import annotations

import hashlib
import shlex
import stat
import subprocess
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client

from conversations.record.models.conversation import Block, Conversation, Message
from conversations.record.models.tokens import ApiToken
from conversations.record.services.api_tokens import api_token_revoke
from conversations.record.services.conversations import conversation_create
from tests.conftest import ROOT

pytestmark = pytest.mark.django_db


def command(name: str, *args: str) -> list[str]:
    """Run a command in process; its output lines."""
    out = StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue().splitlines()


def every_stored_value() -> list[str]:
    """Every value in every table of the database, as text."""
    values: list[str] = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            for row in cursor.fetchall():
                for value in row:
                    if isinstance(value, memoryview | bytes):
                        values.append(bytes(value).decode("utf-8", "replace"))
                    else:
                        values.append(str(value))
    return values


# create_api_token


def test_create_api_token_prints_the_bare_token_last() -> None:
    lines = command("create_api_token", "agent on build-7")

    token = lines[-1]
    assert token == token.strip()
    assert " " not in token
    assert len(token) >= 32
    assert any("agent on build-7" in line for line in lines[:-1])


def test_printed_token_authenticates_against_the_api() -> None:
    token = command("create_api_token", "ci")[-1]

    response = Client().get("/api/conversations", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 200


def test_token_is_stored_only_as_its_sha256_digest() -> None:
    token = command("create_api_token", "ci")[-1]

    stored = ApiToken.objects.get()
    assert stored.label == "ci"
    assert stored.digest == hashlib.sha256(token.encode()).hexdigest()
    assert not any(token in value for value in every_stored_value())


def test_each_token_is_different() -> None:
    first = command("create_api_token", "one")[-1]
    second = command("create_api_token", "two")[-1]

    assert first != second
    assert ApiToken.objects.count() == 2


@pytest.mark.parametrize("label", ["", "   ", "x" * 201])
def test_create_api_token_refuses_a_bad_label(label: str) -> None:
    with pytest.raises(CommandError, match="LABEL"):
        call_command("create_api_token", label, stdout=StringIO())

    assert not ApiToken.objects.exists()


def test_create_api_token_needs_a_label() -> None:
    with pytest.raises(CommandError):
        call_command("create_api_token", stdout=StringIO())


def test_a_revoked_token_no_longer_authenticates() -> None:
    token = command("create_api_token", "ci")[-1]
    api_token_revoke(token=ApiToken.objects.get())

    response = Client().get("/api/conversations", headers={"Authorization": f"Bearer {token}"})

    assert response.status_code == 401


# load_demo


def demo_blocks() -> list[Block]:
    (conversation,) = Conversation.objects.all()
    return list(Block.objects.filter(message__conversation=conversation).select_related("message"))


def test_load_demo_loads_one_conversation_into_an_empty_database() -> None:
    lines = command("load_demo")

    (conversation,) = Conversation.objects.all()
    assert str(conversation.id) in lines[-1]
    seqs = list(conversation.messages.order_by("seq").values_list("seq", flat=True))
    assert seqs == list(range(len(seqs)))
    assert conversation.message_count == len(seqs)


def test_demo_holds_every_block_type() -> None:
    command("load_demo")

    assert {block.type for block in demo_blocks()} == {
        "text",
        "tool_use",
        "tool_result",
        "reasoning",
        "image",
    }


def test_demo_has_an_image_in_a_user_message() -> None:
    command("load_demo")

    images = [block for block in demo_blocks() if block.type == "image"]
    assert images
    assert all(block.message.role == "user" for block in images)
    assert all(block.media_type == "image/png" and block.data for block in images)


def test_demo_has_an_error_result_and_a_tool_call_never_answered() -> None:
    command("load_demo")

    blocks = demo_blocks()
    assert any(b.type == "tool_result" and b.is_error for b in blocks)
    answered = {b.call_id for b in blocks if b.type == "tool_result"}
    unanswered = [b for b in blocks if b.type == "tool_use" and b.call_id not in answered]
    assert unanswered


def test_demo_has_an_empty_message() -> None:
    command("load_demo")

    empty = Message.objects.filter(blocks__isnull=True)
    assert empty.count() >= 1
    assert all(message.block_count == 0 for message in empty)


def test_demo_replays_through_the_api(api: Any) -> None:
    command("load_demo")
    conversation = Conversation.objects.get()

    response = api.get(f"/api/conversations/{conversation.id}/replay", vision="0")

    assert response.status_code == 200
    contents = [m["content"] for m in response.json()["messages"]]
    assert len(contents) == conversation.message_count
    assert "[Empty message]" in contents


def test_load_demo_leaves_a_database_with_conversations_alone() -> None:
    conversation_create(title="Real work")

    lines = command("load_demo")

    assert list(Conversation.objects.values_list("title", flat=True)) == ["Real work"]
    assert "not loaded" in lines[-1]


def test_load_demo_runs_once() -> None:
    command("load_demo")
    command("load_demo")

    assert Conversation.objects.count() == 1


def test_load_demo_force_loads_it_again() -> None:
    command("load_demo")

    command("load_demo", "--force")

    assert Conversation.objects.count() == 2
    first, second = Conversation.objects.all()
    assert first.message_count == second.message_count > 0


# ensure_operator


@pytest.fixture
def data_dir(settings: Any, tmp_path: Path) -> Path:
    settings.DATA_DIR = tmp_path / "data"
    return settings.DATA_DIR  # type: ignore[no-any-return]


def test_ensure_operator_creates_a_superuser_when_there_is_no_user(data_dir: Path) -> None:
    lines = command("ensure_operator")

    (user,) = get_user_model().objects.all()
    assert user.username == "operator"
    assert user.is_superuser and user.is_staff and user.is_active
    password = (data_dir / "operator_password").read_text().strip()
    assert authenticate(username="operator", password=password) == user
    assert stat.S_IMODE((data_dir / "operator_password").stat().st_mode) == 0o600
    assert "http://127.0.0.1:8000/accounts/login/" in lines[-1]
    assert "operator" in lines[-1]
    assert password in lines[-1]


def test_ensure_operator_prints_the_given_url(data_dir: Path) -> None:
    lines = command("ensure_operator", "--url", "http://127.0.0.1:9123/")

    assert "http://127.0.0.1:9123/accounts/login/" in lines[-1]


def test_ensure_operator_twice_keeps_one_operator_and_the_password(data_dir: Path) -> None:
    first = command("ensure_operator")
    password = (data_dir / "operator_password").read_text()

    second = command("ensure_operator")

    assert get_user_model().objects.count() == 1
    assert (data_dir / "operator_password").read_text() == password
    assert second == first


def test_ensure_operator_creates_nobody_when_a_user_exists(
    data_dir: Path, django_user_model: Any
) -> None:
    django_user_model.objects.create_superuser("alice", "a@x.test", "a long passphrase 9")

    lines = command("ensure_operator")

    assert list(django_user_model.objects.values_list("username", flat=True)) == ["alice"]
    assert not (data_dir / "operator_password").exists()
    assert "/accounts/login/" in lines[-1]
    assert "createsuperuser" in lines[-1]


# The Makefile


def test_make_run_migrates_loads_the_demo_ensures_the_operator_and_serves_locally() -> None:
    done = subprocess.run(
        ["make", "--no-print-directory", "-n", "run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    commands = [shlex.split(line) for line in done.stdout.splitlines() if line.strip()]

    def position(word: str) -> int:
        (found,) = [i for i, words in enumerate(commands) if word in words]
        return found

    def after(words: list[str], option: str) -> str:
        return words[words.index(option) + 1]

    migrate, demo, operator = (
        position("migrate"),
        position("load_demo"),
        position("ensure_operator"),
    )
    serve = position("replaysite.asgi:application")
    assert migrate < demo < operator < serve == len(commands) - 1
    assert "manage.py" in commands[migrate]
    assert after(commands[operator], "--url") == "http://127.0.0.1:8000/"
    daphne = commands[serve]
    assert any(word.endswith("daphne") for word in daphne)
    assert (after(daphne, "-b"), after(daphne, "-p")) == ("127.0.0.1", "8000")


# simulate_agent


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_simulate_agent_plays_a_turn_and_leaves_no_token_behind(daphne: Any) -> None:
    ApiToken.objects.create(label="kept", digest="0" * 64, prefix="rpl_kept")

    lines = command("simulate_agent", "--url", daphne.url, "--speed", "1000")

    assert lines[-1] == "Done."
    (conversation,) = Conversation.objects.all()
    assert conversation.message_count == 4
    assert conversation.error_count == 1 and conversation.unanswered_calls == 0
    assert list(ApiToken.objects.values_list("label", flat=True)) == ["kept"]


@pytest.mark.django_db(transaction=True)
def test_simulate_agent_deletes_its_token_when_the_server_is_not_there() -> None:
    with pytest.raises(CommandError, match="Is Replay running at http://127.0.0.1:9"):
        command("simulate_agent", "--url", "http://127.0.0.1:9", "--speed", "1000")

    assert not ApiToken.objects.exists()

"""The dashboard's side of imports (docs/contract.md §6): the list page's file drop endpoint
(session, CSRF, add_conversation) and what an imported conversation's page shows (gaps, provenance,
the compaction divider, the incomplete-payload note)."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from conversations.ingest.imports import transcript_import
from conversations.record.models.conversation import Conversation
from tests import importdata
from tests.builders import make_user
from tests.conftest import PASSWORD
from tests.realdata import REAL

DROP = "/imports"
COMPACT = (REAL / "claude_code_compact_boundary.jsonl").read_bytes()


def importer(username: str = "importer") -> Any:
    user = make_user(username, password=PASSWORD)
    user.user_permissions.add(
        Permission.objects.get(codename="add_conversation", content_type__app_label="conversations")
    )
    return user


def drop(client: Client, raw: bytes, **headers: str) -> Any:
    return client.post(DROP, raw, content_type="application/octet-stream", headers=headers)


@pytest.mark.django_db
def test_an_importer_drops_a_file_and_gets_its_conversation() -> None:
    client = Client()
    client.force_login(importer())
    response = drop(client, COMPACT, **{"X-File-Name": "my%20session.jsonl"})
    assert response.status_code == 201
    answer = response.json()
    conversation = Conversation.objects.get(pk=answer["id"])
    assert answer["url"] == f"/c/{conversation.id}/"
    assert conversation.metadata["import"]["file_name"] == "my session.jsonl"
    assert drop(client, COMPACT).status_code == 200
    assert Conversation.objects.count() == 1


@pytest.mark.django_db
def test_a_bad_file_dropped_is_a_400_naming_the_line_and_stores_nothing() -> None:
    client = Client()
    client.force_login(importer())
    lines = COMPACT.splitlines()
    lines[3] = b"{<script>alert(1)</script>"
    response = drop(client, b"\n".join(lines))
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "line 4" in response.json()["error"]
    assert Conversation.objects.count() == 0


@pytest.mark.django_db
def test_the_drop_needs_the_add_permission_csrf_and_a_session(operator_client: Client) -> None:
    assert drop(operator_client, COMPACT).status_code == 403  # can view, cannot add
    anonymous = drop(Client(), COMPACT)
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(importer("strict"))
    assert drop(strict, COMPACT).status_code == 403
    assert Conversation.objects.count() == 0


@pytest.mark.django_db
def test_the_list_offers_the_drop_only_to_importers(operator_client: Client) -> None:
    assert b'id="dropzone"' not in operator_client.get("/").content
    client = Client()
    client.force_login(importer())
    assert b'id="dropzone"' in client.get("/").content


@pytest.mark.django_db
def test_an_imported_claude_code_page_shows_gaps_provenance_and_the_divider(
    operator_client: Client,
) -> None:
    outcome = transcript_import(raw=COMPACT, format=None, title=None, file_name="c.jsonl")
    page = operator_client.get(f"/c/{outcome.conversation.id}/").content.decode()
    assert 'id="import-gaps"' in page
    assert "system prompt: Claude Code session files do not record it" in page
    assert 'id="partial-payload"' in page  # the payload shown is not the whole request
    assert "Compacted here (manual) from 15,808 tokens" in page
    assert '<span class="meta meta-model" title="model: claude-sonnet-4-5-20250929">' in page
    assert "measured 15,660 in · 148 out" in page  # the margin count holds the usage
    assert '<time class="local source-time" datetime="2025-10-10T21:56:10.872000+00:00"' in page


@pytest.mark.django_db
def test_a_gap_marker_links_to_its_message_and_hostile_text_stays_text(
    operator_client: Client,
) -> None:
    raw = importdata.request_bodies("openai_chat_tool_calls_tool_role_image_url.json")[-1]
    outcome = transcript_import(raw=raw, format=None, title=None, file_name=None)
    page = operator_client.get(f"/c/{outcome.conversation.id}/").content.decode()
    assert '<a href="#m-3">image: https://t3.ftcdn.net/' in page
    assert 'id="partial-payload"' not in page
    hostile = (
        b'{"messages": [{"role": "user", "content": [{"type": "<img src=x onerror=alert(1)>"}]}]}'
    )
    outcome = transcript_import(raw=hostile, format="openai-chat", title=None, file_name=None)
    page = operator_client.get(f"/c/{outcome.conversation.id}/").content.decode()
    assert "<img src=x" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.django_db
def test_a_multipart_file_field_is_imported_as_curl_sends_it() -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    # CSRF enforced, as a browser's or curl's request meets it: the middleware reads the
    # form before the view does.
    client = Client(enforce_csrf_checks=True)
    client.force_login(importer())
    client.get("/")
    csrf = {"csrfmiddlewaretoken": client.cookies["csrftoken"].value}
    response = client.post(DROP, {"file": SimpleUploadedFile("run.jsonl", COMPACT)} | csrf)
    assert response.status_code == 201, response.content
    conversation = Conversation.objects.get(pk=response.json()["id"])
    assert conversation.metadata["import"]["file_name"] == "run.jsonl"
    missing = client.post(DROP, {"other": SimpleUploadedFile("run.jsonl", COMPACT)} | csrf)
    assert missing.status_code == 400
    assert "file" in missing.json()["error"]
    assert Conversation.objects.count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("raw", [b"", b"  \n\n \t"], ids=["empty", "blank"])
def test_an_empty_file_is_worded_the_same_by_the_drop_the_api_and_the_cli(
    raw: bytes, api: Any, tmp_path: Any, settings: Any
) -> None:
    """One wording for an empty file (docs/contract.md §6) wherever it is imported; the drop
    says the upload limit's size."""
    client = Client()
    client.force_login(importer())
    dropped = drop(client, raw)
    assert dropped.status_code == 400
    said = dropped.json()["error"]
    posted = api.client.post(
        "/api/imports",
        raw,
        content_type="application/octet-stream",
        headers=api._headers(None),
    )
    assert posted.status_code == 400
    assert posted.json()["error"] == said
    empty = tmp_path / "empty.json"
    empty.write_bytes(raw)
    err = StringIO()
    with pytest.raises(CommandError):
        call_command("import", str(empty), stderr=err)
    assert err.getvalue().strip() == f"{empty}: not imported: {said}"
    assert Conversation.objects.count() == 0


@pytest.mark.django_db
def test_a_file_over_the_limit_dropped_names_the_limit(settings: Any) -> None:
    settings.REPLAY_MAX_BODY_MB = 1
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024
    client = Client()
    client.force_login(importer())
    response = drop(client, b"x" * (1024 * 1024 + 1))
    assert response.status_code == 413
    assert response.json()["error"] == "The file is over the upload limit of 1 MB."

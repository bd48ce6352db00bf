"""Notes (docs/contract.md §10): the API, the page's forms, who may change a note, search and
`?label=`, the Markdown export, share links, the admin, and that the replay never sees
them (the projection, the payload, the copies and the context counts are byte-identical
before and after notes exist)."""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection, transaction
from django.test import Client

from conversations.record.models.conversation import Conversation
from conversations.record.models.notes import Note, NoteLabel
from conversations.record.notes.services import note_add, note_delete, note_edit
from conversations.record.search import reads as search_reads
from conversations.record.services.api_tokens import api_token_create
from conversations.record.services.conversations import conversation_delete
from tests.builders import make_user, stored, text, tool_result, tool_use
from tests.conftest import ApiClient, Server, start_daphne

pytestmark = pytest.mark.django_db

HOSTILE = (
    '<script>alert(1)</script><img src=x onerror=alert(2)> <b hx-get="/x" hx-trigger="load">b</b>'
)


def run() -> Conversation:
    return stored(
        "Notes run",
        ("system", [text("You are terse.")], {}),
        ("user", [text("find the config")], {}),
        ("assistant", [text("looking"), tool_use("call_1", "read", path="a.toml")], {}),
        ("user", [tool_result("call_1", "missing", is_error=True)], {}),
    )


def grant(user: User, *codenames: str) -> User:
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="conversations")
        )
    return User.objects.get(pk=user.pk)  # a fresh object: permissions are cached


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_as(label: str) -> ApiClient:
    _, clear = api_token_create(label=label)
    return ApiClient(clear)


def patch(api: ApiClient, path: str, body: Any) -> Any:
    return api.client.patch(
        path, orjson.dumps(body), content_type="application/json", headers=api._headers(None)
    )


def delete(api: ApiClient, path: str) -> Any:
    return api.client.delete(path, headers=api._headers(None))


def note_by(user: User, conversation: Conversation, seq: int = 1, **extra: Any) -> Note:
    return note_add(
        conversation=conversation,
        message_seq=seq,
        text=extra.pop("text", "a note"),
        user=user,
        **extra,
    )


# -- the API -----------------------------------------------------------------------------------


def test_api_adds_lists_edits_and_deletes_a_note(api: ApiClient) -> None:
    conversation = run()
    base = f"/api/conversations/{conversation.id}"
    created = api.post(
        f"{base}/messages/2/notes", {"text": "wrong path", "labels": ["bug"], "block": 1}
    )
    assert created.status_code == 201, created.content
    note = created.json()
    assert note["seq"] == 2 and note["block"] == 1 and note["labels"] == ["bug"]
    assert note["author"] == "tests" and note["text"] == "wrong path"
    assert set(note) == {
        "id",
        "seq",
        "block",
        "text",
        "labels",
        "author",
        "created_at",
        "updated_at",
    }

    listed = api.get(f"{base}/notes").json()
    assert [n["id"] for n in listed["notes"]] == [note["id"]] and listed["next"] is None

    edited = patch(api, f"/api/notes/{note['id']}", {"labels": ["bug", "config"]})
    assert edited.status_code == 200, edited.content
    assert edited.json()["labels"] == ["bug", "config"] and edited.json()["text"] == "wrong path"
    assert edited.json()["updated_at"] > edited.json()["created_at"]
    assert sorted(NoteLabel.objects.values_list("name", flat=True)) == ["bug", "config"]

    assert delete(api, f"/api/notes/{note['id']}").status_code == 204
    assert api.get(f"{base}/notes").json()["notes"] == []
    assert not NoteLabel.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "text"),
        ({"text": ""}, "text"),
        ({"text": "   \n"}, "text"),
        ({"text": "x" * 10_001}, "text"),
        ({"text": "a\x00b"}, "text"),
        ({"text": "ok", "labels": ["Bug"]}, "labels[0]"),
        ({"text": "ok", "labels": ["ok", "with space"]}, "labels[1]"),
        ({"text": "ok", "labels": ["x" * 41]}, "labels[0]"),
        ({"text": "ok", "labels": [""]}, "labels[0]"),
        ({"text": "ok", "labels": ["a", "b", "c", "d", "e", "f"]}, "labels"),
        ({"text": "ok", "block": 9}, "block"),
        ({"text": "ok", "block": -1}, "block"),
        ({"text": "ok", "colour": "red"}, "colour"),
    ],
)
def test_api_refuses_a_bad_note_naming_the_field(api: ApiClient, body: Any, field: str) -> None:
    conversation = run()
    response = api.post(f"/api/conversations/{conversation.id}/messages/1/notes", body)
    assert response.status_code == 400, response.content
    answer = response.json()
    assert field in answer["error"] or answer.get("field") == field, answer
    assert not Note.objects.exists()


def test_api_limits_hold_at_the_edges(api: ApiClient) -> None:
    conversation = run()
    path = f"/api/conversations/{conversation.id}/messages/1/notes"
    labels = ["a", "b-2", "c" * 40, "0", "e"]
    response = api.post(path, {"text": "x" * 10_000, "labels": labels})
    assert response.status_code == 201, response.content
    assert response.json()["labels"] == labels


def test_api_unknown_places_are_404(api: ApiClient) -> None:
    conversation = run()
    assert (
        api.post(
            f"/api/conversations/{conversation.id}/messages/9/notes", {"text": "x"}
        ).status_code
        == 404
    )
    assert api.post("/api/conversations/nope/messages/0/notes", {"text": "x"}).status_code == 404
    assert api.get("/api/conversations/nope/notes").status_code == 404
    assert patch(api, "/api/notes/999999", {"text": "x"}).status_code == 404
    assert delete(api, "/api/notes/abc").status_code == 404
    assert delete(api, "/api/notes/" + "9" * 40).status_code == 404
    huge = "9" * 30
    assert (
        api.post(
            f"/api/conversations/{conversation.id}/messages/{huge}/notes", {"text": "x"}
        ).status_code
        == 404
    )


def test_api_needs_a_token(anonymous_api: ApiClient) -> None:
    conversation = run()
    response = anonymous_api.post(
        f"/api/conversations/{conversation.id}/messages/1/notes", {"text": "x"}
    )
    assert response.status_code == 401
    assert anonymous_api.get(f"/api/conversations/{conversation.id}/notes").status_code == 401
    assert not Note.objects.exists()


def test_another_token_may_not_change_a_note(api: ApiClient) -> None:
    conversation = run()
    created = api.post(
        f"/api/conversations/{conversation.id}/messages/1/notes", {"text": "mine"}
    ).json()
    other = api_as("another agent")
    assert patch(other, f"/api/notes/{created['id']}", {"text": "theirs"}).status_code == 403
    assert delete(other, f"/api/notes/{created['id']}").status_code == 403
    # A token with the same label is the same author (the author is the label).
    same = api_as("tests")
    assert patch(same, f"/api/notes/{created['id']}", {"text": "still mine"}).status_code == 200
    assert Note.objects.get().text == "still mine"


def test_a_token_may_not_change_a_users_note(api: ApiClient) -> None:
    conversation = run()
    user = make_user("tests")  # the token's label is also a user's name: still not the author
    note = note_by(user, conversation)
    assert patch(api, f"/api/notes/{note.pk}", {"text": "x"}).status_code == 403
    assert delete(api, f"/api/notes/{note.pk}").status_code == 403


def test_api_patch_needs_something_to_change(api: ApiClient) -> None:
    conversation = run()
    created = api.post(
        f"/api/conversations/{conversation.id}/messages/1/notes", {"text": "x"}
    ).json()
    response = patch(api, f"/api/notes/{created['id']}", {})
    assert response.status_code == 400
    bad = patch(api, f"/api/notes/{created['id']}", {"labels": ["NO"]})
    assert bad.status_code == 400 and "labels[0]" in bad.content.decode()
    assert Note.objects.get().labels == []


def test_api_post_is_idempotent_with_a_key(api: ApiClient) -> None:
    conversation = run()
    path = f"/api/conversations/{conversation.id}/messages/1/notes"
    first = api.post(path, {"text": "once"}, headers={"Idempotency-Key": "k1"})
    again = api.post(path, {"text": "once"}, headers={"Idempotency-Key": "k1"})
    assert first.status_code == again.status_code == 201
    assert first.content == again.content
    assert Note.objects.count() == 1


def test_a_message_holds_at_most_twenty_notes(api: ApiClient) -> None:
    conversation = run()
    path = f"/api/conversations/{conversation.id}/messages/1/notes"
    for i in range(20):
        assert api.post(path, {"text": f"n{i}"}).status_code == 201
    refused = api.post(path, {"text": "one more"})
    assert refused.status_code == 400 and "20 notes" in refused.json()["error"]
    assert Note.objects.count() == 20


def test_api_list_pages_its_notes(api: ApiClient, monkeypatch: Any) -> None:
    from conversations.record.notes import reads as note_reads

    monkeypatch.setattr(note_reads, "LIST_PAGE", 2)
    conversation = run()
    for i in range(3):
        api.post(f"/api/conversations/{conversation.id}/messages/{i}/notes", {"text": f"n{i}"})
    first = api.get(f"/api/conversations/{conversation.id}/notes").json()
    assert [n["text"] for n in first["notes"]] == ["n0", "n1"] and first["next"]
    rest = api.client.get(first["next"], headers=api._headers(None)).json()
    assert [n["text"] for n in rest["notes"]] == ["n2"] and rest["next"] is None
    assert api.get(f"/api/conversations/{conversation.id}/notes", after="x").status_code == 400


# -- the page ----------------------------------------------------------------------------------


def test_page_shows_notes_beside_the_record_not_in_the_projection(
    operator_client: Client, operator: User
) -> None:
    conversation = run()
    note_by(operator, conversation, 2, text="check the path", labels=["bug"], block_seq=1)
    html = operator_client.get(f"/c/{conversation.id}/").content.decode()
    article = re.search(r'<article id="m-2".*?</article>', html, re.S)
    assert article is not None
    notes = article.group(0).split('<div class="notes"', 1)[1]
    assert "check the path" in notes and "block 1" in notes and "bug" in notes
    projection = (
        article.group(0).split('<div class="projection"', 1)[1].split('<div class="notes"')[0]
    )
    assert "check the path" not in projection


def add_form(client: Client, conversation: Conversation, seq: int, **fields: str) -> Any:
    return client.post(
        f"/c/{conversation.id}/m/{seq}/notes", fields, headers={"HX-Request": "true"}
    )


def test_page_form_adds_a_note_with_add_note(operator: User) -> None:
    conversation = run()
    writer = client_of(grant(operator, "add_note"))
    response = add_form(
        writer, conversation, 1, text="look here", labels="bug, slow-tool", block="0"
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert body.lstrip().startswith('<div class="notes" id="notes-1"')
    assert "look here" in body and "slow-tool" in body
    note = Note.objects.get()
    assert (note.author, note.user_id, note.block_seq, note.labels) == (
        "operator",
        operator.pk,
        0,
        ["bug", "slow-tool"],
    )


def test_page_form_without_add_note_is_403(operator_client: Client) -> None:
    conversation = run()
    assert add_form(operator_client, conversation, 1, text="x").status_code == 403
    assert not Note.objects.exists()


def test_page_form_anonymous_and_outsider_are_refused(outsider_client: Client) -> None:
    conversation = run()
    anonymous = Client().post(f"/c/{conversation.id}/m/1/notes", {"text": "x"})
    assert anonymous.status_code == 302 and "/accounts/login/" in anonymous["Location"]
    assert outsider_client.post(f"/c/{conversation.id}/m/1/notes", {"text": "x"}).status_code == 403
    assert not Note.objects.exists()


def test_page_form_refuses_bad_labels_saying_why_without_echoing(operator: User) -> None:
    conversation = run()
    writer = client_of(grant(operator, "add_note"))
    response = add_form(writer, conversation, 1, text="ok", labels="<script>x</script>")
    assert response.status_code == 400
    body = response.content.decode()
    assert "Labels:" in body and "lowercase a-z" in body
    assert "<script>x" not in body and "&lt;script&gt;x" not in body
    assert not Note.objects.exists()


def test_only_the_author_edits_and_the_author_or_delete_note_deletes(operator: User) -> None:
    conversation = run()
    author = client_of(grant(operator, "add_note"))
    other_user = grant(make_user("other"), "add_note")
    other = client_of(other_user)
    moderator = client_of(grant(make_user("moderator"), "delete_note"))
    note = note_by(operator, conversation, text="first")
    hx = {"HX-Request": "true"}

    assert (
        other.post(
            f"/c/{conversation.id}/notes/{note.pk}/edit", {"text": "x"}, headers=hx
        ).status_code
        == 403
    )
    assert other.get(f"/c/{conversation.id}/notes/{note.pk}?edit=1").status_code == 403
    assert other.post(f"/c/{conversation.id}/notes/{note.pk}/delete", headers=hx).status_code == 403
    assert Note.objects.get().text == "first"

    form = author.get(f"/c/{conversation.id}/notes/{note.pk}?edit=1")
    assert form.status_code == 200 and 'name="text"' in form.content.decode()
    edited = author.post(
        f"/c/{conversation.id}/notes/{note.pk}/edit", {"text": "second", "labels": "x"}, headers=hx
    )
    assert edited.status_code == 200 and "second" in edited.content.decode()
    assert Note.objects.get().labels == ["x"]

    assert (
        moderator.post(f"/c/{conversation.id}/notes/{note.pk}/delete", headers=hx).status_code
        == 200
    )
    assert not Note.objects.exists()
    mine = note_by(operator, conversation, text="again")
    assert (
        author.post(f"/c/{conversation.id}/notes/{mine.pk}/delete", headers=hx).status_code == 200
    )
    assert not Note.objects.exists()


def test_a_note_of_another_conversation_is_404(operator_client: Client, operator: User) -> None:
    conversation, other = run(), run()
    note = note_by(operator, conversation)
    assert operator_client.get(f"/c/{other.id}/notes/{note.pk}").status_code == 404
    assert operator_client.get(f"/c/{other.id}/notes/{'9' * 30}").status_code == 404
    assert operator_client.get(f"/c/{other.id}/m/{'9' * 30}/notes").status_code == 404


def test_a_long_note_shows_its_start_and_loads_the_rest(
    operator_client: Client, operator: User
) -> None:
    conversation = run()
    note = note_by(operator, conversation, text="a" * 500 + "TAIL" + "b" * 4_000)
    html = operator_client.get(f"/c/{conversation.id}/").content.decode()
    assert "TAIL" not in html and "4004 more characters" in html
    whole = operator_client.get(f"/c/{conversation.id}/notes/{note.pk}").content.decode()
    assert "TAIL" in whole


def test_hostile_note_text_is_shown_as_text(operator_client: Client, operator: User) -> None:
    conversation = run()
    note = note_by(operator, conversation, text=HOSTILE)
    for url in (f"/c/{conversation.id}/", f"/c/{conversation.id}/notes/{note.pk}"):
        html = operator_client.get(url).content.decode()
        assert "<script>alert" not in html and "<img src=x" not in html and "<b hx-get" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# -- never in the replay -------------------------------------------------------------------------


def replay_surfaces(client: Client, api: ApiClient, conversation: Conversation) -> dict[str, bytes]:
    cid = conversation.id
    found: dict[str, bytes] = {}
    for vision in (0, 1):
        for shape in ("openai", "anthropic"):
            q = f"vision={vision}&shape={shape}"
            found[f"api replay {q}"] = api.get(f"/api/conversations/{cid}/replay?{q}").content
            found[f"download {q}"] = client.get(f"/c/{cid}/replay.json?{q}").content
            found[f"context {q}"] = api.get(f"/api/conversations/{cid}/context?{q}").content
            for seq in range(conversation.message_count):
                found[f"copy {seq} {q}"] = client.get(
                    f"/c/{cid}/m/{seq}/projection.json?{q}"
                ).content
                found[f"wire {seq} {q}"] = client.get(f"/c/{cid}/m/{seq}/wire?{q}").content
    found["compacted"] = api.get(
        f"/api/conversations/{cid}/replay?compact=drop_tool_results"
    ).content
    found["record"] = api.get(f"/api/conversations/{cid}").content
    for seq in range(conversation.message_count):
        found[f"record {seq}"] = client.get(f"/c/{cid}/m/{seq}/record.json").content
    return found


def projections(html: str) -> list[str]:
    return re.findall(
        r'<div class="projection".*?</div>\s*(?=<div class="notes"|</article>)', html, re.S
    )


def test_projection_payload_copies_and_counts_are_byte_identical_with_notes(
    operator_client: Client, operator: User, api: ApiClient
) -> None:
    conversation = run()
    before = replay_surfaces(operator_client, api, conversation)
    page_before = operator_client.get(f"/c/{conversation.id}/").content.decode()
    for seq in range(conversation.message_count):
        note_by(
            operator,
            conversation,
            seq,
            text=f"Note on {seq}: Tool use: read and [Reasoning]",
            labels=["x"],
        )
    note_by(operator, conversation, 2, text="on the tool call", block_seq=1)
    conversation.refresh_from_db()
    after = replay_surfaces(operator_client, api, conversation)
    assert before.keys() == after.keys()
    for name, body in before.items():
        assert after[name] == body, name
    page_after = operator_client.get(f"/c/{conversation.id}/").content.decode()
    assert projections(page_after) == projections(page_before)
    assert len(projections(page_after)) == conversation.message_count
    pressure = re.compile(r'<section id="pressure".*?</section>', re.S)
    assert pressure.findall(page_after) == pressure.findall(page_before)
    totals = re.compile(r'<p class="totals".*?</p>', re.S)
    assert totals.findall(page_after) == totals.findall(page_before)


# -- found ---------------------------------------------------------------------------------------


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's plan")
def test_note_search_can_use_the_notes_own_index(db: None) -> None:
    """`q` asks the notes' words as `Matches` asks them; the notes' GIN index is over that
    very expression (0016), so the planner may answer from it, not read every note."""
    from conversations.record.notes import reads as note_reads

    sql, params = note_reads.conversations_with_note_words("needle").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "conversations_note_words_gin" in plan, plan


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's planner settings")
def test_the_list_never_asks_the_notes_while_bitmap_scans_are_off(
    operator: User, operator_client: Client
) -> None:
    """The list's count and page run with bitmap scans off (`along_entries`, a walk along
    the entries' btree), and a GIN index is read only through a bitmap: a note subquery
    there read every note (1 s over 26,000 notes). The notes' matches are read first."""
    from django.test.utils import CaptureQueriesContext

    conversation = run()
    note_by(operator, conversation, 2, text="Zanzibar is where it broke", block_seq=1)
    with CaptureQueriesContext(connection) as captured:
        page = operator_client.get("/", {"q": "zanzibar"}).content.decode()
    assert f'id="c-{conversation.id}"' in page
    off = False
    for query in captured.captured_queries:
        sql = query["sql"]
        if "set_config('enable_bitmapscan', 'off'" in sql:
            off = True
        elif "set_config('enable_bitmapscan', 'on'" in sql:
            off = False
        elif off:
            assert "conversations_note" not in sql, sql


def test_q_finds_note_text_in_the_list_the_api_and_the_finder(
    operator_client: Client, operator: User, api: ApiClient
) -> None:
    conversation = run()
    run()  # another, without the word
    note_by(operator, conversation, 2, text="Zanzibar is where it broke", block_seq=1)
    page = operator_client.get("/", {"q": "zanzibar"}).content.decode()
    assert f'id="c-{conversation.id}"' in page and page.count('class="row"') == 1
    listed = api.get("/api/conversations", q="zanzi").json()
    assert [r["id"] for r in listed["results"]] == [str(conversation.id)]
    found = operator_client.get(
        f"/c/{conversation.id}/find", {"kind": "text", "q": "zanzibar"}
    ).json()
    assert found["total"] == 1
    assert found["hits"] == [
        {
            "seq": 2,
            "block": 1,
            "type": "note",
            "is_error": False,
            "snippet": "Zanzibar is where it broke",
        }
    ]
    # Edited away: no longer found.
    note_edit(note=Note.objects.get(), text="somewhere else")
    assert api.get("/api/conversations", q="zanzibar").json()["results"] == []


def test_a_hit_on_a_notes_text_carries_its_snippet_and_the_noted_message(
    operator_client: Client, operator: User, api: ApiClient
) -> None:
    """A conversation found by a note's words alone: its list row and the API's `match`
    carry a snippet of the note's text and the noted message's seq and link
    (docs/contract.md §10), as a block's hit does."""
    conversation = run()
    note_by(operator, conversation, 2, text="Zanzibar is where it broke", block_seq=1)
    listed = api.get("/api/conversations", q="zanzibar").json()
    (result,) = listed["results"]
    assert result["match"] == {
        "message_seq": 2,
        "block_seq": 1,
        "snippet": "Zanzibar is where it broke",
        "url": f"http://testserver/c/{conversation.id}/#m-2",
        "note": True,
    }
    page = operator_client.get("/", {"q": "zanzibar"}).content.decode()
    row = re.search(rf'<tr id="c-{conversation.id}".*?</tr>', page, re.S)
    assert row is not None
    assert f'href="/c/{conversation.id}/#m-2"' in row.group(0)
    assert "note on message 2" in row.group(0)
    assert "Zanzibar is where it broke" in row.group(0)
    # A block's hit says so too.
    block_hit = api.get("/api/conversations", q="looking").json()["results"][0]["match"]
    assert block_hit is not None and block_hit["note"] is False


def test_finder_merges_note_hits_with_block_hits_in_order(
    operator_client: Client, operator: User
) -> None:
    conversation = run()  # "looking" is block 0 of message 2
    note_by(operator, conversation, 1, text="looking for it")
    note_by(operator, conversation, 3, text="still looking", block_seq=0)
    found = operator_client.get(
        f"/c/{conversation.id}/find", {"kind": "text", "q": "looking"}
    ).json()
    assert [(h["seq"], h["block"], h["type"]) for h in found["hits"]] == [
        (1, 0, "note"),
        (2, 0, "text"),
        (3, 0, "note"),
    ]
    assert found["total"] == 3
    after = operator_client.get(
        f"/c/{conversation.id}/find", {"kind": "text", "q": "looking", "after": "2.0"}
    ).json()
    assert [(h["seq"], h["block"]) for h in after["hits"]] == [(3, 0)] and after["offset"] == 2
    before = operator_client.get(
        f"/c/{conversation.id}/find", {"kind": "text", "q": "looking", "before": "2.0"}
    ).json()
    assert [(h["seq"], h["block"]) for h in before["hits"]] == [(1, 0)]


def test_label_filters_the_list_and_labels_show_on_rows(
    operator_client: Client, operator: User, api: ApiClient
) -> None:
    labelled, plain = run(), run()
    note_by(operator, labelled, 1, labels=["needs-review", "bug"])
    page = operator_client.get("/", {"label": "needs-review"}).content.decode()
    assert f'id="c-{labelled.id}"' in page and f'id="c-{plain.id}"' not in page
    everything = operator_client.get("/").content.decode()
    row = re.search(rf'<tr id="c-{labelled.id}".*?</tr>', everything, re.S)
    assert row is not None and "needs-review" in row.group(0) and "bug" in row.group(0)
    plain_row = re.search(rf'<tr id="c-{plain.id}".*?</tr>', everything, re.S)
    assert plain_row is not None and "note-label" not in plain_row.group(0)
    assert [r["id"] for r in api.get("/api/conversations", label="bug").json()["results"]] == [
        str(labelled.id)
    ]


@pytest.mark.parametrize("label", ["Bad", "a b", "x" * 41, "<b>"])
def test_a_bad_label_filter_is_400(operator_client: Client, api: ApiClient, label: str) -> None:
    response = operator_client.get("/", {"label": label})
    assert response.status_code == 400
    assert "<b>" not in response.content.decode()
    answer = api.get("/api/conversations", label=label)
    assert answer.status_code == 400 and answer.json()["field"] == "label"


# -- exported and shared -------------------------------------------------------------------------


def test_markdown_export_carries_notes_as_quotes(
    operator_client: Client, operator: User, api: ApiClient
) -> None:
    conversation = run()
    note_by(
        operator,
        conversation,
        2,
        text="line one\n```\n# not a heading\n" + HOSTILE,
        labels=["bug"],
        block_seq=1,
    )
    markdown = api.get(f"/api/conversations/{conversation.id}/markdown").content.decode()
    record, projection = markdown.split("## Projection", 1)
    assert "**Note**" not in projection
    message_two = record.split("### #2 ", 1)[1].split("### #3 ", 1)[0]
    quote = message_two[message_two.index("> **Note**") :].rstrip().splitlines()
    assert quote[0].startswith("> **Note** by `operator` · on block 1 · labels `bug`")
    assert all(line.startswith(">") for line in quote)  # the text cannot leave the quote
    assert "> ````" in quote  # fenced longer than the backticks in it
    assert "> " + HOSTILE in quote
    download = operator_client.get(f"/c/{conversation.id}/export.md").content.decode()
    assert download == markdown


def test_share_links_show_notes_only_when_made_with_notes(api: ApiClient, operator: User) -> None:
    conversation = run()
    note_by(operator, conversation, 1, text="visible only with notes")
    without = api.post(f"/api/conversations/{conversation.id}/shares", {}).json()
    withn = api.post(f"/api/conversations/{conversation.id}/shares", {"notes": True}).json()
    assert without["notes"] is False and withn["notes"] is True
    assert (
        api.post(f"/api/conversations/{conversation.id}/shares", {"notes": "yes"}).status_code
        == 400
    )
    page_without = Client().get(without["url"]).content.decode()
    page_with = Client().get(withn["url"]).content.decode()
    assert "visible only with notes" not in page_without and 'class="notes"' not in page_without
    assert "visible only with notes" in page_with
    shared_notes = page_with.split('<div class="notes"', 1)[1]
    # The share page's finder finds note text only when the link shows notes.
    find = {"kind": "text", "q": "visible"}
    found_without = Client().get(without["url"] + f"c/{conversation.id}/find", find).json()
    found_with = Client().get(withn["url"] + f"c/{conversation.id}/find", find).json()
    assert found_without["hits"] == [] and found_without["total"] == 0
    assert [h["type"] for h in found_with["hits"]] == ["note"]
    assert (
        "note-add" not in page_with
        and "note-edit" not in shared_notes
        and "hx-post" not in shared_notes
    )


def test_share_form_offers_notes(operator: User) -> None:
    conversation = run()
    sharer = client_of(grant(operator, "share_conversation"))
    page = sharer.get(f"/c/{conversation.id}/").content.decode()
    assert 'name="notes" value="1"' in page
    sharer.post(f"/c/{conversation.id}/shares", {"expires_in": "3600", "notes": "1", "images": "1"})
    sharer.post(f"/c/{conversation.id}/shares", {"expires_in": "3600", "images": "1"})
    assert sorted(conversation.share_links.values_list("notes", flat=True)) == [False, True]


# -- the admin -----------------------------------------------------------------------------------


def test_admin_lists_notes_as_text_and_deletes_through_the_service(operator: User) -> None:
    conversation = run()
    note = note_by(operator, conversation, 1, text=HOSTILE, labels=["bug"])
    admin = User.objects.create_superuser("admin", password="pw")
    client = client_of(admin)
    listing = client.get("/admin/conversations/note/").content.decode()
    detail = client.get(f"/admin/conversations/note/{note.pk}/change/").content.decode()
    for html in (listing, detail):
        assert "<script>alert" not in html and "<img src=x" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert client.get("/admin/conversations/note/", {"q": "bug"}).status_code == 200
    response = client.post(f"/admin/conversations/note/{note.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Note.objects.exists() and not NoteLabel.objects.exists()


def test_notes_go_with_their_conversation(operator: User) -> None:
    conversation = run()
    note_by(operator, conversation, 1, labels=["bug"])
    conversation_delete(conversation=conversation)
    assert not Note.objects.exists() and not NoteLabel.objects.exists()


@pytest.mark.sqlite
def test_notes_are_searched_and_filtered_on_sqlite_too(operator: User) -> None:
    conversation = run()
    note = note_by(operator, conversation, 1, text="Ünïcode Straße", labels=["db"])
    assert list(search_reads.conversation_list(q="strasse")) == [conversation]
    assert list(search_reads.conversation_list(q="unic")) == [conversation]
    assert list(search_reads.conversation_list(label="db")) == [conversation]
    note_delete(note=note)
    assert list(search_reads.conversation_list(q="strasse")) == []


# -- bounds --------------------------------------------------------------------------------------


def test_a_page_shows_five_notes_of_a_message_and_loads_the_rest(
    operator_client: Client, operator: User
) -> None:
    conversation = run()
    for i in range(7):
        note_by(operator, conversation, 1, text=f"note number {i}")
    html = operator_client.get(f"/c/{conversation.id}/").content.decode()
    assert "note number 4" in html and "note number 5" not in html
    assert "Show all 7 notes" in html
    every = operator_client.get(f"/c/{conversation.id}/m/1/notes", headers={"HX-Request": "true"})
    assert every.status_code == 200
    assert all(f"note number {i}" in every.content.decode() for i in range(7))
    assert "Show all" not in every.content.decode()


def test_a_frame_reads_notes_only_of_a_conversation_that_holds_some(
    operator: User, monkeypatch: Any
) -> None:
    from conversations.live import fragments
    from conversations.record.notes import reads as note_reads

    conversation = stored("Noted", ("user", [text("a")], {}), ("assistant", [text("b")], {}))
    cid = str(conversation.id)
    read, calls = note_reads.notes_at, []

    def notes_at(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return read(*args, **kwargs)

    monkeypatch.setattr(note_reads, "notes_at", notes_at)
    bare = fragments.messages_frame(cid, [0, 1], True, "openai").html
    assert not calls  # none on the conversation: none read
    assert 'id="notes-1"' in bare and 'class="note"' not in bare  # the form, no note
    note_by(operator, conversation, 0, text="on the first one")
    noted = fragments.messages_frame(cid, [0, 1], True, "openai").html
    assert len(calls) == 1
    assert noted.count('class="note"') == 1 and "on the first one" in noted


def test_a_message_with_the_most_notes_stays_under_the_frame_limit(operator: User) -> None:
    from conversations.core import page_windows
    from conversations.live import fragments

    long = "\n".join(f"row {n}" for n in range(500))
    blocks = [tool_result(f"c{i}" + "i" * 200, long, name="n" * 200) for i in range(100)]
    conversation = stored("Wide", ("user", blocks, {"model": "m" * 500, "timestamp": "x" * 500}))
    worst = '"' * 10_000  # each character escapes to six bytes
    for _ in range(20):
        note_by(operator, conversation, 0, text=worst, labels=["x" * 40, "y" * 40, "z" * 40])
    frame = fragments.messages_frame(str(conversation.id), [0], True, "openai")
    assert frame.html.count('class="note"') == 5
    assert len(frame.html.encode()) <= page_windows.FRAME_BYTES
    notes = fragments.notes_frame(str(conversation.id), 0)
    assert len(notes.encode()) < 64 * 1024


def lock_waiters() -> int:
    """How many sessions of the test database wait on a lock."""
    with connection.cursor() as cursor:
        # A transaction reads one snapshot of the statistics views unless told to drop it.
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a"
            " ON a.pid = l.pid WHERE NOT l.granted AND a.datname = current_database()"
        )
        (count,) = cursor.fetchone()
    return int(count)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="concurrent writers: PostgreSQL")
def test_concurrent_label_patches_leave_the_index_equal_to_the_notes_labels(
    daphne: Server, tmp_path: Path
) -> None:
    """Two servers (two processes) PATCH one note's labels at once. The test holds the note's
    row until both wait on a lock, so they overlap every round: without the PATCH locking
    the note first, both deleted the old label rows before either's new ones were visible,
    and the index kept both writers' labels."""
    conversation = run()
    _, clear = api_token_create(label="labeller")
    note = note_add(conversation=conversation, message_seq=1, text="a note", token_label="labeller")
    servers = [daphne, start_daphne(tmp_path, {"REPLAY_WEBHOOK_SENDER": "0"})]
    clients = [server.client(clear) for server in servers]
    rounds = 3
    for client in clients:  # each server's first request sets it up
        assert client.get(f"/api/notes/{note.pk}").status_code in (200, 405)

    def write(writer: int, i: int) -> None:
        labels = [f"{'lm'[writer]}{i}", f"{'lm'[writer]}{i}-x"]
        response = clients[writer].patch(f"/api/notes/{note.pk}", json={"labels": labels})
        assert response.status_code == 200, response.text

    try:
        with ThreadPoolExecutor(2) as pool:
            for i in range(rounds):
                with transaction.atomic():
                    Note.objects.select_for_update().get(pk=note.pk)
                    writes = [pool.submit(write, w, i) for w in (0, 1)]
                    deadline = time.monotonic() + 20
                    while lock_waiters() < 2 and time.monotonic() < deadline:
                        time.sleep(0.01)
                    assert lock_waiters() == 2
                for done in writes:
                    done.result(timeout=20)
    finally:
        for client in clients:
            client.close()
        servers[1].stop()
    note.refresh_from_db()
    rows = sorted(NoteLabel.objects.filter(note=note).values_list("name", flat=True))
    assert rows == sorted(note.labels)
    api = ApiClient(clear)
    for label in [f"{w}{i}" for w in "lm" for i in range(rounds)]:
        listed = [r["id"] for r in api.get("/api/conversations", label=label).json()["results"]]
        assert listed == ([str(conversation.id)] if label in note.labels else []), label

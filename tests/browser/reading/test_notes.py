"""Notes in a real browser (docs/contract.md §10): an operator adds a note from the page with
htmx (CSRF, CSP), it appears at once in a second open page of the conversation without a
reload, hostile text stays text, and the edit and delete buttons show to whom they apply."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from playwright.sync_api import expect

from conversations.record.notes.services import note_add
from conversations.record.services.api_tokens import api_token_create
from tests.browser.conftest import VIEWPORT, Account, conversation, make_user, off_loop, sign_in

pytestmark = pytest.mark.live

SCREENSHOT = Path(__file__).resolve().parents[3] / "static" / "screenshot-notes.png"
HOSTILE = '<img src=x onerror="window.__pwned=1"><b hx-get="/admin/" hx-trigger="load">hx</b>'


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def grant(account: Account, *codenames: str) -> None:
    def work() -> None:
        user = get_user_model().objects.get(username=account.username)
        for codename in codenames:
            user.user_permissions.add(
                Permission.objects.get(content_type__app_label="conversations", codename=codename)
            )

    off_loop(work)


def signed_in_page(context: Any, account: Account, url: str) -> Any:
    page = context.new_page()
    page.goto("/accounts/login/?next=" + url)
    sign_in(page, account)
    page.wait_for_url(url)
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    return page


def test_a_note_added_in_one_page_appears_live_in_another(
    context: Any, browser: Any, daphne: Any, operator: Account
) -> None:
    grant(operator, "add_note")
    run = conversation("Noted run", [("user", [text("find it")]), ("assistant", [text("found")])])
    url = f"/c/{run.id}/"
    first = signed_in_page(context, operator, url)
    second = context.new_page()
    second.goto(url)
    expect(second.locator("#live-status")).to_have_attribute("data-state", "live")

    notes = first.locator("#notes-1")
    notes.get_by_text("Add a note").click()
    notes.get_by_label("Note on message #1").fill(HOSTILE + "\nsecond line")
    notes.get_by_label("On block").fill("0")
    notes.get_by_label("Labels").fill("bug, needs-review")
    notes.get_by_role("button", name="Add note").click()

    for page in (first, second):
        note = page.locator("#notes-1 .note")
        expect(note).to_have_count(1)
        expect(note.locator(".note-text")).to_have_text(HOSTILE + "\nsecond line")
        expect(note.locator(".note-label")).to_have_text(["bug", "needs-review"])
        expect(note.locator(".note-block")).to_have_text("block 0")
        expect(note.locator(".note-edit")).to_be_visible()  # the author's own note
        assert page.evaluate("window.__pwned") is None
        assert page.locator("#notes-1 img").count() == 0
        # Beside the record, never in the projection column.
        assert page.locator("#m-1 .projection").inner_text().count("second line") == 0
    assert second.evaluate("performance.getEntriesByType('navigation').length") == 1

    # Another operator, who may not delete notes, sees it live without edit or delete.
    other = make_user(operator=True)
    grant(other, "add_note")
    other_context = browser.new_context(base_url=daphne.url, viewport=VIEWPORT)
    try:
        third = signed_in_page(other_context, other, url)
        note = third.locator("#notes-1 .note")
        expect(note).to_have_count(1)
        expect(note.locator(".note-edit")).to_be_hidden()
        expect(note.locator(".note-delete")).to_be_hidden()
    finally:
        other_context.close()

    # The author deletes it from the second page; the first follows live.
    second.on("dialog", lambda dialog: dialog.accept())
    second.locator("#notes-1 .note-delete").click()
    for page in (first, second):
        expect(page.locator("#notes-1 .note")).to_have_count(0)


def test_the_author_edits_a_note_in_place(context: Any, operator: Account, console: Any) -> None:
    grant(operator, "add_note")
    run = conversation("Edited run", [("user", [text("one")])])
    url = f"/c/{run.id}/"
    page = signed_in_page(context, operator, url)
    notes = page.locator("#notes-0")
    notes.get_by_text("Add a note").click()
    notes.get_by_label("Note on message #0").fill("first words")
    notes.get_by_role("button", name="Add note").click()
    expect(notes.locator(".note-text")).to_have_text("first words")
    notes.locator(".note-edit").click()
    notes.get_by_label("Note text").fill("second words")
    notes.get_by_role("button", name="Save").click()
    expect(notes.locator(".note-text")).to_have_text("second words")
    expect(notes.locator(".note-head")).to_contain_text("edited")
    # A bad label is refused with the reason (a 400), and nothing changes.
    console.allow("status of 400")
    notes.locator(".note-edit").click()
    notes.locator('.note.editing input[name="labels"]').fill("Not Valid")
    notes.get_by_role("button", name="Save").click()
    expect(notes.locator(".error")).to_contain_text("lowercase a-z")
    expect(notes.locator(".note-text")).to_have_text("second words")


def test_guide_screenshot_of_a_note(context: Any, operator: Account) -> None:
    """docs/guide/notes.md's picture of notes beside the record; REPLAY_UPDATE_SCREENSHOT=1
    saves it."""
    grant(operator, "add_note")
    run = conversation(
        "Config hunt",
        [
            ("user", [text("Why does the deploy fail?")]),
            (
                "assistant",
                [
                    text("Let me read the config."),
                    {"type": "tool_use", "id": "call_1", "name": "read_file",
                     "input": {"path": "deploy/config.toml"}},
                ],
            ),
        ],
    )  # fmt: skip

    def annotate() -> None:
        from conversations.record.notes.services import note_add

        user = get_user_model().objects.get(username=operator.username)
        note_add(
            conversation=run,
            message_seq=1,
            block_seq=1,
            user=user,
            labels=["wrong-path"],
            text="The config lives in ops/, not deploy/: the agent guessed the path.",
        )
        note_add(
            conversation=run, message_seq=1, user=user, labels=["needs-review"],
            text="Ask for the repository layout in the system prompt.",
        )  # fmt: skip

    off_loop(annotate)
    page = signed_in_page(context, operator, f"/c/{run.id}/")
    expect(page.locator("#notes-1 .note")).to_have_count(2)
    image = page.locator("#m-1").screenshot()
    assert image.startswith(b"\x89PNG")
    if os.environ.get("REPLAY_UPDATE_SCREENSHOT") == "1":
        SCREENSHOT.write_bytes(image)


def test_a_note_being_written_survives_its_message_growing_live(
    context: Any, daphne: Any, operator: Account
) -> None:
    grant(operator, "add_note")
    run = conversation("Growing run", [("assistant", [text("first block")])])
    page = signed_in_page(context, operator, f"/c/{run.id}/")
    notes = page.locator("#notes-0")
    notes.get_by_text("Add a note").click()
    notes.get_by_label("Note on message #0").fill("half written")

    _, token = off_loop(lambda: api_token_create(label="agent"))
    with daphne.client(token) as agent:  # the agent streams on, through the API
        grown = agent.post(
            f"/api/conversations/{run.id}/messages/0/blocks", json=text("second block")
        )
        assert grown.status_code == 201, grown.text
    expect(page.locator("#m-0 .record")).to_contain_text("second block")
    expect(page.locator("#m-0 .note-add textarea")).to_have_value("half written")
    page.locator("#m-0 .note-add").get_by_role("button", name="Add note").click()
    expect(page.locator("#m-0 .note-text")).to_have_text("half written")


def test_a_note_being_edited_survives_another_note_arriving_live(
    context: Any, operator: Account
) -> None:
    grant(operator, "add_note")
    run = conversation("Two tabs", [("user", [text("one")])])
    url = f"/c/{run.id}/"
    editing = signed_in_page(context, operator, url)
    adding = context.new_page()
    adding.goto(url)
    expect(adding.locator("#live-status")).to_have_attribute("data-state", "live")
    adding.locator("#notes-0").get_by_text("Add a note").click()
    adding.get_by_label("Note on message #0").fill("the first note")
    adding.get_by_role("button", name="Add note").click()
    expect(editing.locator("#notes-0 .note")).to_have_count(1)

    editing.locator("#notes-0 .note-edit").click()
    editing.get_by_label("Note text").fill("being rewritten")
    adding.locator("#notes-0").get_by_text("Add a note").click()
    adding.get_by_label("Note on message #0").fill("a second note")
    adding.get_by_role("button", name="Add note").click()

    expect(editing.locator("#notes-0 .note")).to_have_count(2)
    expect(editing.get_by_label("Note text")).to_have_value("being rewritten")
    editing.get_by_role("button", name="Save").click()
    for page in (editing, adding):
        expect(page.locator("#notes-0 .note-text")).to_have_text(
            ["being rewritten", "a second note"]
        )


def test_the_finder_lands_on_a_note_that_holds_the_words(context: Any, operator: Account) -> None:
    run = conversation("Findable", [("user", [text("one")]), ("assistant", [text("two")])])

    def annotate() -> None:
        user = get_user_model().objects.get(username=operator.username)
        note_add(conversation=run, message_seq=1, user=user, text="a Zanzibar note")

    off_loop(annotate)
    page = signed_in_page(context, operator, f"/c/{run.id}/")
    page.locator("#find-q").fill("zanzibar")
    page.keyboard.press("Enter")
    expect(page.locator("#find-status")).to_have_text("1 of 1 · #1 note: a Zanzibar note")
    expect(page.locator("#notes-1.find-hit")).to_be_visible()
    expect(page.locator(".find-hit")).to_have_count(1)

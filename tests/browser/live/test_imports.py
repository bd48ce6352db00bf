"""The list page's file drop in a real browser (docs/contract.md §6): a dropped transcript uploads
with a progress indicator and opens as its conversation; a bad one says why, as text."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from playwright.sync_api import expect

from conversations.record.models.conversation import Conversation
from tests.browser.conftest import (
    VIEWPORT,
    Account,
    make_user,
    off_loop,
    sign_in,
    watched_context,
)
from tests.conftest import start_daphne
from tests.realdata import REAL

pytestmark = pytest.mark.live

COMPACT = REAL / "claude_code_compact_boundary.jsonl"


def importer() -> Account:
    account = make_user(operator=True)
    get_user_model().objects.get(username=account.username).user_permissions.add(
        Permission.objects.get(codename="add_conversation", content_type__app_label="conversations")
    )
    return account


def signed_in(page: Any, account: Account) -> Any:
    page.goto("/accounts/login/")
    sign_in(page, account)
    page.wait_for_url("/")
    return page


DROP = """([name, text]) => {
  const transfer = new DataTransfer();
  transfer.items.add(new File([text], name, {type: "application/octet-stream"}));
  const zone = document.getElementById("dropzone");
  const init = {dataTransfer: transfer, bubbles: true, cancelable: true};
  zone.dispatchEvent(new DragEvent("dragover", init));
  zone.dispatchEvent(new DragEvent("drop", init));
}"""


def test_a_dropped_session_file_opens_as_its_conversation(
    page: Any, transactional_db: None
) -> None:
    signed_in(page, importer())
    page.evaluate(DROP, ["session.jsonl", COMPACT.read_text()])
    page.wait_for_url("**/c/*/")
    conversation = off_loop(lambda: Conversation.objects.get())
    assert page.url.endswith(f"/c/{conversation.id}/")
    expect(page.locator("#import-source")).to_contain_text(
        "Imported from claude-code file session.jsonl"
    )
    expect(page.locator("#partial-payload")).to_be_visible()
    expect(page.locator(".compact-boundary")).to_contain_text("Compacted here (manual)")
    page.locator("#import-gaps summary").click()
    expect(page.locator("#import-gaps")).to_contain_text("tool definitions")


def test_a_chosen_file_imports_and_a_bad_file_shows_its_error(
    page: Any, transactional_db: None, tmp_path: Any, console: Any
) -> None:
    console.allow("/imports: Failed to load resource: the server responded with a status of 400")
    signed_in(page, importer())
    bad = tmp_path / "bad.json"
    bad.write_text('{"messages": [\n{"role": "user",, }]}')
    page.locator("#import-file").set_input_files(str(bad))
    expect(page.locator("#import-status")).to_contain_text("line 2, column")
    expect(page.locator("#dropzone")).to_have_attribute("data-state", "error")
    assert off_loop(lambda: Conversation.objects.count()) == 0
    page.locator("#import-file").set_input_files(str(COMPACT))
    page.wait_for_url("**/c/*/")


def test_an_operator_without_the_add_permission_sees_no_drop(
    page: Any, transactional_db: None
) -> None:
    signed_in(page, make_user(operator=True))
    expect(page.locator("h1")).to_have_text("Conversations")
    expect(page.locator("#dropzone")).to_have_count(0)


def test_a_refused_drop_is_styled_as_an_error_and_names_the_upload_limit(
    browser: Any, transactional_db: None, tmp_path: Any, console: Any
) -> None:
    """The status of a refused file is an error (the page's `.error` style, not plain
    text), and a file over the limit is told the limit (REPLAY_MAX_BODY_MB, here 1)."""
    server = start_daphne(tmp_path, {"REPLAY_WEBHOOK_SENDER": "0", "REPLAY_MAX_BODY_MB": "1"})
    console.allow("/imports: Failed to load resource: the server responded with a status of 4")
    try:
        with watched_context(browser, server, console, viewport=VIEWPORT) as ctx:
            page = signed_in(ctx.new_page(), importer())
            status = page.locator("#import-status")
            page.evaluate(DROP, ["big.json", "x" * (1024 * 1024 + 1)])
            expect(status).to_have_text("The file is over the upload limit of 1 MB.")
            expect(status).to_have_class(re.compile(r"\berror\b"))
            error = page.evaluate(
                "getComputedStyle(document.documentElement).getPropertyValue('--error')"
            )
            colour = status.evaluate("element => getComputedStyle(element).color")
            probe = page.evaluate(
                """(value) => { const p = document.createElement('p');
                p.style.color = value; document.body.append(p);
                const c = getComputedStyle(p).color; p.remove(); return c; }""",
                error.strip(),
            )
            assert colour == probe
            page.evaluate(DROP, ["empty.json", ""])
            expect(status).to_have_text("The file is empty: it holds no transcript.")
            expect(status).to_have_class(re.compile(r"\berror\b"))
    finally:
        server.stop()

"""The pages under the Content Security Policy in a real browser (docs/contract.md §4): no
control applies a style or script the policy refuses (`style-src 'self'`: no inline style)."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from playwright.sync_api import expect

from tests.browser.conftest import Account, conversation, make_user, off_loop, sign_in

pytestmark = pytest.mark.live

# Every violation the page sees, from its first script on: a `securitypolicyviolation`
# event, which Chromium raises for each refusal whether or not it also logs one.
RECORD = """window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(`${event.violatedDirective} ${event.blockedURI} ${event.sample}`);
}, true);"""


def sharer() -> Account:
    account = make_user(operator=True)
    User.objects.get(username=account.username).user_permissions.add(
        Permission.objects.get(
            content_type__app_label="conversations", codename="share_conversation"
        )
    )
    return account


INDICATOR = """() => {
  const form = document.createElement("form");
  const spinner = document.createElement("span");
  spinner.className = "htmx-indicator";
  form.append(spinner);
  document.body.append(form);
  const idle = getComputedStyle(spinner).opacity;
  form.classList.add("htmx-request");
  const busy = getComputedStyle(spinner).opacity;
  form.remove();
  return [idle, busy];
}"""


@pytest.mark.parametrize("attempt", range(3))  # it was seen once in three runs
def test_share_and_the_htmx_controls_apply_nothing_the_policy_refuses(
    context: Any, page: Any, console: Any, attempt: int
) -> None:
    """Share, Share again and Revoke (htmx posts that swap the panel) apply no inline style
    or script: htmx's own indicator styles are off (the htmx-config meta) and the page's
    stylesheet styles `.htmx-indicator` and `.htmx-request` instead."""
    context.add_init_script(RECORD)
    account = off_loop(sharer)
    steps = [("user", [{"type": "text", "text": f"step {n}"}]) for n in range(5)]
    c = off_loop(lambda: conversation("run", steps))
    page.goto("/accounts/login/")
    sign_in(page, account)
    page.wait_for_url("/")
    page.goto(f"/c/{c.id}/")
    shares = page.locator("#shares")
    shares.get_by_role("button", name="Share").click()
    expect(page.locator("#new-share-url")).to_be_visible()
    shares.get_by_role("button", name="Share").click()
    expect(page.locator("#shares tbody tr")).to_have_count(2)
    shares.get_by_role("button", name="Revoke").first.click()
    expect(page.locator('#shares tbody tr[data-state="revoked"]')).to_have_count(1)
    assert page.evaluate("document.querySelectorAll('head style').length") == 0
    assert page.evaluate(INDICATOR) == ["0", "1"]
    assert page.evaluate("window.__violations") == []
    assert [e for e in console.errors if "Content Security Policy" in e] == []

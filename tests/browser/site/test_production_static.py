"""The page scripts as production serves them (docs/architecture.md, `templates/`): `collectstatic`
with the manifest storage, then daphne with DJANGO_DEBUG=0 and whitenoise. The scripts are ES
modules that import each other; their imports must reach the hashed files, served as JavaScript."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tests.browser.conftest import VIEWPORT, Console, conversation, sign_in
from tests.conftest import ROOT, Server, start_daphne

pytestmark = pytest.mark.live

HASHED_SCRIPT = re.compile(r"/static/(replay[\w-]*)\.[0-9a-f]{12}\.js$")


@pytest.fixture
def production(transactional_db: None, tmp_path: Path) -> Iterator[Server]:
    """daphne with DEBUG off on the test database, serving what collectstatic wrote."""
    env = {
        "DJANGO_DEBUG": "0",
        "DJANGO_HTTPS": "",
        "DJANGO_ALLOWED_HOSTS": "",
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,
        "REPLAY_STATIC_ROOT": str(tmp_path / "static"),
    }
    collected = subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"],
        cwd=ROOT,
        env=os.environ | env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert collected.returncode == 0, collected.stdout + collected.stderr
    server = start_daphne(tmp_path, env)
    yield server
    server.stop()


@pytest.fixture
def production_page(browser: Any, production: Server, operator: Any) -> Iterator[Any]:
    console = Console()
    ctx = browser.new_context(base_url=production.url, viewport=VIEWPORT, color_scheme="light")
    ctx.set_default_timeout(10_000)
    ctx.on("page", console.watch)
    page = ctx.new_page()
    page.goto("/accounts/login/")
    sign_in(page, operator)
    page.wait_for_url("/")
    yield page
    ctx.close()
    unexpected = console.unexpected()
    assert not unexpected, "\n".join(["console errors:", *unexpected, "sockets:", *console.sockets])


def test_module_scripts_load_from_hashed_names_and_run_with_debug_off(production_page, production):
    page = production_page
    scripts: list[str] = []
    page.on("request", lambda r: scripts.append(r.url) if r.resource_type == "script" else None)
    roles = ["user", "assistant"]
    messages = [(roles[n % 2], [{"type": "text", "text": f"m {n}"}]) for n in range(130)]
    long = conversation("production", messages)

    page.goto(f"/c/{long.id}/#m-0")

    # replay-windows.js loads the window around the deep link (data-windows, htmx.ajax).
    expect(page.locator("#m-0")).to_be_in_viewport()
    # replay-live.js: the socket is open through its retrying factory.
    expect(page.locator("#live-status")).to_have_text("live")
    # replay-reading.js: times are localised.
    expect(page.locator("#m-0 time.local")).to_have_attribute("data-local", re.compile("."))
    # replay-finding.js: a filter applies.
    page.locator(".find-filter[data-filter='error']").click()
    expect(page.locator("body")).to_have_attribute("data-filter", "error")
    page.locator(".find-filter[data-filter='']").click()
    # replay.js: j moves to the next message.
    page.keyboard.press("j")
    expect(page.locator(".message.current")).to_have_count(1)

    ours = [url for url in scripts if "/static/replay" in url]
    names = sorted(HASHED_SCRIPT.search(url).group(1) for url in ours)  # type: ignore[union-attr]
    # Every module from its hashed name, once: the tags' and the imports' URLs are the same.
    assert names == sorted(
        ["replay-theme", "replay", "replay-shared", "replay-windows", "replay-live",
         "replay-import", "replay-reading", "replay-bars", "replay-focus", "replay-finding",
         "replay-notes"]
    ), ours  # fmt: skip
    with production.client() as client:
        for url in ours:
            response = client.get(url)
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/javascript"), url
            assert "immutable" in response.headers["cache-control"], url

"""Browser fixtures: Debian's Chromium, driven by Playwright, against the real daphne server.

Playwright's sync API keeps an asyncio loop marked as running in the test thread for as
long as it is started, and Django then refuses every ORM call ("you cannot call this from
an async context"). So the browser lives for this package only, not the whole session, and
DJANGO_ALLOW_ASYNC_UNSAFE is set exactly while it lives: the rest of the suite keeps
Django's guard.

Every page a test opens records its console errors and page errors; a test fails at
teardown if any were seen (a CSP violation is a console error). `console.allow(text)`
accepts an expected one, such as the 403 of the forbidden page.
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import PBKDF2PasswordHasher, make_password
from django.contrib.auth.models import Permission
from django.db import connections

from conversations.record.models.conversation import Conversation
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create

CHROMIUM = Path("/usr/bin/chromium")
VIEWPORT = {"width": 1400, "height": 1000}


def _unavailable(reason: str) -> None:
    if os.environ.get("REPLAY_REQUIRE_BROWSER") == "1":
        pytest.fail(f"REPLAY_REQUIRE_BROWSER=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="package")
def browser(daphne: Any) -> Iterator[Any]:
    """One headless Chromium for the browser tests; skipped without it unless
    REPLAY_REQUIRE_BROWSER=1. Needs the test database first (through `daphne`)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("Python playwright is not installed (make install)")
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing (apt-get install chromium)")
    with pytest.MonkeyPatch.context() as patch, sync_playwright() as playwright:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-background-networking"],
        )
        yield chromium
        chromium.close()


@dataclass
class Console:
    """Console errors and uncaught exceptions of every page of one browser context."""

    errors: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)
    sockets: list[str] = field(default_factory=list)  # to explain a socket's error event

    def watch(self, page: Any) -> None:
        page.on("console", self._message)
        page.on("pageerror", lambda exc: self.errors.append(f"{page.url}: uncaught {exc}"))
        page.on("websocket", self._socket)

    def _socket(self, socket: Any) -> None:
        self.sockets.append(f"open {socket.url}")
        socket.on("socketerror", lambda error: self.sockets.append(f"error {socket.url}: {error}"))
        socket.on("close", lambda _: self.sockets.append(f"close {socket.url}"))

    def _message(self, message: Any) -> None:
        if message.type == "error":
            self.errors.append(f"{message.location.get('url', '')}: {message.text}")

    def allow(self, text: str) -> None:
        self.allowed.append(text)

    def unexpected(self) -> list[str]:
        return [e for e in self.errors if not any(text in e for text in self.allowed)]


T = TypeVar("T")


def off_loop(work: Callable[[], T]) -> T:
    """Run `work` (ORM writes through the services) in a worker thread, away from
    Playwright's loop, so that the services' on-commit broadcasts run as in production."""

    def run() -> T:
        try:
            return work()
        finally:
            connections.close_all()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(run).result()


@dataclass
class Account:
    username: str
    password: str


PASSWORD = secrets.token_urlsafe(16)


@functools.cache
def password_hash() -> str:
    """PASSWORD hashed with the hasher the daphne server checks against (its default
    settings), not with the fast one the test process is set to use; hashed once."""
    return make_password(PASSWORD, hasher=PBKDF2PasswordHasher())


def make_user(*, operator: bool, username: str = "") -> Account:
    account = Account(username or f"user-{secrets.token_hex(4)}", PASSWORD)
    user = get_user_model().objects.create(username=account.username, password=password_hash())
    if operator:
        user.user_permissions.add(
            Permission.objects.get(
                content_type__app_label="conversations", codename="view_conversation"
            )
        )
    return account


@pytest.fixture
def operator(transactional_db: None) -> Account:
    """A signed-up operator: view_conversation, not staff, not a superuser."""
    return make_user(operator=True)


@pytest.fixture
def console() -> Console:
    return Console()


@pytest.fixture
def context(transactional_db: None, browser: Any, daphne: Any, console: Console) -> Iterator[Any]:
    """A fresh light-mode browser context on the daphne server, clipboard allowed.

    It needs the database first so that it closes first: a page still open while the
    test database is flushed would see its live socket refused (the user is gone).
    """
    with watched_context(
        browser, daphne, console, viewport=VIEWPORT, color_scheme="light", accept_downloads=True
    ) as ctx:
        yield ctx


@contextmanager
def watched_context(browser: Any, daphne: Any, console: Console, **options: Any) -> Iterator[Any]:
    """A browser context on the daphne server (`options`: Playwright's), clipboard allowed,
    10 s timeouts; once closed, any console error of its pages fails the test."""
    ctx = browser.new_context(base_url=daphne.url, **options)
    ctx.grant_permissions(["clipboard-read", "clipboard-write"], origin=daphne.url)
    ctx.set_default_timeout(10_000)
    ctx.on("page", console.watch)
    yield ctx
    ctx.close()
    unexpected = console.unexpected()
    assert not unexpected, "\n".join(["console errors:", *unexpected, "sockets:", *console.sockets])


@pytest.fixture
def page(context: Any) -> Any:
    """An anonymous page."""
    return context.new_page()


def sign_in(page: Any, account: Account) -> None:
    """Fill the real sign-in form on the current page and submit it."""
    page.get_by_label("Username").fill(account.username)
    page.get_by_label("Password").fill(account.password)
    page.get_by_role("button", name="Sign in").click()


@pytest.fixture
def operator_page(page: Any, operator: Account) -> Any:
    """A page signed in as the operator through /accounts/login/, left on the list."""
    page.goto("/accounts/login/")
    sign_in(page, operator)
    page.wait_for_url("/")
    return page


def conversation(title: str, messages: list[tuple[str, list[dict[str, Any]]]]) -> Conversation:
    """A conversation stored through the one write path."""

    def store() -> Conversation:
        created = conversation_create(title=title)
        for role, blocks in messages:
            message_append(
                conversation=created,
                role=role,
                blocks=[BLOCK_ADAPTER.validate_python(block) for block in blocks],
            )
        return created

    return off_loop(store)

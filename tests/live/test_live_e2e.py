"""Live updates end to end: real daphne servers, a real WebSocket client (`websockets`),
blocks posted through the HTTP API with a token (docs/contract.md §4).

The client below does what static/replay-live.js does: it starts from the page it
loaded, reports its position in a `resume` frame on every (re)connect, and applies each
fragment by (message seq, block count), keeping the latest per message. Every test ends
by comparing what it holds with a fresh GET of the page, article by article.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import re
import socket
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.test import Client
from PIL import Image
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException
from websockets.sync.client import ClientConnection, connect

from conversations.record import schemas
from conversations.record.models.conversation import Conversation, Message
from conversations.record.services.appending import message_append
from tests.conftest import Server, start_daphne

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

ARTICLE = re.compile(
    r'<article id="m-(?P<id>\d+)"[^>]*? data-seq="(?P<seq>\d+)" data-blocks="(?P<blocks>\d+)"'
    r"[^>]*>.*?</article>",
    re.DOTALL,
)
TOTALS = re.compile(
    r'<p class="totals" id="totals" data-messages="(?P<messages>\d+)" '
    r'data-blocks="(?P<blocks>\d+)">[^<]*</p>'
)
# The pressure view and the sticky next-request summary ride in every frame, counted like
# the totals.
PRESSURE = re.compile(
    r'<section id="pressure" class="pressure" data-messages="(?P<messages>\d+)" '
    r'data-blocks="(?P<blocks>\d+)".*?</section>',
    re.DOTALL,
)
SUMMARY = re.compile(
    r'<p id="next-summary" class="next-summary" data-messages="(?P<messages>\d+)" '
    r'data-blocks="(?P<blocks>\d+)".*?</p>',
    re.DOTALL,
)
WAIT = 15.0  # seconds any single expectation may take before the test fails


# --- the pieces of a page and of a frame ------------------------------------------------


@dataclass(frozen=True)
class Article:
    seq: int
    blocks: int
    html: str


def articles_of(html: str) -> list[Article]:
    found = []
    for match in ARTICLE.finditer(html):
        assert match["id"] == match["seq"], match.group(0)[:200]
        found.append(Article(int(match["seq"]), int(match["blocks"]), match.group(0)))
    return found


def totals_of(html: str) -> tuple[int, int, str] | None:
    """The newest totals in the HTML: a packed resync frame carries one per message, and
    the page, like this, keeps the largest."""
    found = [(int(m["messages"]), int(m["blocks"]), m.group(0)) for m in TOTALS.finditer(html)]
    return max(found, default=None)


def parse_frame(frame: str) -> tuple[list[Article], tuple[int, int, str] | None]:
    """A frame is message articles, the totals, the pressure view and the next-request
    summary, and nothing else."""
    articles = articles_of(frame)
    totals = totals_of(frame)
    pressure = max(
        PRESSURE.finditer(frame),
        key=lambda m: (int(m["messages"]), int(m["blocks"])),
        default=None,
    )
    summary = max(
        SUMMARY.finditer(frame),
        key=lambda m: (int(m["messages"]), int(m["blocks"])),
        default=None,
    )
    rest = SUMMARY.sub("", PRESSURE.sub("", TOTALS.sub("", ARTICLE.sub("", frame))))
    assert rest.strip() == "", f"unexpected content in a frame: {rest[:300]!r}"
    assert totals is not None, f"a frame without totals: {frame[:300]!r}"
    assert pressure is not None, f"a frame without the pressure view: {frame[:300]!r}"
    assert (pressure["messages"], pressure["blocks"]) == (str(totals[0]), str(totals[1]))
    assert summary is not None, f"a frame without the next-request summary: {frame[:300]!r}"
    assert (summary["messages"], summary["blocks"]) == (str(totals[0]), str(totals[1]))
    return articles, totals


# --- accounts, the API, the page --------------------------------------------------------


def open_socket(url: str, headers: dict[str, str]) -> ClientConnection:
    """A connected socket that the caller closes (entering the context manager is what
    websockets ≥ 17.1 asks of a connection used without `with`)."""
    return connect(url, additional_headers=headers, open_timeout=5, close_timeout=2).__enter__()


def operator_cookie() -> str:
    """A signed-in operator's session id (stored in the test database daphne reads)."""
    user = get_user_model().objects.create_user(username=f"op-{time.monotonic_ns()}")
    user.user_permissions.add(Permission.objects.get(codename="view_conversation"))
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def png_b64() -> str:
    buffer = io.BytesIO()
    Image.new("RGB", (2, 2), (20, 120, 200)).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


class Api:
    """The JSON API of one server, with a bearer token; every write must answer 201."""

    def __init__(self, server: Server, token: str) -> None:
        self.client = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    def close(self) -> None:
        self.client.close()

    def conversation(self, title: str = "live") -> str:
        response = self.client.post("/api/conversations", json={"title": title})
        assert response.status_code == 201, response.text
        return str(response.json()["id"])

    def message(self, conversation_id: str, role: str, *blocks: dict[str, Any]) -> int:
        response = self.client.post(
            f"/api/conversations/{conversation_id}/messages",
            json={"role": role, "blocks": list(blocks)},
        )
        assert response.status_code == 201, response.text
        return int(response.json()["seq"])

    def block(self, conversation_id: str, seq: int, block: dict[str, Any]) -> int:
        response = self.client.post(
            f"/api/conversations/{conversation_id}/messages/{seq}/blocks", json=block
        )
        assert response.status_code == 201, response.text
        return int(response.json()["seq"])


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def page(
    base_url: str, conversation_id: str, cookie: str, params: str = ""
) -> tuple[dict[int, str], tuple[int, int, str] | None]:
    """A fresh GET of /c/ID/: each article's HTML by seq, and the totals."""
    with httpx.Client(base_url=base_url, cookies={"sessionid": cookie}, timeout=30) as client:
        response = client.get(f"/c/{conversation_id}/" + (f"?{params}" if params else ""))
    assert response.status_code == 200, response.text[:500]
    return {a.seq: a.html for a in articles_of(response.text)}, totals_of(response.text)


def record_counts(conversation_id: str) -> dict[int, int]:
    """Message seq → block count, as the database holds them now."""
    rows = Message.objects.filter(conversation_id=conversation_id)
    return dict(rows.values_list("seq", "block_count"))


# --- the client ---------------------------------------------------------------------------


@dataclass
class LiveClient:
    """One watcher of one conversation, applying fragments as the page does."""

    base_url: str
    conversation_id: str
    cookie: str
    params: str = "vision=1&shape=openai"
    held: dict[int, Article] = field(default_factory=dict)
    totals: tuple[int, int, str] | None = None
    received: list[Article] = field(default_factory=list)  # every article, as it came
    redundant: int = 0  # articles that changed nothing (already held at that count)
    closes: list[int | None] = field(default_factory=list)
    reconnects: int = 0
    ws: ClientConnection | None = None

    @property
    def ws_url(self) -> str:
        path = f"/ws/conversations/{self.conversation_id}/?{self.params}"
        return self.base_url.replace("http://", "ws://", 1) + path

    def load_page(self) -> None:
        """Start from a fresh GET of the page, as a browser does."""
        articles, totals = page(self.base_url, self.conversation_id, self.cookie, self.params)
        self.held = {seq: Article(seq, blocks_of(html), html) for seq, html in articles.items()}
        self.totals = totals

    def connect(self, *, resume: bool = True) -> None:
        """As the page connects: saying it reports (`report=1`), then reporting."""
        self.ws = open_socket(
            self.ws_url + ("&report=1" if resume else ""),
            {"Cookie": f"sessionid={self.cookie}", "Origin": self.base_url},
        )
        if resume:
            self.ws.send(json.dumps(self.position()))

    def position(self) -> dict[str, Any]:
        """What replay-live.js reports: the first held seq and each block count from it,
        -1 for a hole."""
        if not self.held:
            return {"type": "resume", "from": 0, "counts": []}
        first, last = min(self.held), max(self.held)
        counts = [self.held[s].blocks if s in self.held else -1 for s in range(first, last + 1)]
        return {"type": "resume", "from": first, "counts": counts}

    def apply(self, frame: str) -> list[Article]:
        articles, totals = parse_frame(frame)
        for article in articles:
            self.received.append(article)
            mine = self.held.get(article.seq)
            if mine is not None and mine.blocks >= article.blocks:
                self.redundant += 1
            else:
                self.held[article.seq] = article
        if totals is not None and (
            self.totals is None or (totals[0], totals[1]) > (self.totals[0], self.totals[1])
        ):
            self.totals = totals
        return articles

    def counts(self) -> dict[int, int]:
        return {seq: a.blocks for seq, a in self.held.items()}

    def receive(self, timeout: float) -> str | None:
        """One frame, or None when none came in `timeout`; raises ConnectionClosed."""
        assert self.ws is not None, "not connected"
        try:
            frame = self.ws.recv(timeout=timeout)
        except TimeoutError:
            return None
        assert isinstance(frame, str), "frames are text"
        self.apply(frame)
        return frame

    def wait_for(
        self, done: Callable[[], bool], timeout: float = WAIT, *, reconnect: bool = False
    ) -> None:
        """Receive until `done()`; with `reconnect`, every close is followed by a new
        connection with a resume frame (retried with a short backoff)."""
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"timed out: holding {self.counts()}, record {self.expected()}, "
                    f"closes {self.closes}, reconnects {self.reconnects}"
                )
            if self.ws is None:
                if not reconnect:
                    raise AssertionError(f"socket closed ({self.closes}) while waiting")
                self.try_reconnect(deadline)
                continue
            try:
                self.receive(min(left, 0.5))
            except ConnectionClosed as closed:
                self.closed(closed)

    def try_reconnect(self, deadline: float) -> None:
        delay = 0.1
        while time.monotonic() < deadline:
            try:
                self.connect()
                self.reconnects += 1
                return
            except (OSError, TimeoutError, WebSocketException):
                self.ws = None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def closed(self, closed: ConnectionClosed) -> None:
        self.closes.append(closed.rcvd.code if closed.rcvd else None)
        self.ws = None

    def wait_for_record(
        self, timeout: float = WAIT, *, reconnect: bool = False, start: int = 0
    ) -> None:
        """Until this client holds every message from `start` on with its block count,
        as stored."""
        self.wait_for(lambda: self.counts() == self.expected(start), timeout, reconnect=reconnect)

    def expected(self, start: int = 0) -> dict[int, int]:
        return {s: n for s, n in record_counts(self.conversation_id).items() if s >= start}

    def quiet(self, seconds: float = 0.5) -> list[Article]:
        """Whatever arrives within `seconds` (nothing, when the server has nothing to say)."""
        before = len(self.received)
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            self.receive(left)
        return self.received[before:]

    def close(self, code: int = 1000) -> None:
        if self.ws is not None:
            self.ws.close(code=code)
            self.ws = None

    def drop(self) -> None:
        """Drop the TCP connection abruptly (RST, no closing handshake)."""
        assert self.ws is not None
        sock = self.ws.socket
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        with contextlib.suppress(Exception):  # the socket is gone on purpose
            self.ws.close()
        self.ws = None

    def assert_equals_fresh_page(self, base_url: str | None = None) -> None:
        """What this client shows equals a fresh reload, article by article."""
        articles, totals = page(
            base_url or self.base_url, self.conversation_id, self.cookie, self.params
        )
        assert sorted(self.held) == sorted(articles)
        for seq, html in articles.items():
            assert self.held[seq].html == html, f"message {seq} differs from a fresh page"
        assert self.totals == totals


def blocks_of(article_html: str) -> int:
    (article,) = articles_of(article_html)
    return article.blocks


def assert_once_in_order(articles: list[Article], *, new_from: int = 0) -> None:
    """New messages (seq >= new_from) first appear in seq order, and each (message,
    block count) arrives once, never going back."""
    first_seen = [s for s in dict.fromkeys(a.seq for a in articles) if s >= new_from]
    assert first_seen == sorted(first_seen), f"messages out of order: {first_seen}"
    last: dict[int, int] = {}
    for a in articles:
        assert a.blocks > last.get(a.seq, -1), (
            f"message {a.seq} with {a.blocks} blocks arrived again or went back "
            f"(had {last.get(a.seq)}): {[(x.seq, x.blocks) for x in articles]}"
        )
        last[a.seq] = a.blocks


# --- fixtures -------------------------------------------------------------------------------


@pytest.fixture
def api(daphne: Server, token: str) -> Iterator[Api]:
    """Here `api` is the real server's HTTP API (conftest's is Django's test client)."""
    client = Api(daphne, token)
    yield client
    client.close()


@pytest.fixture
def cookie(transactional_db: None) -> str:
    return operator_cookie()


@pytest.fixture
def watchers() -> Iterator[list[LiveClient]]:
    """Clients a test opens; all closed at the end whatever happens."""
    opened: list[LiveClient] = []
    yield opened
    for client in opened:
        if client.ws is not None:
            client.ws.close()


# --- the tests ------------------------------------------------------------------------------


def test_socket_without_a_session_or_from_a_foreign_origin_is_refused(
    daphne: Server, api: Api, cookie: str
) -> None:
    conversation_id = api.conversation()
    url = LiveClient(daphne.url, conversation_id, cookie).ws_url
    # docs/contract.md §4: accepted, then closed with 4401, so that the page can tell why.
    anonymous = open_socket(url, {"Origin": daphne.url})
    with pytest.raises(ConnectionClosed) as signed_out:
        anonymous.recv(timeout=5)
    assert signed_out.value.rcvd is not None and signed_out.value.rcvd.code == 4401
    with pytest.raises(InvalidStatus) as foreign:
        open_socket(url, {"Cookie": f"sessionid={cookie}", "Origin": "http://evil.test"})
    assert foreign.value.response.status_code == 403


def test_socket_receives_everything_added_after_it_connects_without_asking(
    daphne: Server, api: Api, cookie: str, watchers: list[LiveClient]
) -> None:
    conversation_id = api.conversation()
    api.message(conversation_id, "user", text("already there"))
    client = LiveClient(daphne.url, conversation_id, cookie)
    watchers.append(client)
    client.connect(resume=False)
    assert client.quiet(0.5) == [], "what existed before the socket is not pushed unasked"

    reasoning = {"type": "reasoning", "text": "look it up"}
    call = {"type": "tool_use", "id": "call_1", "name": "search", "input": {"q": "x", "n": 1}}
    result = {"type": "tool_result", "tool_use_id": "call_1", "content": "2"}
    image = {"type": "image", "media_type": "image/png", "data": png_b64()}
    steps: list[Callable[[], object]] = [
        lambda: api.message(conversation_id, "assistant", reasoning, call),
        lambda: api.message(conversation_id, "user", result),
        lambda: api.block(conversation_id, 2, image),
        lambda: api.block(conversation_id, 1, text("<script>alert(1)</script> & more")),
        lambda: api.message(conversation_id, "assistant"),
    ]
    for step in steps:
        step()
        client.wait_for_record(start=1)
    api.block(conversation_id, 0, text("an older message grows"))
    client.wait_for_record()
    escaped = client.held[1].html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; more" in escaped
    assert "<script>" not in escaped
    assert_once_in_order(client.received, new_from=1)
    assert client.quiet(0.3) == []
    client.assert_equals_fresh_page()


def test_burst_of_blocks_is_all_applied_and_equals_a_fresh_page(
    daphne: Server, api: Api, cookie: str, watchers: list[LiveClient]
) -> None:
    conversation_id = api.conversation()
    client = LiveClient(daphne.url, conversation_id, cookie)
    watchers.append(client)
    client.load_page()
    client.connect()
    seq = api.message(conversation_id, "assistant", text("streaming"))
    for i in range(15):
        api.block(conversation_id, seq, text(f"chunk {i}"))
    api.message(conversation_id, "user", text("next"))
    client.wait_for_record()
    client.quiet(0.3)
    client.assert_equals_fresh_page()
    # Frames never take the page back: a late frame holds no fewer blocks than was shown.
    streamed = [a.blocks for a in client.received if a.seq == 0]
    assert streamed[-1] == 16
    # Each position at most once and in order: a watcher that keeps up gets every add as it
    # comes (docs/contract.md §4: merged only while behind), one that lags fewer, larger frames.
    assert streamed == sorted(set(streamed)), streamed


CLOSES = [1000, 1001, 1011, "drop"]


@pytest.mark.parametrize("how", CLOSES, ids=lambda c: f"close-{c}")
def test_blocks_posted_while_the_socket_was_closed_arrive_once_after_resume(
    daphne: Server, api: Api, cookie: str, watchers: list[LiveClient], how: int | str
) -> None:
    conversation_id = api.conversation()
    api.message(conversation_id, "system", text("be brief"))
    api.message(conversation_id, "user", text("hello"))
    client = LiveClient(daphne.url, conversation_id, cookie)
    watchers.append(client)
    client.load_page()
    client.connect()
    api.message(conversation_id, "assistant", text("hi"))
    client.wait_for_record()

    if how == "drop":
        client.drop()
    else:
        assert isinstance(how, int)
        client.close(code=how)
    api.block(conversation_id, 1, text("while away: a block on an earlier message"))
    api.message(conversation_id, "assistant", text("away"), {"type": "reasoning", "text": "r"})
    api.block(conversation_id, 3, text("and one more"))
    api.message(conversation_id, "user")
    api.block(conversation_id, 0, text("the system message grows too"))

    before = len(client.received)
    client.connect()
    client.wait_for_record()
    missed = client.received[before:]
    assert [a.seq for a in missed] == [0, 1, 3, 4], "each changed message once, in order"
    assert {a.seq: a.blocks for a in missed} == {0: 2, 1: 2, 3: 3, 4: 0}
    assert client.quiet(0.5) == [], "nothing is sent twice"
    client.assert_equals_fresh_page()


def test_resume_with_a_hole_gets_the_missing_message(
    daphne: Server, api: Api, cookie: str, watchers: list[LiveClient]
) -> None:
    conversation_id = api.conversation()
    for i in range(4):
        api.message(conversation_id, "user", text(f"m{i}"))
    client = LiveClient(daphne.url, conversation_id, cookie)
    watchers.append(client)
    client.load_page()
    del client.held[2]
    assert client.position() == {"type": "resume", "from": 0, "counts": [1, 1, -1, 1]}
    client.connect()
    client.wait_for_record()
    assert [a.seq for a in client.received] == [2]
    client.assert_equals_fresh_page()


@pytest.mark.parametrize("params", ["vision=1&shape=openai", "vision=0&shape=anthropic"])
def test_what_the_page_shows_after_interruptions_equals_a_fresh_reload(
    daphne: Server, api: Api, cookie: str, watchers: list[LiveClient], params: str
) -> None:
    conversation_id = api.conversation()
    api.message(conversation_id, "system", text("You are terse."))
    client = LiveClient(daphne.url, conversation_id, cookie, params=params)
    watchers.append(client)
    client.load_page()
    client.connect()

    image = {"type": "image", "media_type": "image/png", "data": png_b64()}
    reasoning = {"type": "reasoning", "text": "hm"}
    call = {"type": "tool_use", "id": "c1", "name": "fetch", "input": {"z": 1, "a": [2, "é"]}}
    result = {"type": "tool_result", "tool_use_id": "c1", "content": "ok"}
    error = {"type": "tool_result", "tool_use_id": "c9", "content": "boom", "is_error": True}
    rounds: list[list[Callable[[], object]]] = [
        [
            lambda: api.message(conversation_id, "user", text("what is <b>this</b>?"), image),
            lambda: api.message(conversation_id, "assistant", reasoning),
            lambda: api.block(conversation_id, 2, call),
        ],
        [
            lambda: api.message(conversation_id, "user", result),
            lambda: api.block(conversation_id, 3, error),
            lambda: api.message(conversation_id, "assistant", text("x" * 5000)),
        ],
        [
            lambda: api.block(conversation_id, 1, text("later words on the user's message")),
            lambda: api.message(conversation_id, "system", text("a second system message")),
            lambda: api.message(conversation_id, "assistant"),
        ],
        [
            lambda i=i: api.block(conversation_id, 6, text(f"streamed {i}"))  # type: ignore[misc]
            for i in range(5)
        ],
    ]
    interruptions: list[Callable[[], None]] = [
        lambda: client.close(1000),
        client.drop,
        lambda: client.close(1001),
        lambda: None,  # stays connected
    ]
    for posts, interrupt in zip(rounds, interruptions, strict=True):
        posts[0]()  # one post while connected, not waited for
        interrupt()
        for post in posts[1:]:
            post()
        if client.ws is None:
            client.connect()
        client.wait_for_record()
    client.quiet(0.3)
    client.assert_equals_fresh_page()


def test_server_restarted_under_connected_clients_ends_with_the_record(
    tmp_path: Path, token: str, cookie: str, watchers: list[LiveClient]
) -> None:
    server = start_daphne(tmp_path)
    servers = [server]
    try:
        api = Api(server, token)
        conversation_id = api.conversation()
        api.message(conversation_id, "user", text("before the restart"))
        for params in ("vision=1&shape=openai", "vision=0&shape=anthropic"):
            client = LiveClient(server.url, conversation_id, cookie, params=params)
            watchers.append(client)
            client.load_page()
            client.connect()
        api.message(conversation_id, "assistant", text("seen live"))
        for client in watchers:
            client.wait_for_record()

        server.stop()
        for client in watchers:  # each sees its socket close
            client.wait_for(lambda c=client: c.ws is None, timeout=10)  # type: ignore[misc]
        # What another process stores while this one is down.
        conversation = Conversation.objects.get(pk=conversation_id)
        block = schemas.TextIn(type="text", text="stored while the server was down")
        message_append(conversation=conversation, role="user", blocks=[block])

        server = start_daphne(tmp_path, port=server.port)
        servers.append(server)
        api.close()
        api = Api(server, token)
        api.block(conversation_id, 1, text("after the restart"))
        for client in watchers:
            client.wait_for_record(timeout=20, reconnect=True)
        api.message(conversation_id, "assistant", text("and live again"))
        for client in watchers:
            client.wait_for_record()
            assert client.reconnects == 1
            assert_once_in_order(client.received, new_from=1)
            client.assert_equals_fresh_page()
        api.close()
    finally:
        for s in servers:
            s.stop()


def test_many_watchers_of_several_views_get_every_change_once_in_order(
    daphne: Server, api: Api, cookie: str, watchers: list[LiveClient]
) -> None:
    """docs/contract.md §4, Live delivery: one rendering per view and change, the same frame to
    every socket of the view, changes that come faster than they are delivered told together; every
    watcher still ends with every message and block, each position once and in order."""
    conversation_id = api.conversation()
    api.message(conversation_id, "system", text("be brief"))
    views = ["vision=1&shape=openai"] * 6 + ["vision=0&shape=anthropic"] * 4
    for params in views:
        client = LiveClient(daphne.url, conversation_id, cookie, params=params)
        watchers.append(client)
        client.load_page()
        client.connect()
    seq = 0
    for n in range(30):  # an agent streaming, not waiting for its frames
        if n % 6 == 0:
            seq = api.message(conversation_id, "assistant" if n % 12 else "user", text(f"m{n}"))
        else:
            api.block(conversation_id, seq, text(f"block {n}"))
    for client in watchers:
        client.wait_for_record()
    for client in watchers:
        assert client.quiet(0.2) == []
        assert_once_in_order(client.received, new_from=1)
        client.assert_equals_fresh_page()

"""What a client may send on a live socket (docs/contract.md §4 Bounds), on a real daphne
with real WebSocket clients: a frame over the cap closes with 1009, a report of more than a
window closes with 4400, and a hostile share-link holder does not slow the server down."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator

import httpx2 as httpx
import pytest
from websockets.exceptions import ConnectionClosed, WebSocketException
from websockets.sync.client import ClientConnection

from conversations.core import page_windows, socket_window
from conversations.record.models.conversation import Conversation
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create
from conversations.sharing.services import share_create
from tests.conftest import DAPHNE_OPTIONS, ROOT, Server
from tests.live.test_live_e2e import open_socket

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def report(counts: int) -> str:
    return json.dumps({"type": "resume", "from": 0, "counts": [0] * counts}, separators=(",", ":"))


@pytest.fixture
def shared(daphne: Server) -> tuple[str, str]:
    """A live share link's socket (anyone who holds the link may open it), and its
    conversation, holding one message without blocks."""
    conversation = conversation_create(title="shared")
    message_append(conversation=conversation, role="user", blocks=[])
    _, token = share_create(conversation=conversation)
    url = daphne.url.replace("http://", "ws://", 1) + f"/ws/s/{token}/?report=1"
    return url, str(conversation.id)


@pytest.fixture
def share_url(shared: tuple[str, str]) -> str:
    return shared[0]


@pytest.fixture
def opened(daphne: Server) -> Iterator[list[ClientConnection]]:
    sockets: list[ClientConnection] = []
    yield sockets
    for ws in sockets:
        ws.close()


def connect(url: str, daphne: Server, opened: list[ClientConnection]) -> ClientConnection:
    ws = open_socket(url, {"Origin": daphne.url})
    opened.append(ws)
    return ws


def close_code(ws: ClientConnection) -> int | None:
    """The code the server closed with, within 5 s (frames before it are skipped)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            ws.recv(timeout=deadline - time.monotonic())
        except ConnectionClosed as closed:
            return closed.rcvd.code if closed.rcvd else None
        except TimeoutError:
            break
    raise AssertionError("the socket stayed open")


def test_a_frame_over_the_cap_closes_with_1009(
    daphne: Server, share_url: str, opened: list[ClientConnection]
) -> None:
    ws = connect(share_url, daphne, opened)
    ws.send(report(20_000))  # ~60 KB: far more than a page's report ever holds
    assert close_code(ws) == 1009
    # The same in frames under the cap: heard whole, refused unread.
    ws = connect(share_url, daphne, opened)
    big = report(20_000)
    ws.send(big[i : i + 1000] for i in range(0, len(big), 1000))
    assert close_code(ws) == 4400
    # A report at the cap itself is heard (the socket stays open and answers it).
    ws = connect(share_url, daphne, opened)
    padded = report(page_windows.DOCUMENT)
    padded += " " * (socket_window.CLIENT_BYTES - len(padded))
    assert len(padded.encode()) == socket_window.CLIENT_BYTES
    ws.send(padded)
    with pytest.raises(TimeoutError):
        ws.recv(timeout=0.5)  # nothing missing, nothing sent, and not closed


def test_frames_larger_than_the_client_cap_still_reach_the_page(
    daphne: Server, shared: tuple[str, str], opened: list[ClientConnection]
) -> None:
    # daphne's message cap holds for what the server sends too: it is the largest frame.
    url, conversation_id = shared
    message_append(
        conversation=Conversation.objects.get(pk=conversation_id),
        role="user",
        blocks=[BLOCK_ADAPTER.validate_python({"type": "text", "text": "long " * 4000})],
    )
    ws = connect(url, daphne, opened)
    ws.send(report(1))  # it holds message 0 (no blocks): the resync sends message 1
    frame = ws.recv(timeout=10)
    assert isinstance(frame, str) and 'data-seq="1"' in frame
    assert len(frame.encode()) > socket_window.CLIENT_BYTES


def test_a_report_of_more_than_a_window_closes_with_4400(
    daphne: Server, share_url: str, opened: list[ClientConnection]
) -> None:
    ws = connect(share_url, daphne, opened)
    text = report(page_windows.DOCUMENT + 1)
    assert len(text.encode()) < socket_window.CLIENT_BYTES  # refused for what it says
    ws.send(text)
    assert close_code(ws) == 4400  # final for the page: no page sends one


def health_seconds(client: httpx.Client, n: int) -> list[float]:
    took = []
    for _ in range(n):
        started = time.monotonic()
        assert client.get("/healthz").status_code == 200
        took.append(time.monotonic() - started)
    return took


def test_hostile_share_sockets_do_not_delay_healthz(
    daphne: Server, share_url: str, opened: list[ClientConnection]
) -> None:
    stop = threading.Event()
    sent: list[int] = []
    errors: list[BaseException] = []
    # Just under daphne's own default cap (1 MB), made once: the senders spend no time on it.
    big = report(520_000)

    def hostile() -> None:
        # As fast as the server takes them, reconnecting after each close.
        try:
            while not stop.is_set():
                try:
                    ws = open_socket(share_url, {"Origin": daphne.url})
                except (OSError, TimeoutError, WebSocketException):
                    continue
                try:
                    while not stop.is_set():
                        ws.send(big)
                        sent.append(len(big))
                except ConnectionClosed:
                    pass
                finally:
                    ws.close()
        except BaseException as exc:
            errors.append(exc)

    with daphne.client() as client:
        baseline = statistics.median(health_seconds(client, 10))
        threads = [threading.Thread(target=hostile) for _ in range(3)]
        for thread in threads:
            thread.start()
        try:
            deadline = time.monotonic() + 5
            while len(sent) < 3 and time.monotonic() < deadline:
                time.sleep(0.01)
            under_attack = sorted(health_seconds(client, 20))
        finally:
            stop.set()
            for thread in threads:
                thread.join(10)
    assert not errors, errors
    assert len(sent) >= 3, "the hostile clients sent nothing"
    p50, p90 = under_attack[10], under_attack[18]
    seen = f"/healthz p50 {p50:.3f}s, p90 {p90:.3f}s (alone {baseline:.3f}s), {len(sent)} sent"
    assert p50 < max(0.05, 5 * baseline) and p90 < 0.25, seen


def test_every_way_this_repository_starts_daphne_caps_what_a_client_sends() -> None:
    options = [option.replace("=", " ") for option in DAPHNE_OPTIONS]
    for path in ("deploy/replay@.service", "Makefile"):
        text = (ROOT / path).read_text().replace("=", " ")
        assert all(option in text for option in options), f"{path} lacks {DAPHNE_OPTIONS}"

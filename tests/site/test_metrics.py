"""`/metrics` (docs/contract.md §5) from a real daphne process: off unless configured, for a
bearer token or an allowed network, and counting what the process did — ingest, OTLP
spans, request latency by route, the database pool."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import httpx2 as httpx
import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from conversations.record.services.api_tokens import api_token_create
from tests import otlpdata
from tests.conftest import Server, start_daphne

pytestmark = pytest.mark.live

METRICS_TOKEN = "m-" + secrets.token_urlsafe(24)


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in a Prometheus text exposition (0 if absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    pattern = re.escape(name) + (r"\{" + re.escape(wanted) + r"\}" if labels else "") + r" (\S+)"
    found = re.search(r"^" + pattern + r"$", text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


@pytest.fixture(scope="module")
def server(
    django_db_setup: None, django_db_blocker: object, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    server = start_daphne(
        tmp_path_factory.mktemp("metrics"), {"REPLAY_METRICS_TOKEN": METRICS_TOKEN}
    )
    yield server
    server.stop()


def scrape(server: Server) -> str:
    with server.client(METRICS_TOKEN) as client:
        response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return response.text


def test_metrics_need_the_token(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        missing = client.get("/metrics")
        wrong = client.get("/metrics", headers={"Authorization": "Bearer " + "x" * 30})
    assert missing.status_code == wrong.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert "replay_" not in missing.text


def test_ingest_requests_and_the_pool_are_counted(transactional_db: None, server: Server) -> None:
    _, token = api_token_create(label="metrics")
    before = scrape(server)
    with server.client(token) as client:
        created = client.post("/api/conversations", json={"title": "counted"})
        cid = created.json()["id"]
        for _ in range(2):
            added = client.post(
                f"/api/conversations/{cid}/messages",
                json={"role": "user", "blocks": [{"type": "text", "text": "a"}] * 3},
            )
            assert added.status_code == 201, added.text
        inputs, outputs = otlpdata.chat_turns(1)[0]
        good = otlpdata.span(otlpdata.genai_attributes(inputs, outputs, conversation="m-1"))
        bad = otlpdata.span({"gen_ai.conversation.id": "m-2", "gen_ai.input.messages": "[" * 99})
        traced = client.post(
            "/v1/traces",
            content=otlpdata.otlp_json(otlpdata.request(good, bad)),
            headers={"Content-Type": "application/json"},
        )
        assert traced.status_code == 200, traced.text
    after = scrape(server)

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("replay_ingest_messages_total") >= 2 + 1  # the span's message, at least
    assert grew("replay_ingest_blocks_total") >= 6 + 1
    assert grew("replay_otlp_spans_total", outcome="accepted") == 1
    assert grew("replay_otlp_spans_total", outcome="rejected") == 1
    route = "api/conversations/<str:conversation_id>/messages"
    count = "replay_http_request_duration_seconds_count"
    assert grew(count, route=route, method="POST", status="2xx") == 2
    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):  # psycopg's pool
        assert sample(after, "replay_db_pool_size") >= 1
        assert "replay_db_pool_timeouts_total 0.0" in after
        assert "replay_db_pool_wait_seconds_total" in after
    else:
        assert "replay_db_pool_size" not in after


def test_metrics_are_off_unless_configured_and_follow_the_allowed_networks(
    transactional_db: None, tmp_path: Path
) -> None:
    def status(**env: str) -> int:
        server = start_daphne(tmp_path, env)
        try:
            with httpx.Client(base_url=server.url, timeout=10) as client:
                return client.get("/metrics").status_code
        finally:
            server.stop()

    assert status() == 404
    assert status(REPLAY_METRICS_ALLOW="127.0.0.0/8") == 200
    assert status(REPLAY_METRICS_ALLOW="10.0.0.0/8") == 403


def test_malformed_metrics_settings_stop_start_up(tmp_path: Path) -> None:
    from tests.site.test_settings import read_settings

    with pytest.raises(ImproperlyConfigured, match="REPLAY_METRICS_ALLOW must list networks"):
        read_settings(tmp_path, REPLAY_METRICS_ALLOW="10.0.0.0/8,intranet")
    with pytest.raises(ImproperlyConfigured, match="REPLAY_METRICS_TOKEN must be at least"):
        read_settings(tmp_path, REPLAY_METRICS_TOKEN="short")


def test_open_sockets_and_frames_are_counted(transactional_db: None, server: Server) -> None:
    from tests.live.test_live_e2e import open_socket, operator_cookie

    _, token = api_token_create(label="live-metrics")
    with server.client(token) as client:
        cid = client.post("/api/conversations", json={"title": "watched"}).json()["id"]
    before = scrape(server)
    ws_url = (
        server.url.replace("http://", "ws://") + f"/ws/conversations/{cid}/?vision=1&shape=openai"
    )
    ws = open_socket(ws_url, {"Cookie": f"sessionid={operator_cookie()}", "Origin": server.url})
    try:
        kind = {"kind": "conversation"}
        for _ in range(50):  # counted once the socket is open and joined
            opened = scrape(server)
            if sample(opened, "replay_live_sockets", **kind) > 0:
                break
            time.sleep(0.1)
        with server.client(token) as client:
            added = client.post(
                f"/api/conversations/{cid}/messages",
                json={"role": "user", "blocks": [{"type": "text", "text": "seen live"}]},
            )
            assert added.status_code == 201
        assert "seen live" in ws.recv(timeout=5)
        framed = scrape(server)
    finally:
        ws.close()
    assert sample(opened, "replay_live_sockets", **kind) == (
        sample(before, "replay_live_sockets", **kind) + 1
    )
    assert sample(framed, "replay_live_frames_total") > sample(opened, "replay_live_frames_total")
    for _ in range(50):  # the close reaches the server after the client returns
        closed = scrape(server)
        if sample(closed, "replay_live_sockets", **kind) == sample(
            before, "replay_live_sockets", **kind
        ):
            break
        time.sleep(0.1)
    assert sample(closed, "replay_live_sockets", **kind) == sample(
        before, "replay_live_sockets", **kind
    )
    assert sample(closed, "replay_broadcast_failures_total") == 0

"""No log line carries a share token (docs/contract.md §8), whoever writes it."""

from __future__ import annotations

import base64
import inspect
import json
import logging
import re
import secrets
import socket
import time
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from replaysite import logs
from tests.conftest import Server, start_daphne


def test_a_not_found_under_a_share_link_is_logged_without_its_token(
    db: None, caplog: pytest.LogCaptureFixture
) -> None:
    token = secrets.token_urlsafe(32)
    with caplog.at_level(logging.WARNING):
        response = Client().get(f"/s/{token}/nowhere/")
    assert response.status_code in (404, 410)
    lines = [record.getMessage() for record in caplog.records]
    assert any("/s/[redacted]/nowhere/" in line for line in lines), lines
    assert not any(token in line for line in lines)
    assert not any(token in str(record.args) for record in caplog.records)


def test_every_logger_and_argument_kind_is_redacted(caplog: pytest.LogCaptureFixture) -> None:
    token = secrets.token_urlsafe(32)

    class Request:
        def __str__(self) -> str:
            return f"<ASGIRequest: GET '/s/{token}/c/1/'>"

    with caplog.at_level(logging.INFO):
        logging.getLogger("daphne.server").info("GET /s/%s/ %d", token, 200)
        logging.getLogger("anything").warning(f"inline /s/{token}/download")
        logging.getLogger("django.request").warning("%(req)s", {"req": Request()})
        logging.getLogger("x").warning("%s", Request())
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0] == "GET /s/[redacted]/ 200"
    assert lines[1] == "inline /s/[redacted]/download"
    assert lines[2] == lines[3] == "<ASGIRequest: GET '/s/[redacted]/c/1/'>"


def test_installing_twice_wraps_once() -> None:
    factory = logging.getLogRecordFactory()
    logs.install()
    assert logging.getLogRecordFactory() is factory
    assert logs.redact("/s/short/") == "/s/short/"  # not a token: too short to be one


# One format for every line (docs/contract.md §5), in real daphne processes.


def serve_and_read_log(tmp_path: Path, token: str, **env: str) -> tuple[list[str], dict[str, str]]:
    """Start daphne, ask for a path under a share link that is not there (django.request
    logs a warning, daphne an access line) with a request id, and read what it wrote."""
    server = start_daphne(tmp_path, env)
    try:
        with server.client() as client:
            kept = client.get(f"/s/{token}/nowhere/", headers={"X-Request-ID": "trace-42"})
            made = client.get("/healthz", headers={"X-Request-ID": "<b hx-get=/x>"})
        assert kept.status_code in (404, 410)
    finally:
        server.stop()
    ids = {"kept": kept.headers["x-request-id"], "made": made.headers["x-request-id"]}
    return [line for line in server.log.read_text().splitlines() if line.strip()], ids


def test_json_lines_carry_time_level_logger_and_the_request_id(
    transactional_db: None, tmp_path: Path
) -> None:
    token = secrets.token_urlsafe(32)
    lines, ids = serve_and_read_log(tmp_path, token, REPLAY_LOG_FORMAT="json")
    assert ids["kept"] == "trace-42"
    assert re.fullmatch(r"[0-9a-f]{32}", ids["made"])  # a header that is no id is replaced
    records = [json.loads(line) for line in lines]  # every line, daphne's too, is JSON
    assert all({"time", "level", "logger", "message", "request_id"} <= r.keys() for r in records)
    by_logger = {r["logger"]: r for r in records if r["request_id"] == "trace-42"}
    assert by_logger["django.request"]["level"] == "WARNING"
    assert "/s/[redacted]/nowhere/" in by_logger["django.request"]["message"]
    access = [r for r in records if r["logger"] == "daphne.access"]
    assert any("/s/[redacted]/nowhere/" in r["message"] for r in access), access
    assert any(r["logger"] == "daphne.server" for r in records)
    assert token not in "\n".join(lines)


def test_text_lines_and_the_log_level(transactional_db: None, tmp_path: Path) -> None:
    token = secrets.token_urlsafe(32)
    lines, _ = serve_and_read_log(tmp_path, token, REPLAY_LOG_LEVEL="warning")
    line = re.compile(
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (WARNING|ERROR|CRITICAL) [\w.]+ \[[^\]]+\] .+"
    )
    assert lines and all(line.fullmatch(text) for text in lines), lines
    assert any("django.request [trace-42] Not Found: /s/[redacted]/nowhere/" in t for t in lines)
    assert not any("daphne.access" in text for text in lines)  # INFO, below the level
    assert token not in "\n".join(lines)


def test_a_log_setting_out_of_its_choices_stops_start_up(tmp_path: Path) -> None:
    from tests.site.test_settings import read_settings

    with pytest.raises(ImproperlyConfigured, match="REPLAY_LOG_LEVEL must be one of"):
        read_settings(tmp_path, REPLAY_LOG_LEVEL="loud")
    with pytest.raises(ImproperlyConfigured, match="REPLAY_LOG_FORMAT must be one of"):
        read_settings(tmp_path, REPLAY_LOG_FORMAT="xml")


def test_daphnes_access_interface_is_the_one_routed() -> None:
    """`route_access_log` replaces daphne's internal `write_entry`: an upgrade that renames
    it or its arguments must fail here, not leave tokens in clear on stdout."""
    from daphne.access import AccessLogGenerator

    logs.route_access_log()
    assert getattr(AccessLogGenerator.write_entry, "routed", False)
    source = inspect.getsource(AccessLogGenerator.__call__)
    assert source.count("self.write_entry(") == 5
    assert "status=details[" in source and "request=" in source


# Every spelling of a share link's path, in a real daphne's access lines and Django's
# request lines: served or not, the token is never in the log.


def spellings(token: str, conversation_id: str) -> dict[str, tuple[str, set[int]]]:
    """Name: (request target as sent, the statuses it may get). A share path is served
    whenever daphne's decoding of it is `/s/TOKEN/…`."""
    first = f"%{ord(token[0]):02X}"
    lower = "".join(f"%{ord(c):02x}" for c in token[:4])
    every = "".join(f"%{ord(c):02X}" for c in token)
    served = {200}
    return {
        "first character encoded": (f"/s/{first}{token[1:]}/", served),
        "lowercase hex": (f"/s/{lower}{token[4:]}/", served),
        "mixed-case hex": (f"/s/{token[:3]}%{ord(token[3]):02x}{every[12:]}/", served),
        "every character encoded": (f"/s/{every}/", served),
        "the segment encoded": (f"/%73/{token}/", served),
        "the slash encoded": (f"/s%2F{token}%2F", served),
        "a trailing part": (f"/s/{first}{token[1:]}/c/{conversation_id}/", served),
        "a download and a query": (f"/s/{token}/replay.json?vision=1&x=%2F", served),
        "double-encoded": (f"/s/%25{ord(token[0]):02X}{token[1:]}/", {404}),
        "a doubled slash before": (f"//s/{token}/", {404}),
        "a doubled slash after": (f"/s//{token}/", {404}),
        "a missing trailing slash": (f"/s/{first}{token[1:]}", {301, 404}),
        "somewhere it is not": (f"/s/{first}{token[1:]}/nowhere/%2e%2e/", {404}),
        "in a query": (f"/accounts/login/?next=%2Fs%2F{token}%2F", {200}),
    }


def raw_request(server: Server, target: str, headers: str = "Connection: close\r\n") -> int:
    """Send `target` exactly as written (an HTTP client would normalise it) and return the
    answer's status."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as connection:
        connection.sendall(
            f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n{headers}\r\n".encode()
        )
        head = connection.recv(65536).split(b"\r\n", 1)[0]
    return int(head.split()[1])


def written(server: Server, marker: str) -> str:
    """The server's log once its access line for `marker` is in it (lines are written in
    the order the responses finished)."""
    deadline = time.monotonic() + 10
    while marker not in (text := server.log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert marker in text
    return text


def test_no_spelling_of_a_share_path_logs_its_token(transactional_db: None, daphne: Server) -> None:
    from conversations.sharing.services import share_create
    from tests.sharing.test_share import conversation_with

    conversation = conversation_with(2)
    _, token = share_create(conversation=conversation)
    statuses = {}
    for name, (target, allowed) in spellings(token, str(conversation.id)).items():
        statuses[name] = raw_request(daphne, target)
        assert statuses[name] in allowed, (name, target, statuses[name])
    handshake = (
        "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Key: {base64.b64encode(secrets.token_bytes(16)).decode()}\r\n"
        f"Origin: http://127.0.0.1:{daphne.port}\r\n"
    )
    live = raw_request(daphne, f"/ws/s/%{ord(token[0]):02x}{token[1:]}/?vision=1", handshake)
    assert live == 101  # the share page's socket, served with its token encoded
    marker = secrets.token_hex(8)
    raw_request(daphne, f"/healthz?done={marker}")
    text = written(daphne, marker)
    pieces = {token[i : i + 10] for i in range(len(token) - 9)}
    leaked = [line for line in text.splitlines() if any(p in line for p in pieces)]
    assert leaked == [], leaked
    mine = [line for line in text.splitlines() if "[redacted]" in line and "daphne.access" in line]
    assert len(mine) >= len(statuses)  # each request has its access line, redacted
    assert any("django.request" in line and "/s/[redacted]" in line for line in text.splitlines())
    assert any("WSCONNECT" in line and "/ws/s/[redacted]" in line for line in mine)


@pytest.mark.parametrize(
    "target",
    # (`//s/…` is the daphne test's: Django's test client reads it as a host.)
    [
        "/s/%33{rest}/nowhere/",
        "/s/%2533{rest}/",
        "/s//3{rest}/",
        "/%73/3{rest}/x/",
        "/s%2F3{rest}/y",
    ],
)
def test_djangos_request_lines_are_redacted_after_decoding(
    db: None, caplog: pytest.LogCaptureFixture, target: str
) -> None:
    rest = secrets.token_urlsafe(32)
    with caplog.at_level(logging.INFO):
        response = Client().get(target.format(rest=rest))
    assert response.status_code in (404, 410)
    lines = [record.getMessage() for record in caplog.records]
    assert lines and all(rest[4:20] not in line for line in lines), lines
    assert any("[redacted]" in line for line in lines), lines


def test_redaction_is_a_function_of_the_decoded_path_a_new_route_reuses() -> None:
    token = secrets.token_urlsafe(32)
    assert logs.redact(f"GET /proxy/%{ord(token[0]):02X}{token[1:]}/v1", ("proxy",)) == (
        "GET /proxy/[redacted]/v1"
    )
    # A decoded line break stays encoded: redaction never writes what the path hid.
    assert logs.redact(f"/x%0a/s/{token}%0d") == "/x%0a/s/[redacted]%0d"
    assert logs.redact("/s/" + "%25" * 50 + "41") == "/s/" + "%25" * 50 + "41"  # no token

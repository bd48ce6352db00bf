"""No log line carries a share token (docs/contract.md §8), whoever writes it."""

from __future__ import annotations

import inspect
import json
import logging
import re
import secrets
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from replaysite import logs
from tests.conftest import start_daphne


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
    from tests.test_settings import read_settings

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

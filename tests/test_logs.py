"""No log line carries a share token (docs/contract.md §8), whoever writes it."""

from __future__ import annotations

import logging
import secrets

import pytest
from django.test import Client

from replaysite import logs


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

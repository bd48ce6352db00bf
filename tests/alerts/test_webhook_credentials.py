"""A webhook URL's credentials (docs/contract.md §11) are write-only: the sender POSTs to
the URL whole (a real receiver on 127.0.0.1 gets them as Basic auth), and no log line or
recorded attempt carries them, delivered or refused."""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterator

import pytest

from conversations.alerts.models import DeliveryAttempt
from conversations.alerts.services import alert_rule_create
from tests.alerts.test_webhooks import allow_the_receivers, deliver, fire
from tests.conftest import free_port
from tests.webhook_receiver import Receiver

pytestmark = [pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]

USER, PASSWORD = "hook-user", "hook-pass-7f3a"

__all__ = ["allow_the_receivers"]  # the receivers listen on 127.0.0.1: allowed, autouse


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def with_credentials(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{USER}:{PASSWORD}@{rest}"


def assert_nowhere(caplog: pytest.LogCaptureFixture) -> None:
    recorded = " ".join(DeliveryAttempt.objects.values_list("error", flat=True))
    for text in (caplog.text, recorded):
        assert PASSWORD not in text and USER not in text


def test_a_delivery_uses_the_credentials_and_logs_none(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    rule = alert_rule_create(kind="tool_error", webhook_url=with_credentials(receiver.url))
    fire(rule)
    deliver(1)
    (got,) = receiver.received
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    assert got.headers["authorization"] == f"Basic {basic}"
    assert_nowhere(caplog)


def test_a_refused_delivery_logs_no_credentials(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    url = with_credentials(f"http://127.0.0.1:{free_port()}/hook")  # nothing listens there
    rule = alert_rule_create(kind="tool_error", webhook_url=url)
    fire(rule)
    deliver(1)
    (attempt,) = DeliveryAttempt.objects.all()
    assert attempt.status_code is None and attempt.error
    assert attempt.error in caplog.text  # the failure is logged, as recorded
    assert_nowhere(caplog)

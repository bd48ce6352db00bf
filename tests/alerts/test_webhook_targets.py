"""Webhook targets (docs/contract.md §11): loopback, private, link-local and unspecified
addresses are refused at send time, every address the name resolves to, resolved once and
connected to as checked; `REPLAY_WEBHOOK_ALLOW_HOSTS` lets receivers inside the network
through. Against a real receiver on 127.0.0.1, which every refused spelling would reach."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from conversations.alerts import loop as alert_loop
from conversations.alerts import webhooks
from conversations.alerts.models import Delivery, DeliveryAttempt
from conversations.alerts.services import alert_rule_create
from conversations.core import alerts as core
from tests.alerts.test_webhooks import deliver, fire
from tests.webhook_receiver import Receiver

pytestmark = [pytest.mark.sqlite]

# Names only this test's resolver knows: as a nip.io-style name or a rebinding DNS answers.
TEST_NAMES = {
    "127.0.0.1.nip.test": ["127.0.0.1"],
    "rebind.test": ["93.184.215.14", "127.0.0.1"],  # one public address, one loopback
    "hooks.internal": ["127.0.0.1"],
}


class Resolver:
    """The system's resolver, but for TEST_NAMES; counts the names it is asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if host in TEST_NAMES:
            return TEST_NAMES[host]
        return await alert_loop.system_resolver(host, port)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def send(url: str, resolver: Resolver | None = None) -> tuple[int | None, str]:
    """One attempt to `url`, as the sender makes it: (status, error)."""
    claimed = webhooks.Claimed(str(uuid.uuid4()), 1, url, b"{}", "secret", timezone.now())

    async def run() -> tuple[int | None, str]:
        async with alert_loop.client(resolver=resolver or Resolver()) as http:
            outcome = await alert_loop.attempt(http, claimed)
            return outcome.status_code, outcome.error

    return asyncio.run(run())


LOOPBACK_SPELLINGS = [
    "127.0.0.1",
    "127.1",
    "127.0.1",
    "127.255.255.254",
    "0x7f000001",
    "0x7f.0.0.1",
    "2130706433",
    "017700000001",
    "[::1]",
    "[0:0:0:0:0:0:0:1]",
    "[::ffff:127.0.0.1]",
    "[::ffff:7f00:1]",
    "0",
    "0.0.0.0",
    "[::]",
    "localhost",
    "LocalHost",
    "127.0.0.1.nip.test",
    "rebind.test",
]


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_every_spelling_of_loopback_is_refused(
    receiver: Receiver, settings: Any, host: str
) -> None:
    settings.REPLAY_WEBHOOK_ALLOW_HOSTS = core.allow_hosts("")
    before = len(receiver.received)
    status, error = send(f"http://{host}:{receiver.port}/hook")
    assert status is None and error.startswith("refused: "), error
    assert "address" in error and "REPLAY_WEBHOOK_ALLOW_HOSTS" in error
    assert len(receiver.received) == before


@pytest.mark.parametrize("host", ["0177.0.0.1", "127.000.000.001"])
def test_a_spelling_the_client_cannot_parse_fails_without_a_request(
    receiver: Receiver, host: str
) -> None:
    """Made before creation checked URLs (creation refuses them now: test_alerts.py)."""
    before = len(receiver.received)
    status, error = send(f"http://{host}:{receiver.port}/hook")
    assert status is None and error.startswith("InvalidURL: Invalid IPv4 address"), error
    assert len(receiver.received) == before


@pytest.mark.parametrize(
    "address",
    ["10.0.0.5", "172.16.3.4", "192.168.1.1", "169.254.169.254", "fe80::1", "fc00::5"],
)
def test_private_and_link_local_addresses_are_refused(address: str) -> None:
    refused = core.target_refused("metadata.test", [address], core.allow_hosts(""))
    assert refused.startswith("refused: metadata.test is ")
    assert core.target_refused("example.com", ["93.184.215.14"], core.allow_hosts("")) == ""


@pytest.mark.parametrize(
    ("allowed", "host"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("127.0.0.0/8", "127.1"),
        ("10.0.0.0/8, 127.0.0.1", "127.0.0.1.nip.test"),
        ("hooks.internal", "hooks.internal"),
        ("HOOKS.internal.", "hooks.internal"),
    ],
)
def test_the_allow_list_lets_a_receiver_inside_the_network_through(
    receiver: Receiver, settings: Any, allowed: str, host: str
) -> None:
    settings.REPLAY_WEBHOOK_ALLOW_HOSTS = core.allow_hosts(allowed)
    before = len(receiver.received)
    assert send(f"http://{host}:{receiver.port}/hook") == (200, "")
    (request,) = receiver.received[before:]
    assert request.headers["host"] == f"{host}:{receiver.port}"  # named as the URL names it


def test_the_name_is_resolved_once_and_the_checked_address_connected_to(
    receiver: Receiver, settings: Any
) -> None:
    """hooks.internal exists only in the test's resolver: had the HTTP client resolved it
    again, the connection would have failed (and a rebinding answer could have passed)."""
    settings.REPLAY_WEBHOOK_ALLOW_HOSTS = core.allow_hosts("127.0.0.0/8")
    resolver = Resolver()
    assert send(f"http://hooks.internal:{receiver.port}/hook", resolver) == (200, "")
    assert resolver.asked == ["hooks.internal"]


def test_an_allowed_network_does_not_let_the_other_addresses_of_a_name_through(
    settings: Any,
) -> None:
    settings.REPLAY_WEBHOOK_ALLOW_HOSTS = core.allow_hosts("93.184.215.0/24")
    status, error = send("http://rebind.test/hook")
    assert status is None and error.startswith("refused: rebind.test is 127.0.0.1, a loopback")


@pytest.mark.django_db(transaction=True)
def test_a_refused_attempt_is_recorded_as_failed_with_the_reason(
    receiver: Receiver, settings: Any
) -> None:
    settings.REPLAY_WEBHOOK_ALLOW_HOSTS = core.allow_hosts("")
    before = len(receiver.received)
    rule = alert_rule_create(kind="tool_error", webhook_url=receiver.url)
    alert = fire(rule)
    deliver(1)
    (attempt,) = DeliveryAttempt.objects.all()
    assert attempt.status_code is None
    assert attempt.error.startswith("refused: 127.0.0.1 is 127.0.0.1, a loopback address")
    delivery = Delivery.objects.get(alert=alert)
    assert delivery.state == "pending" and delivery.last_error == attempt.error  # retried
    assert len(receiver.received) == before


@pytest.mark.parametrize("value", ["hooks internal", "10.0.0.0/33", "*", "http://x", "0"])
def test_a_malformed_allow_list_stops_start_up(tmp_path: Path, value: str) -> None:
    from tests.site.test_settings import read_settings

    with pytest.raises(ImproperlyConfigured, match="REPLAY_WEBHOOK_ALLOW_HOSTS must list"):
        read_settings(tmp_path, REPLAY_WEBHOOK_ALLOW_HOSTS=value)
    allowed = read_settings(tmp_path, REPLAY_WEBHOOK_ALLOW_HOSTS="a.internal, 10.0.0.0/8")
    assert allowed["REPLAY_WEBHOOK_ALLOW_HOSTS"] == core.allow_hosts("10.0.0.0/8,a.internal")

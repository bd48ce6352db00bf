"""Webhooks (docs/contract.md §11) against a real receiver on 127.0.0.1: signed bodies,
the same delivery id on every attempt, doubling retries, a 10 s timeout, redirects not
followed; delivered by real daphne servers, after a restart and from two processes
sharing one PostgreSQL database (each attempt made once)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import re
import textwrap
import threading
import time
import tracemalloc
import uuid
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import Client
from django.utils import timezone
from prometheus_client import REGISTRY

from conversations.alerts import loop as alert_loop
from conversations.alerts.models import Alert, Delivery, DeliveryAttempt
from conversations.alerts.services import alert_rule_create
from conversations.core import alerts as core
from conversations.record.schemas import BLOCK_ADAPTER
from conversations.record.services.api_tokens import api_token_create
from conversations.record.services.appending import message_append
from conversations.record.services.conversations import conversation_create
from tests import services as found
from tests.builders import tool_result
from tests.conftest import Server, free_port, start_daphne
from tests.redis_server import RedisServer, available
from tests.webhook_receiver import Received, Receiver

pytestmark = [pytest.mark.sqlite, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def allow_the_receivers(settings: Any) -> None:
    """The receivers here listen on 127.0.0.1, which only the allow-list lets through."""
    settings.REPLAY_WEBHOOK_ALLOW_HOSTS = core.allow_hosts("127.0.0.1")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def fire(rule: Any, title: str = "agent run") -> Alert:
    """A tool error in a new conversation: the rule's alert, evaluated after commit."""
    conversation = conversation_create(title=title)
    message_append(
        conversation=conversation,
        role="user",
        blocks=[BLOCK_ADAPTER.validate_python(tool_result("t", "boom", is_error=True))],
    )
    return Alert.objects.get(rule=rule, conversation=conversation)


def deliver(attempts: int, seconds: float = 30) -> None:
    """Run the server's sender until this many attempts are recorded."""

    async def run() -> None:
        deadline = time.monotonic() + seconds
        async with alert_loop.client() as http:
            while await alert_loop.in_thread(DeliveryAttempt.objects.count) < attempts:
                assert time.monotonic() < deadline, "the attempts were not made in time"
                if not await alert_loop.deliver_due(http):
                    await asyncio.sleep(0.1)

    asyncio.run(run())


def signed(secret: str, request: Received) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(request.headers["x-replay-signature"], expected)


def test_an_alert_is_posted_as_signed_json_with_its_delivery_id(receiver: Receiver) -> None:
    rule = alert_rule_create(kind="tool_error", webhook_url=receiver.url)
    alert = fire(rule)
    deliver(1)
    (request,) = receiver.received
    assert request.path == "/hook" and request.headers["content-type"] == "application/json"
    assert signed(rule.secret, request)
    assert not signed("another secret", request)
    body = orjson.loads(request.body)
    assert body["id"] == alert.pk and body["rule"] == rule.pk and body["kind"] == "tool_error"
    assert body["conversation"] == str(alert.conversation_id) and body["seq"] == 0
    assert body["detail"] == alert.detail and body["fired_at"] == alert.fired_at.isoformat()
    delivery = Delivery.objects.get(alert=alert)
    assert request.headers["x-replay-delivery"] == str(delivery.pk)
    assert delivery.state == "delivered" and delivery.next_attempt_at is None
    (attempt,) = DeliveryAttempt.objects.all()
    assert attempt.status_code == 200 and attempt.error == "" and attempt.number == 1


def test_a_receivers_url_never_reaches_the_log(
    receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    """Many receivers' URLs are their credential (a chat service's incoming webhook): the
    HTTP client's own INFO line per request would write it into every delivery's log."""
    rule = alert_rule_create(kind="tool_error", webhook_url=receiver.url + "?key=s3cret")
    fire(rule)
    deliver(1)
    assert len(receiver.received) == 1
    assert "s3cret" not in caplog.text and receiver.url not in caplog.text


def test_a_receiver_that_fails_twice_gets_it_on_the_third_attempt(settings: Any) -> None:
    settings.REPLAY_WEBHOOK_RETRY_SECONDS = 1
    receiver = Receiver(lambda request, seen: (500 if seen < 2 else 204, {}))
    counted_before = {outcome: attempts_counted(outcome) for outcome in ("pending", "delivered")}
    try:
        rule = alert_rule_create(kind="tool_error", webhook_url=receiver.url)
        alert = fire(rule)
        deliver(3)
        first, second, third = receiver.received
    finally:
        receiver.stop()
    assert first.body == second.body == third.body
    ids = {r.headers["x-replay-delivery"] for r in (first, second, third)}
    assert ids == {str(Delivery.objects.get(alert=alert).pk)}
    assert all(signed(rule.secret, r) for r in (first, second, third))
    assert second.at - first.at >= 0.9  # the first retry waits REPLAY_WEBHOOK_RETRY_SECONDS…
    assert third.at - second.at >= 1.9  # …and the next twice as long
    attempts = list(DeliveryAttempt.objects.values_list("number", "status_code", "error"))
    assert attempts == [(1, 500, "answered 500"), (2, 500, "answered 500"), (3, 204, "")]
    assert Delivery.objects.get(alert=alert).state == "delivered"
    # /metrics (docs/contract.md §5) counts each attempt by what it left the delivery as.
    assert attempts_counted("pending") - counted_before["pending"] == 2
    assert attempts_counted("delivered") - counted_before["delivered"] == 1


def attempts_counted(outcome: str) -> float:
    found = REGISTRY.get_sample_value("replay_webhook_attempts_total", {"outcome": outcome})
    return found or 0.0


def test_a_receiver_that_hangs_is_given_up_on_after_10_seconds() -> None:
    receiver = Receiver(lambda request, seen: (0, {}))
    try:
        rule = alert_rule_create(kind="tool_error", webhook_url=receiver.url)
        alert = fire(rule)
        started = time.monotonic()
        deliver(1, seconds=20)
        took = time.monotonic() - started
    finally:
        receiver.stop()
    assert core.TIMEOUT_SECONDS - 0.5 <= took < core.TIMEOUT_SECONDS + 3
    (attempt,) = DeliveryAttempt.objects.all()
    assert attempt.status_code is None and "no answer within 10 s" in attempt.error
    delivery = Delivery.objects.get(alert=alert)
    assert delivery.state == "pending" and delivery.next_attempt_at is not None
    wait = delivery.next_attempt_at - timezone.now()
    assert timedelta(seconds=20) < wait <= timedelta(seconds=30)  # retried after 30 s


def test_a_redirect_is_not_followed_and_counts_as_a_failure(receiver: Receiver) -> None:
    receiver.answer = lambda request, seen: (
        (302, {"Location": "/elsewhere"}) if request.path == "/hook" else (200, {})
    )
    rule = alert_rule_create(kind="tool_error", webhook_url=receiver.url)
    alert = fire(rule)
    deliver(1)
    time.sleep(0.3)
    assert [r.path for r in receiver.received] == ["/hook"]
    (attempt,) = DeliveryAttempt.objects.all()
    assert attempt.status_code == 302 and "not followed" in attempt.error
    assert Delivery.objects.get(alert=alert).state == "pending"


def test_a_refused_connection_is_an_attempt_that_failed() -> None:
    port = free_port()  # nothing listens there
    rule = alert_rule_create(kind="tool_error", webhook_url=f"http://127.0.0.1:{port}/hook")
    alert = fire(rule)
    deliver(1)
    (attempt,) = DeliveryAttempt.objects.all()
    assert attempt.status_code is None and attempt.error
    assert Delivery.objects.get(alert=alert).state == "pending"


def test_retries_stop_24_hours_after_the_alert_fired() -> None:
    fired = timezone.now()
    waits = []
    now, attempts = fired, 1
    while (when := core.next_attempt(fired, attempts, 30, now)) is not None:
        waits.append((when - now).total_seconds())
        now, attempts = when, attempts + 1
    assert waits[:4] == [30, 60, 120, 240]
    assert now <= fired + timedelta(hours=24) < now + timedelta(seconds=waits[-1] * 2)


def test_every_attempt_is_listed_in_the_admin_and_an_operator_redelivers(
    admin_client: Client,
) -> None:
    port = free_port()
    rule = alert_rule_create(kind="tool_error", webhook_url=f"http://127.0.0.1:{port}/h")
    alert = fire(rule, title="<script>alert(1)</script>")
    deliver(1)
    delivery = Delivery.objects.get(alert=alert)
    Delivery.objects.filter(pk=delivery.pk).update(
        next_attempt_at=timezone.now() + timedelta(hours=1)
    )
    page = admin_client.get(f"/admin/conversations/delivery/{delivery.pk}/change/")
    assert page.status_code == 200
    text = page.content.decode()
    attempt = DeliveryAttempt.objects.get()
    assert attempt.error[:30] in text.replace("&#x27;", "'") and "<script>alert(1)" not in text
    listed = admin_client.get("/admin/conversations/delivery/").content.decode()
    assert str(delivery.pk) in listed and "pending" in listed
    answer = admin_client.post(
        "/admin/conversations/delivery/",
        {"action": "redeliver", "_selected_action": [str(delivery.pk)]},
    )
    assert answer.status_code == 302
    delivery.refresh_from_db()
    assert delivery.state == "pending" and delivery.next_attempt_at <= timezone.now()
    assert admin_client.get("/admin/conversations/alert/").status_code == 200
    assert admin_client.get("/admin/conversations/alertrule/").status_code == 200


def test_a_rule_made_in_the_admin_shows_its_secret_once(admin_client: Client) -> None:
    answer = admin_client.post(
        "/admin/conversations/alertrule/add/",
        {"kind": "pressure", "threshold_percent": "90", "webhook_url": "https://example.com/h"},
        follow=True,
    )
    from conversations.alerts.models import AlertRule

    rule = AlertRule.objects.get()
    assert rule.threshold_percent == 90 and rule.secret in answer.content.decode()
    assert rule.secret not in admin_client.get("/admin/conversations/alertrule/").content.decode()


# -- in real servers ------------------------------------------------------------------------------


def server_env(**extra: str) -> dict[str, str]:
    return {
        "REPLAY_ALERT_TICK_SECONDS": "1",
        "REPLAY_WEBHOOK_RETRY_SECONDS": "1",
        "REPLAY_WEBHOOK_ALLOW_HOSTS": "127.0.0.1",
    } | extra


def wait_until(check: Any, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.1)


def api_append(server: Server, token: str, conversation_id: str, block: dict[str, Any]) -> None:
    with server.client(token) as http:
        answer = http.post(
            f"/api/conversations/{conversation_id}/messages",
            json={
                "role": "assistant" if block["type"] == "tool_use" else "user",
                "blocks": [block],
            },
        )
        assert answer.status_code == 201, answer.text


def test_unanswered_fires_in_the_server_when_nothing_is_written(
    tmp_path: Path, receiver: Receiver
) -> None:
    _, token = api_token_create(label="agent")
    rule = alert_rule_create(kind="unanswered", after_seconds=1, webhook_url=receiver.url)
    conversation = conversation_create(title="waiting run")
    server = start_daphne(tmp_path, server_env())
    try:
        api_append(
            server,
            token,
            str(conversation.pk),
            {"type": "tool_use", "id": "t1", "name": "ls", "input": {}},
        )
        assert not Alert.objects.exists()  # not inside the request, nor before it waited
        wait_until(lambda: Alert.objects.filter(rule=rule).exists())
        (request,) = receiver.wait_for(1)
    finally:
        server.stop()
    assert signed(rule.secret, request)
    assert orjson.loads(request.body)["kind"] == "unanswered"


def test_a_server_told_not_to_send_fires_the_alert_and_leaves_its_delivery_to_others(
    tmp_path: Path, receiver: Receiver
) -> None:
    """REPLAY_WEBHOOK_SENDER=0 (the test suite's shared server has it, so that it never
    takes the deliveries these tests make in their own process)."""
    _, token = api_token_create(label="agent")
    rule = alert_rule_create(kind="tool_error", webhook_url=receiver.url)
    conversation = conversation_create(title="quiet server")
    server = start_daphne(tmp_path, server_env(REPLAY_WEBHOOK_SENDER="0"))
    try:
        api_append(server, token, str(conversation.pk), tool_result("t", "boom", is_error=True))
        wait_until(lambda: Delivery.objects.filter(alert__rule=rule).exists())
        time.sleep(2.5)  # two of its ticks: a sender would have claimed it by now
        assert receiver.received == [] and not DeliveryAttempt.objects.exists()
    finally:
        server.stop()
    deliver(1)  # another process (this one) sends it
    assert Delivery.objects.get(alert__rule=rule).state == "delivered"
    assert len(receiver.received) == 1


def test_a_pending_delivery_survives_a_restart(tmp_path: Path) -> None:
    port = free_port()
    _, token = api_token_create(label="agent")
    rule = alert_rule_create(kind="tool_error", webhook_url=f"http://127.0.0.1:{port}/hook")
    conversation = conversation_create(title="restarted run")
    server = start_daphne(tmp_path, server_env(REPLAY_WEBHOOK_RETRY_SECONDS="3"))
    try:
        api_append(server, token, str(conversation.pk), tool_result("t", "boom", is_error=True))
        wait_until(lambda: DeliveryAttempt.objects.exists())  # refused: nothing listens yet
    finally:
        server.stop()
    delivery = Delivery.objects.get(alert__rule=rule)
    assert delivery.state == "pending" and delivery.attempts == 1
    receiver = Receiver(port=port)
    try:
        again = start_daphne(tmp_path, server_env(REPLAY_WEBHOOK_RETRY_SECONDS="3"))
        try:
            (request,) = receiver.wait_for(1)  # no request to the server starts it
            wait_until(lambda: Delivery.objects.get(pk=delivery.pk).state == "delivered")
        finally:
            again.stop()
    finally:
        receiver.stop()
    assert request.headers["x-replay-delivery"] == str(delivery.pk) and signed(rule.secret, request)
    assert list(DeliveryAttempt.objects.values_list("number", "status_code")) == [
        (1, None),
        (2, 200),
    ]


@pytest.fixture
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if django_settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        pytest.skip("two processes share PostgreSQL: this runs in the PostgreSQL pass")
    if found.postgres_url() is None or not available():
        if found.required():
            pytest.fail("REPLAY_REQUIRE_SERVICES=1 but PostgreSQL or Redis is missing")
        pytest.skip("PostgreSQL and redis-server are needed")
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


def test_two_servers_make_each_attempt_once(tmp_path: Path, redis: RedisServer) -> None:
    # Each delivery fails once, then succeeds: two attempts each, whichever process makes them.
    receiver = Receiver(lambda request, seen: (503 if seen == 0 else 200, {}))
    env = server_env(REDIS_URL=redis.url)
    with ThreadPoolExecutor(2) as pool:
        starting = [pool.submit(start_daphne, tmp_path, env) for _ in range(2)]
    servers = [s.result() for s in starting]
    try:
        rule = alert_rule_create(kind="tool_error", webhook_url=receiver.url)
        for n in range(40):
            fire(rule, title=f"run {n}")  # stored here; both servers' senders find them
        received = receiver.wait_for(80, seconds=60)
        wait_until(lambda: Delivery.objects.filter(state="delivered").count() == 40, 30)
        time.sleep(2.5)  # a second attempt of anything would come within this
    finally:
        for server in servers:
            server.stop()
        receiver.stop()
    received = list(receiver.received)
    per_delivery: dict[str, int] = {}
    for request in received:
        key = request.headers["x-replay-delivery"]
        per_delivery[key] = per_delivery.get(key, 0) + 1
    assert len(per_delivery) == 40 and set(per_delivery.values()) == {2}
    attempts = list(DeliveryAttempt.objects.values_list("delivery_id", "number", "error"))
    assert len(attempts) == 80, [a for a in attempts if a[2] and "503" not in a[2]]
    assert {number for _, number, _ in attempts} == {1, 2}


def test_delivery_is_never_inside_the_request_that_caused_it(tmp_path: Path) -> None:
    receiver = Receiver(lambda request, seen: (0, {}))  # hangs: an attempt takes 10 s
    _, token = api_token_create(label="agent")
    rule = alert_rule_create(kind="tool_error", webhook_url=receiver.url)
    conversation = conversation_create(title="busy run")
    server = start_daphne(tmp_path, server_env())
    try:
        started = time.monotonic()
        api_append(server, token, str(conversation.pk), tool_result("t", "boom", is_error=True))
        answered = time.monotonic() - started
        (request,) = receiver.wait_for(1)
        assert request.at - started < 5  # sent at once after the commit…
        assert answered < 2  # …while the request that caused it had answered already
        assert Alert.objects.filter(rule=rule).count() == 1
    finally:
        server.stop()
        receiver.stop()


# -- one delivery's failure, a receiver's answer, a rule deleted meanwhile -------------------------


def test_one_deliverys_failure_is_its_attempts_error_and_never_touches_anothers(
    receiver: Receiver,
) -> None:
    """A URL the HTTP client cannot parse (stored before creation checked it, say) is that
    attempt's error; the other deliveries of its batch are sent and recorded."""
    good = alert_rule_create(kind="tool_error", match="good", webhook_url=receiver.url)
    bad = alert_rule_create(kind="tool_error", match="bad", webhook_url=receiver.url)
    fire(good, title="good run")
    broken = fire(bad, title="bad run")
    Delivery.objects.filter(alert=broken).update(url="http://0177.0.0.1:8204/")
    deliver(2)
    assert len(receiver.received) == 1
    failed = DeliveryAttempt.objects.get(delivery__alert=broken)
    assert failed.status_code is None and "InvalidURL" in failed.error
    assert Delivery.objects.get(alert=broken).state == "pending"  # retried, not leased
    assert Delivery.objects.get(alert__rule=good).state == "delivered"


def test_a_rule_with_a_url_the_sender_cannot_parse_is_refused_in_the_admin(
    admin_client: Client,
) -> None:
    from conversations.alerts.models import AlertRule

    answer = admin_client.post(
        "/admin/conversations/alertrule/add/",
        {"kind": "tool_error", "webhook_url": "http://0177.0.0.1:8204/"},
    )
    assert answer.status_code == 200  # the form again, with the error on the field
    assert "not a valid URL" in answer.content.decode() and not AlertRule.objects.exists()


GZIP_BOMB_BYTES = 256 * 1024 * 1024  # decompressed; about 250 KB on the wire


def gzip_bomb() -> Iterator[bytes]:
    """GZIP_BOMB_BYTES of zeros, gzipped as it is sent (never held whole)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1024 * 1024)
    for _ in range(GZIP_BOMB_BYTES // len(zeros)):
        if chunk := packer.compress(zeros):
            yield chunk
    yield packer.flush()


def test_a_receivers_answer_is_read_only_a_few_kb_and_never_decompressed(
    receiver: Receiver,
) -> None:
    receiver.answer = lambda request, seen: (200, {"Content-Encoding": "gzip"})
    receiver.body = gzip_bomb
    rule = alert_rule_create(kind="tool_error", webhook_url=receiver.url)
    alert = fire(rule)
    tracemalloc.start()
    try:
        deliver(1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, f"{peak / 2**20:.0f} MB held while sending one delivery"
    assert Delivery.objects.get(alert=alert).state == "delivered"


def test_a_rule_deleted_while_its_attempts_are_in_flight(receiver: Receiver) -> None:
    """The DELETE answers 204 while the sender records a batch holding the rule's attempts
    and the rule fires again; each attempt is recorded or its delivery is gone with the
    rule, never left leased to be sent again.

    Three threads on the database: the sender's, the DELETE's, and one appending an error
    the rule would fire on, both let go (by a pre_delete receiver) after Django collected
    what the DELETE deletes."""
    from django.db.models.signals import pre_delete

    _, token = api_token_create(label="operator")
    answering = threading.Event()
    receiver.answer = lambda request, seen: (answering.wait(10) and 200, {})
    doomed = alert_rule_create(kind="tool_error", match="doomed", webhook_url=receiver.url)
    kept = alert_rule_create(kind="tool_error", match="kept", webhook_url=receiver.url)
    for n in range(3):
        fire(doomed, title=f"doomed run {n}")
        fire(kept, title=f"kept run {n}")
    with ThreadPoolExecutor(2) as pool:
        sending = pool.submit(deliver_one_batch)
        receiver.wait_for(6)  # every attempt is in flight

        def meanwhile(sender: Any, **kwargs: Any) -> None:
            if answering.is_set():
                return
            answering.set()
            firing = pool.submit(in_own_connection, partial(fire, doomed, "doomed run late"))
            for job in (sending, firing):  # done, or waiting for this DELETE
                with contextlib.suppress(Exception):
                    job.result(timeout=1.5)

        pre_delete.connect(meanwhile, sender=Delivery, weak=False)
        try:
            answer = Client().delete(
                f"/api/alert-rules/{doomed.pk}", headers={"Authorization": f"Bearer {token}"}
            )
        finally:
            pre_delete.disconnect(meanwhile, sender=Delivery)
        assert answer.status_code == 204, answer.content
        assert sending.result(timeout=10) == 6
    assert not Alert.objects.filter(rule_id=doomed.pk).exists()
    assert not Delivery.objects.filter(alert__rule_id=doomed.pk).exists()
    kept_deliveries = Delivery.objects.filter(alert__rule=kept)
    assert [d.state for d in kept_deliveries] == ["delivered"] * 3
    assert DeliveryAttempt.objects.filter(delivery__alert__rule=kept).count() == 3
    assert len(receiver.received) == 6  # and none re-sent


def deliver_one_batch() -> int:
    async def run() -> int:
        async with alert_loop.client() as http:
            return await alert_loop.deliver_due(http)

    return asyncio.run(run())


def in_own_connection(work: Any) -> None:
    try:
        work()
    finally:
        connection.close()


def test_a_delivery_is_signed_with_its_timestamp_and_id_so_a_replay_is_refused(
    receiver: Receiver,
) -> None:
    """X-Replay-Signature-V2 (docs/contract.md §11), checked by the receiver's snippet the
    contract gives, with its tolerance."""
    rule = alert_rule_create(kind="tool_error", webhook_url=receiver.url)
    fire(rule)
    before = int(time.time())
    deliver(1)
    (request,) = receiver.received
    assert signed(rule.secret, request)  # the first signature is kept as it was
    timestamp = int(request.headers["x-replay-timestamp"])
    assert before <= timestamp <= time.time()
    verify = contract_verifier()
    delivery_id = request.headers["x-replay-delivery"]
    v2 = request.headers["x-replay-signature-v2"]
    signed_v2 = f"{timestamp}.{delivery_id}.".encode() + request.body
    expected = hmac.new(rule.secret.encode(), signed_v2, hashlib.sha256).hexdigest()
    assert v2 == f"t={timestamp},v1={expected}"
    assert verify(rule.secret, request.headers, request.body, now=timestamp + 1)
    changed = request.headers | {"x-replay-delivery": str(uuid.uuid4())}
    assert not verify(rule.secret, changed, request.body, now=timestamp + 1)
    assert not verify(rule.secret, request.headers, request.body + b" ", now=timestamp + 1)
    assert not verify("another secret", request.headers, request.body, now=timestamp + 1)
    assert verify(rule.secret, request.headers, request.body, now=timestamp + 299)
    assert not verify(rule.secret, request.headers, request.body, now=timestamp + 301)


def contract_verifier() -> Any:
    """The receiver's check as docs/contract.md §11 gives it (its `verify`)."""
    contract = (Path(__file__).parents[2] / "docs" / "contract.md").read_text()
    snippet = re.search(r"```python\n( *# verify a delivery\n.*?)```", contract, re.S)
    assert snippet, "docs/contract.md §11 gives the receiver's check"
    found: dict[str, Any] = {}
    exec(textwrap.dedent(snippet[1]), found)  # noqa: S102 (our own docs' snippet)
    return found["verify"]

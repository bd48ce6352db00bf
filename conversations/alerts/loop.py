"""The alert loop (docs/contract.md §11): what each server process runs beside its sockets,
started with the server (nothing else to start).

Two tasks on the server's event loop. The evaluator takes the appends handed over after
commit (`submit`, merged per conversation) and evaluates their rules, and every tick fires
the `unanswered` clocks that are due, so those fire also when nothing is written. The
sender claims due webhook deliveries (alerts/webhooks.py: each attempt once, across
processes) and POSTs them with httpx: 10 s at most, redirects not followed, HMAC-signed.
Database work runs in executor threads, never on the loop nor in a request's thread.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

import httpx2
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections, transaction
from django.dispatch import receiver
from django.utils import timezone

from conversations.alerts import services as alerts
from conversations.alerts import webhooks
from conversations.core import alerts as core
from conversations.record import signals
from conversations.record.server_loop import server_loop

log = logging.getLogger(__name__)
T = TypeVar("T")
USER_AGENT = "Replay-Webhooks/1"
# Appends of one conversation within this many seconds are evaluated once, together: a busy
# agent costs its conversation's rules a few evaluations a second, not one per append.
EVALUATE_GATHER = 0.25
ATTEMPTS_PER_SECOND = 10  # per process, on average over a batch
# A conversation's `pressure` rules are evaluated at most this often (their figure is
# counted over the conversation until the per-message figures kept at ingest replace it).
PRESSURE_EVERY = 2.0
# Of a receiver's answer this much of its body is read at most (raw, never decompressed: a
# gzip bomb stays a few KB); the start of a failure's is kept in its attempt's error.
ANSWER_BYTES = 4096
ANSWER_SHOWN_CHARS = 200


async def in_thread(function: Callable[[], T]) -> T:
    """Run database work in an executor thread with connections of its own, closed after
    (not the requests' threads: a slow evaluation never holds a page up)."""

    def run() -> T:
        close_old_connections()
        try:
            return function()
        finally:
            close_old_connections()

    return await sync_to_async(run, thread_sensitive=False)()


class AlertLoop:
    """One server event loop's evaluator and sender."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.waiting: dict[str, alerts.Change] = {}
        self.turns = core.PressureTurns(loop.time, PRESSURE_EVERY)
        self.evaluate_soon = asyncio.Event()
        self.send_soon = asyncio.Event()
        self.tasks = [loop.create_task(self.evaluator())]
        if settings.REPLAY_WEBHOOK_SENDER:  # else other processes send this one's deliveries
            self.tasks.append(loop.create_task(self.sender()))

    def submit(self, change: alerts.Change) -> None:
        held = self.waiting.get(change.conversation_id)
        self.waiting[change.conversation_id] = held.merged(change) if held else change
        self.evaluate_soon.set()

    def take(self) -> list[alerts.Change]:
        """The changes to evaluate now: every waiting one (its pressure only when its turn
        has come; else later), and the deferred pressure checks whose turn has come."""
        waiting, self.waiting = self.waiting, {}
        now, came = self.turns.take(waiting)
        taken = [replace(change, pressure=cid in now) for cid, change in waiting.items()]
        taken += [alerts.Change(cid, 0, 0, pressure=True, others=False) for cid in sorted(came)]
        return taken

    async def evaluator(self) -> None:
        while True:
            await _wait(self.evaluate_soon, settings.REPLAY_ALERT_TICK_SECONDS)
            await asyncio.sleep(EVALUATE_GATHER)  # what the next moment appends comes along
            changes = self.take()
            try:
                await in_thread(partial(_evaluate, changes))
            except Exception:
                log.exception("could not evaluate alerts")

    async def sender(self) -> None:
        async with client() as http:
            while True:
                try:
                    sent = await deliver_due(http)
                except Exception:
                    log.exception("could not claim webhook deliveries")
                    sent = 0
                if sent < webhooks.CLAIM_BATCH:  # none left due: wait for more
                    await _wait(self.send_soon, settings.REPLAY_ALERT_TICK_SECONDS)


# A host and port → the addresses they resolve to (tests give a resolver of their own).
Resolver = Callable[[str, int], Awaitable[list[str]]]


async def system_resolver(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class TargetRefused(Exception):
    """The target is not a public address, nor allowed (the message says which)."""


class CheckedTransport(httpx2.AsyncBaseTransport):
    """Resolves each request's host once, refuses it unless every address it resolves to
    is public or allowed (`REPLAY_WEBHOOK_ALLOW_HOSTS`), and connects to the address it
    checked: the name is not resolved again, so a rebinding DNS answer does not pass. TLS
    still names and verifies the host (httpcore's `sni_hostname`)."""

    def __init__(self, resolver: Resolver) -> None:
        self.resolver = resolver
        # No connection kept: one to an address is not reused for another name there.
        self.inner = httpx2.AsyncHTTPTransport(
            trust_env=False, limits=httpx2.Limits(max_keepalive_connections=0)
        )

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        host = url.raw_host.decode("ascii")
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            addresses = await self.resolver(host, port)
        except OSError as exc:
            raise httpx2.ConnectError(f"{host} does not resolve: {exc}", request=request) from exc
        refused = core.target_refused(host, addresses, settings.REPLAY_WEBHOOK_ALLOW_HOSTS)
        if refused:
            raise TargetRefused(refused)
        checked = httpx2.Request(
            request.method,
            url.copy_with(host=addresses[0]),
            headers=request.headers,  # its Host names the host, as the URL did
            stream=request.stream,
            extensions=request.extensions | {"sni_hostname": host},
        )
        return await self.inner.handle_async_request(checked)

    async def aclose(self) -> None:
        await self.inner.aclose()


def client(*, resolver: Resolver = system_resolver) -> httpx2.AsyncClient:
    """The webhooks' HTTP client: redirects are not followed, no proxy from the environment,
    targets checked as they are connected to (CheckedTransport)."""
    return httpx2.AsyncClient(
        follow_redirects=False,
        timeout=core.TIMEOUT_SECONDS,
        headers={"User-Agent": USER_AGENT},
        transport=CheckedTransport(resolver),
        trust_env=False,
    )


async def deliver_due(http: httpx2.AsyncClient) -> int:
    """Claim the due deliveries (one batch), attempt them together, record how each went
    in one transaction; how many. At most ATTEMPTS_PER_SECOND on average: a receiver that
    is down with many deliveries waiting takes little from the requests served meanwhile."""
    started = time.monotonic()
    claimed = await in_thread(webhooks.deliveries_claim)
    if not claimed:
        return 0
    outcomes = await asyncio.gather(*(attempt(http, c) for c in claimed))
    try:
        await in_thread(partial(webhooks.deliveries_attempted, outcomes))
    except Exception:
        log.exception("could not record %d webhook attempts", len(outcomes))
    pause = len(claimed) / ATTEMPTS_PER_SECOND - (time.monotonic() - started)
    if pause > 0:
        await asyncio.sleep(pause)
    return len(claimed)


def _evaluate(changes: list[alerts.Change]) -> None:
    for change in changes:
        try:
            alerts.alerts_evaluate(change)
        except Exception:
            log.exception("could not evaluate alerts for %s", change.conversation_id)
    alerts.alerts_due()


async def _wait(event: asyncio.Event, seconds: float) -> None:
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        pass
    event.clear()


async def attempt(http: httpx2.AsyncClient, claimed: webhooks.Claimed) -> webhooks.Outcome:
    """POST one delivery; how it went (never raises: whatever goes wrong is this attempt's
    error, and the other attempts of its batch are recorded as they went)."""
    at = timezone.now()
    started = time.monotonic()
    try:
        status, error = await post(http, claimed)
    except Exception as exc:
        status, error = None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    duration = int((time.monotonic() - started) * 1000)
    if error:
        log.info("webhook delivery %s attempt %d: %s", claimed.delivery_id, claimed.number, error)
    return webhooks.Outcome(claimed, at, status, error, duration)


async def post(client: httpx2.AsyncClient, claimed: webhooks.Claimed) -> tuple[int | None, str]:
    """(status, error): error is "" for a 2xx answer. Reads at most ANSWER_BYTES of the
    answer's body, raw."""
    timestamp = int(time.time())  # the attempt's: a receiver refuses an old one
    headers = {
        "Content-Type": "application/json",
        "X-Replay-Signature": core.signature(claimed.secret, claimed.body),
        "X-Replay-Timestamp": str(timestamp),
        "X-Replay-Signature-V2": core.signature_v2(
            claimed.secret, timestamp, claimed.delivery_id, claimed.body
        ),
        "X-Replay-Delivery": claimed.delivery_id,
    }
    try:
        async with (
            asyncio.timeout(core.TIMEOUT_SECONDS),
            client.stream("POST", claimed.url, content=claimed.body, headers=headers) as response,
        ):
            start = bytearray()
            async for chunk in response.aiter_raw():
                start += chunk[: ANSWER_BYTES - len(start)]
                if len(start) >= ANSWER_BYTES:
                    break  # closing the response closes its connection, the rest unread
    except (TimeoutError, httpx2.TimeoutException):
        return None, f"no answer within {core.TIMEOUT_SECONDS:g} s"
    except TargetRefused as exc:
        return None, str(exc)
    except httpx2.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    status = response.status_code
    if 200 <= status < 300:
        return status, ""
    if 300 <= status < 400:
        where = response.headers.get("Location", "")[:200]
        return status, f"answered {status}, a redirect to {where!r}, which is not followed"
    said = ""
    if start and response.headers.get("Content-Encoding", "identity") == "identity":
        said = ": " + core.cut(start.decode("utf-8", "replace").strip(), ANSWER_SHOWN_CHARS)
    return status, f"answered {status}{said}"


# -- one per server event loop -------------------------------------------------------------------

_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AlertLoop] = (
    weakref.WeakKeyDictionary()
)


def started(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this event loop runs an alert loop (the server started it)."""
    return loop in _loops


def running(loop: asyncio.AbstractEventLoop) -> AlertLoop:
    """This event loop's alert loop, started on first use (call on the loop)."""
    found = _loops.get(loop)
    if found is None:
        found = _loops[loop] = AlertLoop(loop)
    return found


def submit(loop: asyncio.AbstractEventLoop, change: alerts.Change) -> None:
    running(loop).submit(change)


def wake(loop: asyncio.AbstractEventLoop) -> None:
    running(loop).send_soon.set()


def start_with_server() -> None:
    """Start with daphne: its event loop exists, not yet running, when it imports the
    application; the loop starts when the server does, so pending deliveries and due
    clocks are taken up after a restart without waiting for a request."""
    server: Any = sys.modules.get("daphne.server")
    loop = getattr(server, "twisted_loop", None)
    if isinstance(loop, asyncio.AbstractEventLoop) and not loop.is_closed():
        loop.call_soon(running, loop)


@receiver(signals.appended, dispatch_uid="replay-alerts-on-append")
def on_appended(
    sender: Any,
    *,
    conversation_id: Any,
    first_seq: int,
    errors: int,
    error_seq: int | None,
    **kwargs: Any,
) -> None:
    """Once the append's transaction commits, the conversation's rules are evaluated (in a
    server by this loop, off the request; elsewhere, or in a server whose loop did not start,
    at once after the commit). `error_seq` is the message holding the first new error
    result: a `tool_error` alert names it."""
    change = alerts.Change(str(conversation_id), first_seq, errors, error_seq=error_seq)
    transaction.on_commit(partial(_committed, change))


def _committed(change: alerts.Change) -> None:
    loop = server_loop()
    if loop is not None and started(loop):
        loop.call_soon_threadsafe(submit, loop, change)
        return
    try:
        alerts.alerts_evaluate(change)
    except Exception:  # an alert is never worth failing the write that committed
        log.exception("could not evaluate alerts for %s", change.conversation_id)


@receiver(alerts.deliveries_queued, dispatch_uid="replay-alerts-wake-sender")
def on_deliveries_queued(sender: Any, **kwargs: Any) -> None:
    """New deliveries wake the webhook sender at once, not at its next tick."""
    loop = server_loop()
    if loop is not None and started(loop):
        loop.call_soon_threadsafe(wake, loop)

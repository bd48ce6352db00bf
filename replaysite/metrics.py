"""`/metrics` (docs/contract.md §5): the process's measures in Prometheus's text format,
for a scraper that shows `REPLAY_METRICS_TOKEN` as a bearer token or connects from an
address in `REPLAY_METRICS_ALLOW`; off (404) when neither is set.

Answered before Django's stack, like the probes: a scraper reaches each process on its own
port over plain HTTP, by address. The route latencies are measured by `RouteTimer`, a
Django middleware, since only the resolver knows which pattern a request matched.

Why prometheus-client and not django-prometheus: the latter's database and cache
measures come from replacing the database backend, which would sit between Django and
psycopg's pool; the pool's own figures are read here instead.
"""

from __future__ import annotations

import hmac
import ipaddress
import time
from collections.abc import Callable, Iterator
from typing import Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.http import HttpRequest, HttpResponse
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from conversations.record import metrics

PATH = "/metrics"
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class PoolCollector(Collector):
    """psycopg's pool figures for the default database, read at each scrape."""

    def collect(self) -> Iterator[Any]:
        connection = connections[DEFAULT_DB_ALIAS]
        pools = getattr(type(connection), "_connection_pools", {})
        pool = pools.get(DEFAULT_DB_ALIAS) if isinstance(pools, dict) else None
        if pool is None:  # SQLite, or no request has needed the database yet
            return
        stats = pool.get_stats()
        for name, key, text in (
            ("replay_db_pool_size", "pool_size", "Connections the pool holds."),
            ("replay_db_pool_available", "pool_available", "Idle connections in the pool."),
            ("replay_db_pool_requests_waiting", "requests_waiting", "Requests waiting now."),
        ):
            yield GaugeMetricFamily(name, text, value=stats.get(key, 0))
        for name, value, text in (
            (
                "replay_db_pool_waits",
                stats.get("requests_queued", 0),
                "Requests that had to wait for a connection.",
            ),
            (
                "replay_db_pool_wait_seconds",
                stats.get("requests_wait_ms", 0) / 1000,
                "Time requests spent waiting for a connection.",
            ),
            (
                "replay_db_pool_timeouts",
                stats.get("requests_errors", 0),
                "Requests that got no connection within the pool's timeout.",
            ),
        ):
            yield CounterMetricFamily(name, text, value=value)


REGISTRY.register(PoolCollector())


def allowed(scope: Any) -> int:
    """200 if this request may read the metrics, else the status that says why not."""
    token: str = settings.REPLAY_METRICS_TOKEN
    networks: list[Any] = settings.REPLAY_METRICS_ALLOW
    if not token and not networks:
        return 404
    if token:
        given = dict(scope.get("headers") or ()).get(b"authorization", b"").decode("latin-1")
        if hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return 200
    if networks:
        client = (scope.get("client") or ("",))[0]
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return 403
        if any(address in network for network in networks):
            return 200
    return 401 if token else 403


MESSAGES = {
    404: b"Metrics are off: set REPLAY_METRICS_TOKEN or REPLAY_METRICS_ALLOW.\n",
    401: b"Metrics need the bearer token of REPLAY_METRICS_TOKEN.\n",
    403: b"Metrics are not served to this address.\n",
}


async def serve(scope: Any, send: Any) -> None:
    status = allowed(scope)
    if status == 200:
        body = generate_latest(REGISTRY)
        kind = b"text/plain; version=0.0.4; charset=utf-8"
    else:
        body, kind = MESSAGES[status], b"text/plain; charset=utf-8"
    headers = [(b"content-type", kind), (b"cache-control", b"no-store")]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="metrics"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def RouteTimer(get_response: Callable[[HttpRequest], HttpResponse]) -> Any:  # noqa: N802
    """Times each request by the URL pattern it matched (a bounded label)."""

    def middleware(request: HttpRequest) -> HttpResponse:
        started = time.perf_counter()
        response = get_response(request)
        match = request.resolver_match
        route = (match.route or match.view_name) if match is not None else "(unmatched)"
        method = request.method if request.method in METHODS else "OTHER"
        metrics.REQUESTS.labels(route, method, f"{response.status_code // 100}xx").observe(
            time.perf_counter() - started
        )
        return response

    return middleware


class Metrics:
    """ASGI middleware: answers `/metrics` itself, passes everything else on."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == PATH:
            await serve(scope, send)
        else:
            await self.app(scope, receive, send)

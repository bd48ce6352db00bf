"""Liveness and readiness probes (docs/contract.md §5), answered before Django's stack.

`/healthz` says the process is serving: no I/O at all. `/readyz` says it can do its work:
the database answers, every migration is applied, and, with `REDIS_URL`, Redis answers.
Both are unauthenticated and cheap, so they sit in front of Django's handler: a load
balancer's probe carries no session, may come over plain HTTP under `DJANGO_HTTPS=1` and
may name the host by its address (not in `DJANGO_ALLOWED_HOSTS`), and none of that is a
reason to call the process unhealthy. An answer names each check and its state ("ok",
"failed", "timeout", "pending"), never an error's text, a host or a setting.

Why not django-health-check: its database check writes and deletes a row on every probe,
and it serves through the URLconf, behind the host check and the HTTPS redirect.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections

# A probe answers within this many seconds whatever is down (a database that does not
# answer holds a connection attempt for up to the pool's 10 s timeout).
CHECK_SECONDS = 2.0
PATHS = ("/healthz", "/readyz")

_migrated = False  # once every migration is applied, the code in this process is served


def _database() -> str:
    global _migrated
    connection = connections[DEFAULT_DB_ALIAS]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
        if not _migrated:
            from django.db.migrations.executor import MigrationExecutor

            executor = MigrationExecutor(connection)
            plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
            if plan:
                return "pending"
            _migrated = True
        return "ok"
    except Exception:
        return "failed"
    finally:
        connection.close()  # back to the pool; a probe's thread keeps nothing


async def _redis() -> str:
    import redis.asyncio

    client = redis.asyncio.from_url(settings.REDIS_URL, socket_timeout=CHECK_SECONDS)
    try:
        await client.ping()
        return "ok"
    except Exception:
        return "failed"
    finally:
        await client.aclose()


async def _within(check: Any) -> str:
    try:
        return str(await asyncio.wait_for(check, CHECK_SECONDS))
    except TimeoutError:
        return "timeout"


async def readiness() -> tuple[int, dict[str, Any]]:
    database = _within(sync_to_async(_database, thread_sensitive=False)())
    checks: dict[str, str] = {}
    if settings.REDIS_URL:
        checks["database"], checks["channel_layer"] = await asyncio.gather(
            database, _within(_redis())
        )
    else:
        checks["database"] = await database
    if checks["database"] == "pending":
        checks["database"], checks["migrations"] = "ok", "pending"
    else:  # "ok", or nothing could be asked
        checks["migrations"] = "ok" if checks["database"] == "ok" else "unknown"
    ready = all(state == "ok" for state in checks.values())
    return (200 if ready else 503), {"status": "ok" if ready else "unavailable", "checks": checks}


class Probes:
    """ASGI middleware: answers the two probe paths itself, passes everything else on."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] not in PATHS:
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            status, body = 405, {"status": "error", "error": "Probes answer GET and HEAD."}
        elif scope["path"] == "/healthz":
            status, body = 200, {"status": "ok"}
        else:
            status, body = await readiness()
        payload = orjson.dumps(body)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            (b"cache-control", b"no-store"),
            (b"x-content-type-options", b"nosniff"),
        ]
        if status == 405:
            headers.append((b"allow", b"GET, HEAD"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send(
            {"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else payload}
        )

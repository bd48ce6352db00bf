"""Which real services the tests can reach: `python -m tests.services postgres` prints a
PostgreSQL URL (DATABASE_URL, else the local server) or nothing, and fails when
REPLAY_REQUIRE_SERVICES=1 and none answers."""

from __future__ import annotations

import os
import socket
import sys
from urllib.parse import urlparse

LOCAL_POSTGRES = "postgres://127.0.0.1:5432/test"
LOCAL_REDIS = "redis://127.0.0.1:6379/0"


def required() -> bool:
    return os.environ.get("REPLAY_REQUIRE_SERVICES", "") == "1"


def reachable(url: str, default_port: int) -> bool:
    parsed = urlparse(url)
    try:
        with socket.create_connection(
            (parsed.hostname or "127.0.0.1", parsed.port or default_port), 2
        ):
            return True
    except OSError:
        return False


def postgres_url() -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        return url if reachable(url, 5432) else None
    return LOCAL_POSTGRES if reachable(LOCAL_POSTGRES, 5432) else None


def redis_url() -> str | None:
    url = os.environ.get("REDIS_URL", "") or LOCAL_REDIS
    return url if reachable(url, 6379) else None


def main(argv: list[str]) -> int:
    which = argv[1] if len(argv) > 1 else ""
    finders = {"postgres": postgres_url, "redis": redis_url}
    if which not in finders:
        print("usage: python -m tests.services postgres|redis", file=sys.stderr)
        return 2
    url = finders[which]()
    if url is None:
        if required():
            print(f"{which} is not reachable and REPLAY_REQUIRE_SERVICES=1", file=sys.stderr)
            return 1
        print(f"{which} is not reachable; skipping its run", file=sys.stderr)
        return 0
    print(url)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

"""The WebSocket Origin must be the page's own scheme, host and port (docs/contract.md §4).

channels' AllowedHostsOriginValidator compares host names only. Cookies are not scoped
by port or scheme, so a page of any other app on the same host (another port, plain
http beside https) could open a socket that carries the operator's session. Here the
Origin must equal the origin the socket was opened on — its scheme (from the
connection, or SECURE_PROXY_SSL_HEADER behind a proxy), its Host (ALLOWED_HOSTS) and
port — or be one of CSRF_TRUSTED_ORIGINS, exactly as Django's CSRF check allows them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

DEFAULT_PORTS = {"http": 80, "https": 443}
Origin = tuple[str, str, int]  # scheme, host (lower case, no brackets), port


def parse_origin(value: str) -> Origin | None:
    """`scheme://host[:port]` as a comparable triple; None for `null` or anything else."""
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or parts.path not in {"", "/"}:
        return None
    return parts.scheme, parts.hostname.lower(), port or DEFAULT_PORTS[parts.scheme]


def own_origin(scope: dict[str, Any], headers: dict[bytes, bytes]) -> Origin | None:
    """The origin this socket was opened on, as a page served here would name it."""
    host_header = headers.get(b"host")
    if settings.USE_X_FORWARDED_HOST and b"x-forwarded-host" in headers:
        host_header = headers[b"x-forwarded-host"].split(b",")[0]
    if not host_header:
        return None
    domain, port = split_domain_port(host_header.decode("latin1").strip())
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    secure = scope.get("scheme") == "wss"
    if settings.SECURE_PROXY_SSL_HEADER:
        name, secure_value = settings.SECURE_PROXY_SSL_HEADER
        header = name.removeprefix("HTTP_").replace("_", "-").lower().encode()
        if header in headers:
            value = headers[header].decode("latin1").split(",")[0].strip()
            secure = value == secure_value
    scheme = "https" if secure else "http"
    try:
        number = int(port) if port else DEFAULT_PORTS[scheme]
    except ValueError:
        return None
    return scheme, domain.strip("[]").lower(), number


def trusted(origin: str, parsed: Origin) -> bool:
    """CSRF_TRUSTED_ORIGINS, read as Django's CSRF check reads it (`https://*.example.com`
    allows the subdomains of example.com over https)."""
    for entry in settings.CSRF_TRUSTED_ORIGINS:
        if "*" not in entry:
            if parse_origin(entry) == parsed:
                return True
            continue
        pattern = urlsplit(entry)
        netloc = urlsplit(origin).netloc.lower()
        if pattern.scheme == parsed[0] and is_same_domain(netloc, pattern.netloc.lstrip("*")):
            return True
    return False


def origin_allowed(scope: dict[str, Any]) -> bool:
    headers = dict(scope.get("headers", []))
    raw = headers.get(b"origin")
    if raw is None:
        return False  # browsers always send one; a socket without it is not a page's
    origin = raw.decode("latin1").strip()
    parsed = parse_origin(origin)
    if parsed is None:
        return False
    return parsed == own_origin(scope, headers) or trusted(origin, parsed)


class SameOriginValidator:
    """ASGI middleware: a WebSocket whose Origin is not this site's is denied at the
    handshake (a foreign page is told nothing; there is no page of ours to explain to)."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if scope["type"] != "websocket":
            raise ValueError("SameOriginValidator guards WebSocket connections only")
        if origin_allowed(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)  # type: ignore[arg-type]

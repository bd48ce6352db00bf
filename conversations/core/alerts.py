"""Alerts (docs/contract.md §11), the pure part: which conversations a rule watches, when
pressure is reached, how long a failed webhook waits, how its body is signed, and which
addresses a webhook may be sent to.

No Django: the record's alert service and the webhook sender call these.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, TypeAlias
from urllib.parse import urlsplit, urlunsplit

Kind: TypeAlias = Literal["pressure", "tool_error", "unanswered", "compaction"]
KINDS: tuple[Kind, ...] = ("pressure", "tool_error", "unanswered", "compaction")
DEFAULT_THRESHOLD_PERCENT = 80
DEFAULT_AFTER_SECONDS = 60
MATCH_CHARS = 200
DETAIL_CHARS = 500
# Webhooks: an attempt's answer must start within this; failures are retried with doubling
# waits until this long after the alert fired.
TIMEOUT_SECONDS = 10.0
RETRY_FOR = timedelta(hours=24)
ERROR_CHARS = 500


def matches(match: str, title: str, metadata: object) -> bool:
    """Whether a rule with this `match` watches a conversation: no match watches every
    one; else its title or its metadata `source` contains it (case-insensitively)."""
    if not match:
        return True
    wanted = match.casefold()
    source = metadata.get("source") if isinstance(metadata, Mapping) else None
    return wanted in title.casefold() or (isinstance(source, str) and wanted in source.casefold())


def pressure_reached(tokens: int, window: int | None, percent: int) -> bool:
    """The next request takes at least `percent`% of the window (an unknown window never)."""
    return window is not None and window > 0 and tokens * 100 >= percent * window


def pressure_detail(tokens: int, window: int, percent: int) -> str:
    share = tokens * 100 // window
    return (
        f"The next request is ≈{tokens:,} tokens, {share}% of the {window:,}-token window "
        f"(threshold {percent}%)."
    )


def next_attempt(
    fired_at: datetime, attempts: int, first_wait: int, now: datetime
) -> datetime | None:
    """When a delivery that has failed `attempts` times is tried again: `first_wait`
    seconds after the first failure, each next wait twice as long; None once that would be
    more than 24 hours after the alert fired (the delivery has failed)."""
    wait = timedelta(seconds=first_wait * 2 ** max(attempts - 1, 0))
    when = now + wait
    return when if when <= fired_at + RETRY_FOR else None


def signature(secret: str, body: bytes) -> str:
    """`X-Replay-Signature`: `sha256=` and the HMAC-SHA256 of the body with the secret."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


MASKED_USERINFO = "***:***"


def masked_url(url: str) -> str:
    """A webhook URL as it is shown (docs/contract.md §11): any `user:pass@` becomes
    `***:***@`, the rest as stored; the credentials are write-only."""
    try:
        parts = urlsplit(url)
        if parts.username is None and parts.password is None:
            return url
    except ValueError:  # not a URL that parses: nothing of it is shown
        return MASKED_USERINFO
    host = parts.netloc.rpartition("@")[2]  # the host and port as stored, IPv6 brackets kept
    return urlunsplit(parts._replace(netloc=f"{MASKED_USERINFO}@{host}"))


def signature_v2(secret: str, timestamp: int, delivery_id: str, body: bytes) -> str:
    """`X-Replay-Signature-V2`: `t=TIMESTAMP,v1=HEX`, the HMAC-SHA256 of
    `TIMESTAMP.DELIVERY_ID.BODY`, so a captured delivery cannot be sent again later or
    under another delivery's id (the receiver checks both)."""
    signed = f"{timestamp}.{delivery_id}.".encode() + body
    return f"t={timestamp},v1=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


# -- webhook targets -----------------------------------------------------------------------------

Address: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
Network: TypeAlias = ipaddress.IPv4Network | ipaddress.IPv6Network
HOST_NAME = re.compile(
    r"^(?=.{1,253}$)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$"
)


@dataclass(frozen=True, slots=True)
class AllowHosts:
    """The webhook targets allowed although not public (`REPLAY_WEBHOOK_ALLOW_HOSTS`):
    host names (as the URL spells them) and networks (an address is a one-address one)."""

    names: frozenset[str] = frozenset()
    networks: tuple[Network, ...] = ()


def allow_hosts(value: str) -> AllowHosts:
    """Parse comma-separated names, addresses or networks (`hooks.internal, 10.0.0.0/8,
    127.0.0.1, [::1]`). Raises ValueError naming the entry that is none of them."""
    names: set[str] = set()
    networks: list[Network] = []
    for raw in value.split(","):
        item = raw.strip().lower()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        if not HOST_NAME.match(item) or item.replace(".", "").isdigit():
            raise ValueError(f"{raw.strip()!r} is not a host name, an address or a network")
        names.add(item.rstrip("."))
    return AllowHosts(frozenset(names), tuple(networks))


def target_refused(host: str, addresses: Iterable[str], allowed: AllowHosts) -> str:
    """Why a webhook may not be sent to `host` resolved to `addresses` ("" if it may):
    every address must be public (not loopback, private, link-local, unspecified or
    another special-purpose range) unless the name or a network of `allowed` allows it."""
    name = host.strip("[]").lower().rstrip(".")
    if name in allowed.names:
        return ""
    found = False
    for text in addresses:
        found = True
        address: Address = ipaddress.ip_address(text.split("%", 1)[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
        if address.is_global and not address.is_multicast:
            continue
        if any(address in network for network in allowed.networks):
            continue
        return (
            f"refused: {name} is {address}, {_address_kind(address)}; "
            "REPLAY_WEBHOOK_ALLOW_HOSTS allows receivers inside the network"
        )
    return "" if found else f"refused: {name} resolves to no address"


def _address_kind(address: Address) -> str:
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_private:
        return "a private address"
    return "not a public address"


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class PressureTurns:
    """When each conversation's `pressure` rules are evaluated: at most every `every`
    seconds (their figure is the dear part of an evaluation); a conversation that changed
    before its turn is remembered and evaluated when its turn comes. Takes a clock, so it
    is tested without a server or `sleep`; it holds only recently active conversations."""

    def __init__(self, clock: Callable[[], float], every: float) -> None:
        self.clock = clock
        self.every = every
        self.last: dict[str, float] = {}  # conversation → when its pressure was evaluated
        self.later: set[str] = set()  # changed before their turn

    def _due(self, key: str, now: float) -> bool:
        at = self.last.get(key)
        return at is None or now - at >= self.every

    def take(self, changed: Iterable[str]) -> tuple[set[str], set[str]]:
        """(the `changed` conversations whose pressure is evaluated now, the remembered
        ones whose turn has come)."""
        now = self.clock()
        now_due: set[str] = set()
        for key in changed:
            if self._due(key, now):
                self.last[key] = now
                self.later.discard(key)
                now_due.add(key)
            else:
                self.later.add(key)
        came = {key for key in self.later if self._due(key, now)}
        for key in came:
            self.last[key] = now
        self.later -= came
        for key, at in list(self.last.items()):
            if now - at >= self.every and key not in self.later:
                del self.last[key]
        return now_due, came

    @property
    def waiting(self) -> bool:
        return bool(self.later)

"""The embedded channel layer: channels' in-memory layer, tidied at most once a second.

channels' InMemoryChannelLayer walks every channel and group member on every receive and
group_send to drop expired entries: with N watching sockets, one event costs N² steps.
Expiry is a cleanup (60 s for messages, a day for group members), so doing it once a
second changes nothing a watcher can see.

`_clean_expired` is private to channels and has no public replacement; this module is the
only place that touches it, and tests/test_internals.py fails on an upgrade that renames it,
changes its signature or stops calling it from `receive` and `group_send`.
"""

from __future__ import annotations

import time

from channels.layers import InMemoryChannelLayer

CLEAN_INTERVAL = 1.0


class ThrottledInMemoryChannelLayer(InMemoryChannelLayer):
    _cleaned_at = 0.0

    def _clean_expired(self) -> None:
        now = time.monotonic()
        if now - self._cleaned_at < CLEAN_INTERVAL:
            return
        self._cleaned_at = now
        super()._clean_expired()  # type: ignore[misc]  # private in the stubs, not in channels

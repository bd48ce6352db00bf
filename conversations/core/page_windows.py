"""Window and position arithmetic for pages and live sockets (docs/contract.md §4 Bounds). Pure.

A window is a `range` of message seqs. A page holds at most `DOCUMENT` messages; each load
brings at most `WINDOW`; a resume report is answered with the stale messages, or with
"reload your window" when more than one window went by.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

WINDOW = 100  # messages one page, "earlier" or "later" load brings
DOCUMENT = 300  # messages a page's document holds at most
FRAME_BYTES = 256 * 1024  # no WebSocket frame is larger
LAST = 999_999_999  # "before the end": a window request for the tail, whatever its length


def tail(total: int, size: int = WINDOW) -> range:
    """The last `size` messages of `total`: where a conversation opens."""
    return range(max(0, total - size), total)


def around(target: int, total: int, size: int = WINDOW) -> range:
    """A window of `size` holding `target` (a deep link's seq), centred where it can be."""
    target = max(0, min(target, total - 1))
    start = max(0, min(target - size // 2, total - size))
    return range(start, min(total, start + size))


def before(seq: int, size: int = WINDOW) -> range:
    """The window just before `seq` ("earlier")."""
    seq = max(0, seq)
    return range(max(0, seq - size), seq)


def after(seq: int, total: int, size: int = WINDOW) -> range:
    """The window just after `seq` ("later")."""
    start = max(0, seq + 1)
    return range(min(start, total), min(total, start + size))


@dataclass(frozen=True)
class Resend:
    """Send these messages again (they are new or grew), in this order."""

    seqs: tuple[int, ...]


@dataclass(frozen=True)
class Reload:
    """Too much went by for frames: the client reloads its window over HTTP."""


def resume(
    held: Mapping[int, int], current: Mapping[int, int], size: int = WINDOW
) -> Resend | Reload:
    """What a client holding `held` (seq → blocks) misses of `current` (seq → blocks).

    More than `size` stale messages is a gap no frame-sized answer covers: `Reload`.
    """
    stale = tuple(seq for seq, n in sorted(current.items()) if held.get(seq, -1) < n)
    if len(stale) > size:
        return Reload()
    return Resend(stale)


def report_span(start: int, counts: int, size: int = WINDOW) -> range:
    """The seqs a resume report from `start` holding `counts` messages is compared over:
    its own messages and one window more (anything beyond is a reload anyway)."""
    counts = min(counts, DOCUMENT)
    return range(start, start + counts + size + 1)


def trimmed(first: int, last: int, limit: int = DOCUMENT) -> int:
    """The first seq a document following its tail keeps when it holds [first, last]."""
    return max(first, last - limit + 1)

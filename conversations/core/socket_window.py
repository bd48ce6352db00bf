"""What one live socket's client holds (docs/contract.md §4): its window, its resume
report, and which positions an event brings it. Pure: the consumer reads the database,
renders and sends; this decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from conversations.core import page_windows, strictjson

# The largest message a client may send on a live socket, in bytes: a resume report of a
# whole window (DOCUMENT block counts) fits with room to spare.
CLIENT_BYTES = 4096


@dataclass(frozen=True)
class Report:
    """A client's resume report: it holds messages `start`, `start + 1`, … with these
    block counts, and follows the end (`tail`) or holds a window away from it."""

    start: int
    counts: list[int]
    tail: bool


class RefusedReport(ValueError):
    """A message no page sends: longer than CLIENT_BYTES, or a report of more than a
    window (a page holds at most DOCUMENT messages). The socket closes unanswered."""


def parse_report(text: str) -> Report | None:
    """`{"type": "resume", "from": SEQ, "counts": [blocks of SEQ, …], "tail": bool}`, or
    None for anything else (ignored: the socket stays live). Raises RefusedReport for a
    text over CLIENT_BYTES (unread) or a report of more than DOCUMENT counts."""
    if len(text) > CLIENT_BYTES:  # characters: never fewer than its UTF-8 bytes
        raise RefusedReport(f"a message of {len(text)} characters")
    try:
        report: Any = strictjson.loads(text)  # its error is a ValueError
        start = int(report["from"])
        counts = [int(n) for n in report["counts"]]
        tail = report.get("tail", True)
    except (ValueError, KeyError, TypeError, OverflowError, AttributeError):
        return None
    if report.get("type") != "resume" or start < 0 or not isinstance(tail, bool):
        return None
    if len(counts) > page_windows.DOCUMENT:
        raise RefusedReport(f"a report of {len(counts)} positions")
    return Report(start, counts, tail)


class HeldWindow:
    """Message seq → block count for what the client holds, from `first` on.

    The client holds [first, first + span); `tail`: it follows the end (later messages
    are pushed to it); `reloading`: it was told to reload its window and hears nothing
    until it reports again.
    """

    def __init__(self) -> None:
        self.held: dict[int, int] = {}
        self.first = 0
        self.span = 0
        self.tail = True
        self.reloading = False

    def opened(self, first: int, held: Mapping[int, int]) -> None:
        """The page as rendered: the tail's block counts, read after joining the group."""
        self.first, self.held = first, dict(held)
        self.span = len(self.held)

    def reported(self, report: Report) -> None:
        self.first, self.tail, self.reloading = report.start, report.tail, False
        self.held = {report.start + i: n for i, n in enumerate(report.counts)}
        self.span = len(report.counts)

    def resync_span(self) -> range:
        """The messages whose counts a resync reads."""
        if self.tail:
            return page_windows.report_span(self.first, self.span)
        return range(self.first, self.first + max(self.span, 1))

    def wanted(self, positions: Iterable[tuple[int, int]]) -> list[tuple[int, int]] | None:
        """Of these (seq, block count) positions, in seq order, the ones the client lacks;
        None when an earlier message went missing (the layer lost it): resync instead."""
        wanted: list[tuple[int, int]] = []
        for seq, blocks in positions:
            if seq < self.first or self.held.get(seq, -1) >= blocks:
                continue  # before the client's window, or already sent
            if not self.tail and seq >= self.first + self.span:
                continue  # past a window away from the end: "Load later" brings it
            if (
                seq > self.first
                and seq - 1 not in self.held
                and (not wanted or wanted[-1][0] != seq - 1)
            ):
                return None
            wanted.append((seq, blocks))
        return wanted

    def newer(self, counts: Mapping[int, int]) -> bool:
        """Whether a frame with these counts holds anything the client lacks."""
        return any(self.held.get(seq, -1) < n for seq, n in counts.items())

    def sent(self, counts: Mapping[int, int]) -> None:
        """A frame with these counts went out; a tail page keeps its last DOCUMENT."""
        held = self.held
        for seq, n in counts.items():
            held[seq] = max(held.get(seq, 0), n)
        if self.tail and held:
            # (This runs for every socket and frame: the end and the trim without a pass
            # over what the client holds.)
            last = max(max(counts, default=self.first), self.first + self.span - 1)
            while last + 1 in held:
                last += 1
            first = page_windows.trimmed(self.first, last)
            if first != self.first:
                for seq in [*range(self.first, first), *(s for s in counts if s < first)]:
                    held.pop(seq, None)
                self.first = first
            self.span = last - self.first + 1


class Quota:
    """Open sockets per key (a user, a share link), at most `limit` each. Only what is
    open counts: `take` before opening, `release` once, whether the opening failed or
    the socket closed later."""

    def __init__(self) -> None:
        self.open: dict[object, int] = {}

    def take(self, key: object, limit: int) -> bool:
        if self.open.get(key, 0) >= limit:
            return False
        self.open[key] = self.open.get(key, 0) + 1
        return True

    def release(self, key: object) -> None:
        left = self.open.get(key, 0) - 1
        if left > 0:
            self.open[key] = left
        else:
            self.open.pop(key, None)

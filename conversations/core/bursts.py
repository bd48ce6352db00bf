"""Which adds are told together (docs/contract.md §4): coalescing only while behind.

An add is told at once (the leading edge). Only while whoever tells it is still busy with
an earlier one (the outbox's sender waiting on the channel layer, a process's fan-out still
rendering or sending the previous change) do later adds of the same conversation wait, and
they are then told together: where each message that changed now ends. No timer decides
it, so a conversation whose watchers keep up gets every add as its own frame, and one whose
watchers fall behind gets fewer, larger frames. Pure: the caller knows when it is busy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

# The most positions one told change carries (the latest): a watcher missing earlier ones
# sees the gap and resyncs from the database.
POSITIONS = 300


class Positions:
    """Adds not yet told, merged: message seq → the block count it has reached."""

    def __init__(self, limit: int = POSITIONS) -> None:
        self.limit = limit
        self.ends: dict[int, int] = {}

    def __bool__(self) -> bool:
        return bool(self.ends)

    def __len__(self) -> int:
        return len(self.ends)

    def add(self, positions: Iterable[tuple[int, int]]) -> None:
        """More adds: a message's position never goes back."""
        for seq, blocks in positions:
            self.ends[seq] = max(self.ends.get(seq, 0), blocks)

    def take(self) -> list[tuple[int, int]]:
        """What waits, as (seq, block count) in seq order (the latest `limit`), now told."""
        ends, self.ends = self.ends, {}
        return [(seq, ends[seq]) for seq in sorted(ends)[-self.limit :]]


Clock = Callable[[], float]

# A process is saturated with requests when they come back to back: on average (a moving
# average, each request weighing WEIGHT) less than GAP seconds pass between one request's
# end and the next one's start. While it is, its fan-out takes at most SHARE of the time
# (ingest first), with BURST seconds of delivering in hand after a quiet moment, and never
# waits longer than BURST / SHARE seconds. A process that is not saturated (an agent that
# waits for its frames, a few agents) delivers every change at once.
SHARE = 0.1
BURST = 0.2
GAP = 0.005
WEIGHT = 0.2
QUIET = 0.05  # seconds without a request: not saturated, whatever came before


class Budget:
    """The fan-out's share of a saturated process: a bucket of delivering time that fills
    at `share` seconds per second (up to `burst`) and empties by what each delivery took
    (down to `-burst`)."""

    def __init__(self, clock: Clock, share: float = SHARE, burst: float = BURST) -> None:
        self.clock = clock
        self.share = share
        self.burst = burst
        self.level = burst
        self.at = clock()

    def fill(self) -> float:
        now = self.clock()
        self.level = min(self.burst, self.level + (now - self.at) * self.share)
        self.at = now
        return self.level

    def spent(self, seconds: float) -> None:
        self.fill()
        self.level = max(-self.burst, self.level - seconds)

    def wait(self, saturated: bool) -> float:
        """Seconds to wait before the next delivery (0: now): until the bucket holds some
        time again, if the process is saturated."""
        level = self.fill()
        if not saturated or level > 0:
            return 0.0
        return -level / self.share + 1e-3


class Serving:
    """This process's requests: how many are in flight, and how long it waits between
    them (the moving average of the gap from one's end to the next one's start, 0 when
    they overlap)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.in_flight = 0
        self.gap = 1.0
        self.ended = float("-inf")

    def started(self) -> None:
        gap = 0.0 if self.in_flight else min(1.0, self.clock() - self.ended)
        self.gap += (gap - self.gap) * WEIGHT
        self.in_flight += 1

    def finished(self) -> None:
        self.in_flight -= 1
        self.ended = self.clock()

    def saturated(self) -> bool:
        recent = self.in_flight > 0 or self.clock() - self.ended < QUIET
        return recent and self.gap < GAP

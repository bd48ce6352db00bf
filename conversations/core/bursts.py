"""Which adds are told together (docs/contract.md §4): coalescing only while behind.

An add is told at once (the leading edge). Only while whoever tells it is still busy with
an earlier one (the outbox's sender waiting on the channel layer, a process's fan-out still
rendering or sending the previous change) do later adds of the same conversation wait, and
they are then told together: where each message that changed now ends. No timer decides
it, so a conversation whose watchers keep up gets every add as its own frame, and one whose
watchers fall behind gets fewer, larger frames. Pure: the caller knows when it is busy.
"""

from __future__ import annotations

import math
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

# A process is saturated with requests when some request was in flight more than BUSY of
# the recent time (a moving average over about TAU seconds) and requests come while its
# fan-out is still at work (more than half of the recent ones, each weighing WEIGHT): a
# client posting back to back, however slowly it turns around, or several clients at once.
# An agent that waits for its frames before it posts again is not (its requests come once
# the fan-out is done), however slow its requests. Only a request that comes while the
# fan-out is at work, or was within RECENT seconds, says either: one that comes while
# nothing is watched (a client posting into an unwatched conversation) says nothing about
# crowding, so such a client crowds the fan-out from its first posts where watchers wait,
# not four posts later (each of those delivered on its own). While a process is
# saturated, its fan-out takes at most SHARE of the time (ingest first), with BURST
# seconds of delivering in hand after a quiet moment, and never waits longer than
# BURST / SHARE seconds; otherwise every change is delivered at once.
SHARE = 0.05
BURST = 0.1
BUSY = 0.5
TAU = 0.1
WEIGHT = 0.2
RECENT = 0.1


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
    """This process's requests: how many are in flight, for what share of the recent time
    one was (an exponential moving average, over about `tau` seconds), and how many of the
    recent ones came while the fan-out was at work (`working`: the fan-out's count of
    conversations with changes waiting or being delivered, kept by `work_started` and
    `work_finished`)."""

    def __init__(self, clock: Clock, tau: float = TAU, busy: float = BUSY) -> None:
        self.clock = clock
        self.tau = tau
        self.busy = busy
        self.in_flight = 0
        self.working = 0
        self.share = 0.0
        self.crowded = 0.0
        self.at = clock()
        self.worked_at = -math.inf  # when the fan-out was last at work

    def _advance(self) -> None:
        now = self.clock()
        kept = math.exp(-max(0.0, now - self.at) / self.tau)
        self.share = self.share * kept + (1.0 - kept if self.in_flight else 0.0)
        self.at = now

    def started(self) -> None:
        self._advance()
        self.in_flight += 1
        if self.working or self.at - self.worked_at < RECENT:
            self.crowded += ((1.0 if self.working else 0.0) - self.crowded) * WEIGHT

    def work_started(self) -> None:
        self.working += 1

    def work_finished(self) -> None:
        self.working -= 1
        self.worked_at = self.clock()

    def finished(self) -> None:
        self._advance()
        self.in_flight -= 1

    def saturated(self) -> bool:
        self._advance()
        return self.share > self.busy and self.crowded > 0.5

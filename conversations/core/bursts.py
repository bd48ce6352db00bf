"""Which adds are told together (docs/contract.md §4): coalescing only while behind.

An add is told at once (the leading edge). Only while whoever tells it is still busy with
an earlier one (the outbox's sender waiting on the channel layer, a process's fan-out still
rendering or sending the previous change) do later adds of the same conversation wait, and
they are then told together: where each message that changed now ends. No timer decides
it, so a conversation whose watchers keep up gets every add as its own frame, and one whose
watchers fall behind gets fewer, larger frames. Pure: the caller knows when it is busy.
"""

from __future__ import annotations

from collections.abc import Iterable

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

"""The blocks the record counts, watched: every block is counted once, as it is stored
(`token_figures.block_facts`), and a read counts only the markers a compaction policy puts
in place of changed blocks (`policy_reads.Markers`, each distinct one once). Nothing else
may count stored text (docs/contract.md §7); the tests that say so count through this.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any
from unittest import mock

from conversations.core import replay
from conversations.record.counting import policy_reads
from conversations.record.services import token_figures


class BlocksCounted:
    """A context in which `n` is how many blocks the record counted so far (this process)."""

    def __init__(self) -> None:
        self.n = 0
        self._patches: list[Any] = []

    def __enter__(self) -> BlocksCounted:
        block_facts = token_figures.block_facts
        own = policy_reads.Markers.own

        def counted_facts(*args: Any, **kwargs: Any) -> Any:
            self.n += 1
            return block_facts(*args, **kwargs)

        def counted_own(markers: policy_reads.Markers, key: Any, block: replay.Block) -> int:
            if key not in markers.known:
                self.n += 1
            return own(markers, key, block)

        self._patches = [
            mock.patch.object(token_figures, "block_facts", counted_facts),
            mock.patch.object(policy_reads.Markers, "own", counted_own),
        ]
        for patch in self._patches:
            patch.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for patch in reversed(self._patches):
            patch.stop()

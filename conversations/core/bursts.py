"""When a conversation's adds are told (docs/contract.md §4): the outbox's burst timing.

Adds to one conversation closer together than `gap` are a burst (an agent streaming or
flushing): its watchers are told at most once per `window`, one `conversation.changed`
carrying every position since, rather than one event per add. Slower conversations are
told each add at once. Pure: time comes from the clock it is given (monotonic seconds),
the caller sends and sets the timers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Clock = Callable[[], float]


@dataclass(frozen=True)
class Policy:
    window: float  # seconds: a bursting conversation is told at most once per window
    gap: float  # seconds: adds closer together than this are a burst
    positions: int  # the most positions one told burst carries (the latest)


@dataclass(frozen=True)
class SendNow:
    """Tell this add as it is, now (it came after a quiet moment)."""


@dataclass(frozen=True)
class Hold:
    """Held with the burst; `due` is set (seconds from now) when a timer must be started
    for it, and None when the burst's timer runs already."""

    due: float | None


@dataclass(frozen=True)
class TellNow:
    """The burst is over (this add came after a quiet moment): tell what is held, this
    add included, now."""


Decision = SendNow | Hold | TellNow


class Bursts:
    """Per conversation: when its last add came and went out, and what is held."""

    def __init__(self, clock: Clock, remembered: int = 1_000) -> None:
        self.clock = clock
        self.remembered = remembered  # past this many conversations, quiet ones are forgotten
        self.last_event: dict[str, float] = {}  # conversation → when its last add came
        self.last_sent: dict[str, float] = {}  # conversation → when its last add went out
        self.held: dict[str, dict[int, int]] = {}  # conversation → seq → block count

    def add(self, conversation_id: str, position: tuple[int, int], policy: Policy) -> Decision:
        """An add of this conversation now ends message `seq` at `blocks` blocks."""
        now = self.clock()
        last = self.last_event.get(conversation_id)
        burst = last is not None and now - last < policy.gap
        self.last_event[conversation_id] = now
        held = self.held.get(conversation_id)
        if held is None and not burst:
            self.last_sent[conversation_id] = now
            self.forget_quiet(policy)
            return SendNow()
        due = None
        if held is None:
            held = self.held[conversation_id] = {}
            due = max(0.0, self.last_sent.get(conversation_id, now) + policy.window - now)
        seq, blocks = position
        held[seq] = max(held.get(seq, 0), blocks)
        return Hold(due) if burst else TellNow()

    def holding(self, conversation_id: str) -> bool:
        return conversation_id in self.held

    def take(self, conversation_id: str, policy: Policy) -> list[list[int]] | None:
        """What is held, as `[seq, block count]` pairs in seq order (the latest
        `policy.positions`), now told; None when nothing is held."""
        held = self.held.pop(conversation_id, None)
        if not held:
            return None
        self.last_sent[conversation_id] = self.clock()
        return [[seq, held[seq]] for seq in sorted(held)[-policy.positions :]]

    def forget_quiet(self, policy: Policy) -> None:
        """Drop the times of conversations quiet for a while (bounded memory)."""
        if len(self.last_event) < self.remembered:
            return
        now = self.clock()
        quiet = max(policy.window, policy.gap)
        for conversation_id, when in list(self.last_event.items()):
            if now - when > quiet and conversation_id not in self.held:
                del self.last_event[conversation_id]
                self.last_sent.pop(conversation_id, None)

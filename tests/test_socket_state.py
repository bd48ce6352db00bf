"""A socket's bookkeeping, pure (docs/architecture.md, Time is injected): the outbox's burst timing
on a fake clock, what a client holds and which positions it lacks, its resume report, and the
per-key socket quota. No database, no server, no sleep."""

from __future__ import annotations

import pytest

from conversations.core import page_windows
from conversations.core.bursts import Bursts, Hold, Policy, SendNow, TellNow
from conversations.core.socket_window import HeldWindow, Quota, Report, parse_report

WINDOW, GAP = 1.5, 0.8
POLICY = Policy(window=WINDOW, gap=GAP, positions=300)


class Clock:
    """Monotonic seconds that move only when told."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


# -- bursts ------------------------------------------------------------------------------------


def test_an_add_after_a_quiet_moment_is_told_at_once() -> None:
    clock = Clock()
    timing = Bursts(clock)
    for n in range(3):
        assert timing.add("c", (n, 1), POLICY) == SendNow()
        clock.advance(GAP + 0.1)  # a quiet moment: longer than a burst's gap
    assert not timing.holding("c")


def test_the_first_add_is_never_a_burst_whatever_the_clock_reads() -> None:
    # A fresh loop's clock may read near zero; "never heard of" is not "just now".
    assert Bursts(Clock(0.0)).add("c", (0, 1), Policy(0.01, 0.05, 300)) == SendNow()


def test_a_burst_is_held_until_one_window_after_the_add_told_at_once() -> None:
    clock = Clock(100.0)
    timing = Bursts(clock)
    assert timing.add("c", (0, 1), POLICY) == SendNow()  # told at once
    clock.advance(0.1)
    # Held: its timer is due one window after the add that went out.
    assert timing.add("c", (0, 2), POLICY) == Hold(due=pytest.approx(WINDOW - 0.1))
    for n in range(1, 12):
        clock.advance(0.01)
        assert timing.add("c", (n, 1), POLICY) == Hold(due=None)  # the timer runs already
        assert timing.add("c", (n, 2), POLICY) == Hold(due=None)
    clock.advance(WINDOW)  # the timer fires: everything held, each message's last position
    assert timing.take("c", POLICY) == [[0, 2]] + [[n, 2] for n in range(1, 12)]
    assert timing.take("c", POLICY) is None  # told once


def test_a_held_position_never_goes_back() -> None:
    clock = Clock()
    timing = Bursts(clock)
    timing.add("c", (0, 1), POLICY)
    timing.add("c", (0, 3), POLICY)
    timing.add("c", (0, 2), POLICY)  # a late event for an earlier state
    assert timing.take("c", POLICY) == [[0, 3]]


def test_a_burst_past_its_bound_carries_only_the_latest_positions() -> None:
    clock = Clock()
    timing = Bursts(clock)
    bound = Policy(window=WINDOW, gap=GAP, positions=5)
    assert timing.add("c", (0, 1), bound) == SendNow()
    for n in range(1, 12):
        timing.add("c", (n, 1), bound)
    # Only the latest: a watcher holding less sees the gap and resyncs from the record.
    assert timing.take("c", bound) == [[n, 1] for n in range(7, 12)]


def test_a_burst_after_a_burst_gets_a_window_of_its_own() -> None:
    clock = Clock()
    timing = Bursts(clock)
    assert timing.add("c", (0, 1), POLICY) == SendNow()  # a, at once
    clock.advance(0.05)
    assert timing.add("c", (1, 1), POLICY) == Hold(due=pytest.approx(WINDOW - 0.05))  # b
    clock.advance(GAP + 0.1)  # the first window has not ended
    assert timing.add("c", (2, 1), POLICY) == TellNow()  # c ends the burst: b and c now
    assert timing.take("c", POLICY) == [[1, 1], [2, 1]]
    clock.advance(0.05)
    # d: a whole window after b and c went out, not the rest of the first window.
    assert timing.add("c", (3, 1), POLICY) == Hold(due=pytest.approx(WINDOW - 0.05))


def test_conversations_burst_apart() -> None:
    clock = Clock()
    timing = Bursts(clock)
    assert timing.add("a", (0, 1), POLICY) == SendNow()
    assert timing.add("b", (0, 1), POLICY) == SendNow()
    assert isinstance(timing.add("a", (1, 1), POLICY), Hold)
    assert timing.take("b", POLICY) is None


def test_quiet_conversations_are_forgotten_once_many_are_remembered() -> None:
    clock = Clock()
    timing = Bursts(clock, remembered=3)
    for name in "abc":
        timing.add(name, (0, 1), POLICY)
    timing.add("c", (1, 1), POLICY)  # c bursts: held, so remembered
    clock.advance(WINDOW + 1)
    timing.add("d", (0, 1), POLICY)
    assert set(timing.last_event) == {"c", "d"}
    assert timing.holding("c")


# -- what a client holds -----------------------------------------------------------------------


def window(first: int, counts: list[int], tail: bool = True) -> HeldWindow:
    held = HeldWindow()
    held.reported(Report(first, counts, tail))
    return held


def test_an_event_for_what_the_client_holds_wants_nothing() -> None:
    held = window(0, [2, 1])
    assert held.wanted([(0, 2), (1, 1), (0, 1)]) == []
    assert held.wanted([(1, 3), (2, 1)]) == [(1, 3), (2, 1)]


def test_a_message_before_the_window_is_ignored_and_a_gap_asks_for_a_resync() -> None:
    held = window(10, [1, 1])
    assert held.wanted([(3, 1)]) == []
    assert held.wanted([(13, 1)]) is None  # 12 went missing in the layer
    assert held.wanted([(12, 1), (13, 1)]) == [(12, 1), (13, 1)]


def test_a_window_away_from_the_end_wants_no_later_messages() -> None:
    held = window(10, [1, 1], tail=False)
    assert held.wanted([(12, 1)]) == []
    assert held.wanted([(11, 2)]) == [(11, 2)]
    assert held.resync_span() == range(10, 12)


def test_a_sent_frame_is_held_and_a_tail_page_keeps_its_last_document() -> None:
    held = HeldWindow()
    held.opened(0, {0: 1})
    assert held.newer({0: 2}) and not held.newer({0: 1})
    last = page_windows.DOCUMENT + 5
    held.sent(dict.fromkeys(range(1, last + 1), 1))
    assert held.first == page_windows.trimmed(0, last)
    assert min(held.held) == held.first and held.span == last - held.first + 1


def test_a_resume_report_is_parsed_or_ignored() -> None:
    assert parse_report('{"type": "resume", "from": 3, "counts": [1, 2]}') == Report(
        3, [1, 2], True
    )
    assert parse_report('{"type": "resume", "from": 0, "counts": [], "tail": false}') == Report(
        0, [], False
    )
    for bad in [
        "",
        "[]",
        "nonsense",
        '{"type": "resume", "from": -1, "counts": []}',
        '{"type": "other", "from": 0, "counts": []}',
        '{"type": "resume", "from": 0, "counts": [], "tail": 1}',
        '{"type": "resume", "from": 0, "counts": ["x"]}',
        '{"type": "resume", "from": 1e400, "counts": []}',
    ]:
        assert parse_report(bad) is None, bad


def test_a_report_longer_than_a_page_keeps_its_end() -> None:
    counts = list(range(page_windows.DOCUMENT + 7))
    report = parse_report(f'{{"type": "resume", "from": 10, "counts": {counts}}}')
    assert report == Report(17, counts[7:], True)


# -- the quota ---------------------------------------------------------------------------------


def test_a_quota_counts_only_what_is_open() -> None:
    quota = Quota()
    assert quota.take("u", 2) and quota.take("u", 2)
    assert not quota.take("u", 2)
    assert quota.take("v", 2)  # per key
    quota.release("u")
    assert quota.take("u", 2)
    for _ in range(3):
        quota.release("u")
    assert "u" not in quota.open  # nothing kept for a key with no socket
    quota.release("nobody")  # harmless
    assert quota.open == {"v": 1}

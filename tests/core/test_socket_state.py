"""A socket's bookkeeping, pure (docs/architecture.md, Time is injected): the positions that
wait while the outbox or the fan-out is behind, what a client holds and which positions it
lacks, its resume report, and the per-key socket quota. No database, no server, no sleep."""

from __future__ import annotations

import pytest

from conversations.core import page_windows
from conversations.core.bursts import Budget, Positions, Serving
from conversations.core.socket_window import (
    CLIENT_BYTES,
    HeldWindow,
    Quota,
    RefusedReport,
    Report,
    parse_report,
)

# -- what waits while behind ---------------------------------------------------------------------


def test_nothing_waits_until_something_is_added() -> None:
    waiting = Positions()
    assert not waiting and waiting.take() == []


def test_waiting_adds_are_told_once_in_seq_order_each_at_its_last_position() -> None:
    waiting = Positions()
    waiting.add([(2, 1)])
    waiting.add([(0, 1), (0, 2)])
    waiting.add([(2, 3), (1, 1)])
    assert len(waiting) == 3
    assert waiting.take() == [(0, 2), (1, 1), (2, 3)]
    assert not waiting and waiting.take() == []  # told once


def test_a_waiting_position_never_goes_back() -> None:
    waiting = Positions()
    waiting.add([(0, 1), (0, 3)])
    waiting.add([(0, 2)])  # a late event for an earlier state
    assert waiting.take() == [(0, 3)]


def test_past_its_bound_only_the_latest_positions_are_told() -> None:
    waiting = Positions(limit=5)
    waiting.add((n, 1) for n in range(12))
    # Only the latest: a watcher holding less sees the gap and resyncs from the record.
    assert waiting.take() == [(n, 1) for n in range(7, 12)]


class Clock:
    """Monotonic seconds that move only when told."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_a_process_not_saturated_delivers_at_once_whatever_it_spent() -> None:
    clock = Clock()
    budget = Budget(clock, share=0.1, burst=0.2)
    budget.spent(5.0)  # far more than its share
    assert budget.wait(saturated=False) == 0.0


def test_a_saturated_process_delivers_at_most_its_share_of_the_time() -> None:
    clock = Clock()
    budget = Budget(clock, share=0.1, burst=0.2)
    assert budget.wait(saturated=True) == 0.0  # what it has in hand after a quiet moment
    budget.spent(0.25)  # 0.05 s past what it had
    wait = budget.wait(saturated=True)
    assert 0.5 <= wait <= 0.51  # 0.05 s at a tenth of the time
    clock.advance(wait)
    assert budget.wait(saturated=True) == 0.0
    # Over a long saturated run: deliveries of 0.1 s, each as soon as allowed.
    delivering = 0.0
    started = clock()
    for _ in range(50):
        clock.advance(budget.wait(saturated=True))
        budget.spent(0.1)
        clock.advance(0.1)
        delivering += 0.1
    assert delivering / (clock() - started) <= 0.1 * 1.25  # the share, plus what was in hand


def test_a_saturated_process_never_waits_longer_than_its_bound() -> None:
    clock = Clock()
    budget = Budget(clock, share=0.1, burst=0.2)
    budget.spent(30.0)  # one very slow delivery
    assert budget.wait(saturated=True) <= 0.2 / 0.1 + 0.01  # from -burst back to zero


def test_requests_back_to_back_saturate_and_an_agent_waiting_for_its_frames_does_not() -> None:
    clock = Clock()
    serving = Serving(clock)
    assert not serving.saturated()  # nothing served yet
    for _ in range(20):  # an agent: a request, then 40 ms waiting for its frame
        serving.started()
        clock.advance(0.01)
        serving.finished()
        clock.advance(0.04)
    assert not serving.saturated()
    serving.working = 1  # its changes wait for (or are being sent by) the fan-out
    for _ in range(20):  # a client posting back to back
        serving.started()
        clock.advance(0.005)
        serving.finished()
        clock.advance(0.0005)
    assert serving.saturated()
    clock.advance(0.2)  # then nothing for a while
    assert not serving.saturated()


def test_a_client_posting_back_to_back_saturates_however_slowly_it_turns_around() -> None:
    clock = Clock()
    serving = Serving(clock)
    serving.working = 1
    for _ in range(40):  # on a loaded machine: 8 ms a request, 6 ms before the next one
        serving.started()
        clock.advance(0.008)
        serving.finished()
        clock.advance(0.006)
    assert serving.saturated()


def test_an_agent_waiting_for_its_frames_is_not_saturating_however_slow_its_requests() -> None:
    clock = Clock()
    serving = Serving(clock)
    for _ in range(40):  # on a loaded machine: 40 ms a request, its frame 10 ms after
        serving.started()  # once the fan-out is done with its previous change
        clock.advance(0.04)
        serving.work_started()  # its change
        serving.finished()
        clock.advance(0.01)
        serving.work_finished()
    assert not serving.saturated()


def test_a_client_crowds_the_fan_out_from_its_first_posts_where_watchers_wait() -> None:
    """Back to back into a watched conversation, then into one nobody watches, then into
    the watched one again: the posts nobody watched say nothing about crowding, so the
    fan-out knows within three posts that this client crowds it (not after its share of
    crowded requests has climbed back from nothing, each change delivered on its own
    meanwhile)."""
    clock = Clock()
    serving = Serving(clock)

    def post(in_flight: float = 0.011, between: float = 0.009) -> None:
        serving.started()
        clock.advance(in_flight)
        serving.finished()
        clock.advance(between)

    for _ in range(80):  # watched: every post's change is being delivered as the next comes
        serving.work_started()
        post()
        serving.work_finished()
    assert serving.saturated()
    clock.advance(0.1)  # every watcher holds the last message
    for _ in range(80):  # into a conversation nobody watches: the fan-out has nothing to do
        post()
    clock.advance(0.1)
    serving.work_started()  # watched again: the first posts' changes are being delivered
    for _ in range(3):
        post(in_flight=0.018, between=0.002)  # the requests slowed by the deliveries
    assert serving.saturated()  # the next change waits for the requests


def test_an_agent_whose_posts_follow_its_frames_never_crowds_however_it_posted_before() -> None:
    clock = Clock()
    serving = Serving(clock)
    for _ in range(80):  # back to back while watched: saturated
        serving.work_started()
        serving.started()
        clock.advance(0.011)
        serving.finished()
        clock.advance(0.009)
        serving.work_finished()
    for _ in range(10):  # then an agent: each post 20 ms after its frame went out
        serving.work_started()
        clock.advance(0.02)
        serving.work_finished()
        clock.advance(0.02)
        serving.started()
        clock.advance(0.011)
        serving.finished()
    assert not serving.saturated()


def test_overlapping_requests_saturate() -> None:
    clock = Clock()
    serving = Serving(clock)
    serving.working = 1
    serving.started()
    for _ in range(30):  # two clients: each request starts while the other's is in flight
        clock.advance(0.02)
        serving.started()
        clock.advance(0.02)
        serving.finished()
    assert serving.in_flight == 1 and serving.saturated()
    serving.finished()
    assert serving.saturated()  # just now
    clock.advance(0.2)
    assert not serving.saturated()


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


def test_a_report_longer_than_a_page_or_the_cap_is_refused_unread() -> None:
    # A page holds at most DOCUMENT messages: a longer report is no page's.
    window = list(range(page_windows.DOCUMENT))
    report = parse_report(f'{{"type": "resume", "from": 10, "counts": {window}}}')
    assert report == Report(10, window, True)
    with pytest.raises(RefusedReport, match="301 positions"):
        parse_report(f'{{"type": "resume", "from": 10, "counts": {[0] * 301}}}')
    # Over the cap it is not even parsed: nonsense is refused like a report.
    with pytest.raises(RefusedReport, match="characters"):
        parse_report("x" * (CLIENT_BYTES + 1))
    assert parse_report("x" * CLIENT_BYTES) is None


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

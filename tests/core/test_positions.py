"""Window and position arithmetic (docs/contract.md §4 Bounds), and text previews: pure, no
database."""

from __future__ import annotations

from conversations.core import page_windows
from conversations.core.counting import preview


def test_a_conversation_opens_on_its_last_window() -> None:
    assert page_windows.tail(5000) == range(4900, 5000)
    assert page_windows.tail(30) == range(0, 30)
    assert page_windows.tail(0) == range(0, 0)


def test_a_deep_link_window_holds_its_target_centred_where_it_can_be() -> None:
    assert page_windows.around(10, 5000) == range(0, 100)
    assert page_windows.around(2500, 5000) == range(2450, 2550)
    assert page_windows.around(4990, 5000) == range(4900, 5000)
    assert page_windows.around(9999, 5000) == range(4900, 5000)  # past the end: the tail
    assert page_windows.around(3, 5) == range(0, 5)
    for target in (0, 1, 49, 50, 51, 4999):
        assert target in page_windows.around(target, 5000)


def test_earlier_and_later_windows_sit_just_beside_one() -> None:
    assert page_windows.before(100) == range(0, 100)
    assert page_windows.before(250) == range(150, 250)
    assert page_windows.before(0) == range(0, 0)
    assert page_windows.after(99, 5000) == range(100, 200)
    assert page_windows.after(4950, 5000) == range(4951, 5000)
    assert page_windows.after(4999, 5000) == range(5000, 5000)


def test_resume_resends_exactly_the_stale_messages_in_order() -> None:
    held = {10: 2, 11: 1, 12: 3}
    current = {10: 2, 11: 4, 12: 3, 13: 1, 14: 0}
    assert page_windows.resume(held, current) == page_windows.Resend((11, 13, 14))
    assert page_windows.resume(current, current) == page_windows.Resend(())


def test_a_gap_larger_than_one_window_is_a_reload() -> None:
    held = {0: 1}
    current = dict.fromkeys(range(0, 102), 1)
    assert page_windows.resume(held, current) == page_windows.Reload()
    assert page_windows.resume(held, dict(list(current.items())[:101])) == page_windows.Resend(
        tuple(range(1, 101))
    )


def test_a_report_is_compared_over_its_own_messages_and_one_window_more() -> None:
    assert page_windows.report_span(50, 10) == range(50, 50 + 10 + page_windows.WINDOW + 1)
    # A report claiming more than a document holds is compared as a document.
    assert (
        len(page_windows.report_span(0, 10**6)) == page_windows.DOCUMENT + page_windows.WINDOW + 1
    )


def test_a_followed_tail_keeps_the_last_document() -> None:
    assert page_windows.trimmed(0, 299) == 0
    assert page_windows.trimmed(0, 300) == 1
    assert page_windows.trimmed(400, 450) == 400


def test_a_preview_is_the_start_of_its_text_bounded_in_characters_and_lines() -> None:
    assert preview.cut("short") == "short"
    assert preview.cut("x" * 70_000) == "x" * preview.CHARS
    lines = "\n".join(f"line {i}" for i in range(1000))
    cut = preview.cut(lines)
    assert lines.startswith(cut) and cut.count("\n") == preview.LINES - 1
    assert preview.cut("a\n" * 400) == "a\n" * 399 + "a"
    shown = preview.shown("x" * 70_000, 10_000_000)
    assert shown.truncated and shown.size == 10_000_000
    assert not preview.shown("abc", 3).truncated


def test_sizes_are_named_for_operators() -> None:
    assert preview.human_size(12) == "12 bytes"
    assert preview.human_size(65_537) == "65.5 kB"
    assert preview.human_size(10_485_760) == "10.5 MB"
    assert preview.size("é") == 2

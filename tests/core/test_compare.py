"""The pure comparison (docs/contract.md §9): the alignment is minimal and consistent, rows
page and fold as the page shows them, and the what-changed line. No database."""

from __future__ import annotations

import difflib
import random
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from conversations.core import compare
from conversations.core.compare import Alignment, Fold, Shown, Summary, align, fold

# Few distinct signatures, so that long runs of repeated ones come up.
runs = st.lists(st.integers(min_value=0, max_value=3), max_size=40)


def lcs(a: list[int], b: list[int]) -> int:
    """The longest common subsequence's length, by the textbook table."""
    row = [0] * (len(b) + 1)
    for x in a:
        prev = 0
        for j, y in enumerate(b):
            cur = row[j + 1]
            row[j + 1] = prev + 1 if x == y else max(row[j + 1], row[j])
            prev = cur
    return row[-1]


def assert_consistent(alignment: Alignment, a: list[int], b: list[int]) -> None:
    rows = alignment.rows()
    assert len(rows) == alignment.total_rows
    assert [r[0] for r in rows if r[0] is not None] == list(range(len(a)))
    assert [r[1] for r in rows if r[1] is not None] == list(range(len(b)))
    for a_seq, b_seq in rows:
        if a_seq is not None and b_seq is not None:
            assert a[a_seq] == b[b_seq]


@settings(max_examples=400, deadline=None)
@given(runs, runs)
def test_the_alignment_is_minimal_and_consistent(a: list[int], b: list[int]) -> None:
    alignment = align(a, b)
    assert_consistent(alignment, a, b)
    assert alignment.minimal
    # Minimal: as many pairs as the longest common subsequence, so as few lone messages.
    assert alignment.paired == lcs(a, b)


@settings(max_examples=200, deadline=None)
@given(runs, st.lists(st.tuples(st.integers(0, 40), st.sampled_from("sid")), max_size=4))
def test_a_few_edits_cost_at_most_their_number(a: list[int], edits) -> None:
    b = list(a)
    for where, op in edits:
        where = min(where, len(b))
        if op == "i":
            b.insert(where, 9)
        elif b and where < len(b):
            if op == "s":
                b[where] = 9
            else:
                del b[where]
    alignment = align(a, b)
    assert_consistent(alignment, a, b)
    lone = alignment.total_rows - alignment.paired
    assert lone <= 2 * len(edits)


@settings(max_examples=200, deadline=None)
@given(runs, runs, st.integers(0, 50), st.integers(1, 30))
def test_any_slice_of_rows_is_the_same_slice_of_all(a, b, start, length) -> None:
    alignment = align(a, b)
    every = alignment.rows()
    assert alignment.rows(start, start + length) == every[start : start + length]
    for number, (a_seq, b_seq) in enumerate(every):
        assert alignment.row_of(a_seq, b_seq) == number


def test_long_runs_of_repeated_signatures_align_where_a_greedy_matcher_does_not() -> None:
    """Two 10,000-message runs (call, result, call, result…) with 20 scattered edits: every
    row but the edited ones is a pair. difflib's matcher misaligns most of them."""
    rnd = random.Random(7)
    a = [0, 1, 2, 1, 2, 1, 2, 3] * 1250
    b = list(a)
    for _ in range(20):
        where = rnd.randrange(len(b))
        match rnd.choice("sid"):
            case "s":
                b[where] = 9
            case "i":
                b.insert(where, 9)
            case _:
                del b[where]
    alignment = align(a, b)
    assert_consistent(alignment, a, b)
    assert alignment.total_rows - alignment.paired <= 40
    matcher = difflib.SequenceMatcher(None, a, b)
    greedy = sum(block.size for block in matcher.get_matching_blocks())
    assert greedy < alignment.paired - 1000  # the reason this is not difflib


def test_runs_that_share_nothing_stand_alone() -> None:
    alignment = align([0, 0, 0], [1, 1])
    assert alignment.rows() == [(0, None), (1, None), (2, None), (None, 0), (None, 1)]
    assert alignment.first_unpaired() == 0


def test_out_of_budget_the_alignment_is_still_consistent() -> None:
    rnd = random.Random(3)
    a = [rnd.randrange(5) for _ in range(3000)]
    b = [rnd.randrange(5) for _ in range(3000)]
    alignment = align(a, b, steps=10_000)
    assert not alignment.minimal
    assert_consistent(alignment, a, b)


def test_pages_hold_500_rows() -> None:
    alignment = align(list(range(1200)), list(range(1200)))
    assert alignment.pages == 3
    assert len(alignment.rows(0, 500)) == 500
    assert align([], []).pages == 1


def test_identical_runs_fold_to_one_line_and_a_difference_keeps_its_neighbours() -> None:
    rows = [(i, i) for i in range(30)]
    assert fold(0, rows, [True] * 30) == [Fold(0, 30, 0, 0)]
    same = [True] * 30
    same[20] = False
    shown = fold(100, rows, same)
    assert shown == [
        Fold(100, 19, 0, 0),  # "19 identical messages"
        Shown(119, 19, 19, True),
        Shown(120, 20, 20, False),
        Shown(121, 21, 21, True),
        Fold(122, 8, 22, 22),
    ]
    # Two identical pairs between differences stay shown: too short to fold.
    few = fold(0, [(0, 0), (1, 1), (2, 2), (3, 3)], [False, True, True, False])
    assert all(isinstance(item, Shown) for item in few)


def summary(**changes) -> Summary:
    base = {"messages": 10, "tokens": 1000, "tool_calls": {}, "errors": 0, "duration_s": 1.0}
    return Summary(**(base | changes))


def test_what_changed_says_where_which_tools_and_how_much() -> None:
    line = compare.what_changed(
        summary(),
        summary(messages=11, errors=1, tokens=4120),
        first=(22, 22),
        swaps=[(22, 22, ("read_file",), ("grep",))],
        swaps_total=1,
    )
    assert line == (
        "The runs part at A #22 and B #22; B called `grep` where A called `read_file` at #22; "
        "B has 1 more message; B has 1 more error; B's next request is 3,120 tokens larger."
    )
    assert compare.what_changed(summary(), summary(), None, [], 0) == (
        "The runs are the same throughout."
    )
    assert "(A ends before)" in compare.what_changed(summary(), summary(), (None, 4), [], 0)


def test_a_source_timestamp_is_preferred_to_the_stored_time() -> None:
    stored = datetime(2026, 1, 1, tzinfo=UTC)
    written = compare.moment({"timestamp": "2025-06-01T10:00:00.500Z"}, stored)
    assert written == datetime(2025, 6, 1, 10, 0, 0, 500000, tzinfo=UTC)
    assert compare.moment({"timestamp": "yesterday"}, stored) == stored
    assert compare.moment({"timestamp": "2025-06-01T10:00:00"}, stored) == stored  # no zone
    assert compare.duration(stored, written) < 0 or compare.duration(written, stored) > 0


def test_a_summary_lists_the_most_called_tools_first() -> None:
    counts = {f"tool{i}": i for i in range(150)}
    top = compare.top_tools(counts)
    assert len(top) == compare.TOOL_NAMES_SHOWN
    assert next(iter(top)) == "tool149"


def test_an_opened_fold_shows_its_run_whole() -> None:
    rows = [(i, i) for i in range(10)]
    same = [True] * 10
    assert fold(0, rows, same, unfolded=0) == [Shown(i, i, i, True) for i in range(10)]
    same[5] = False
    opened = fold(0, rows, same, unfolded=7)
    assert opened[0] == Fold(0, 4, 0, 0)
    assert [item.row for item in opened[1:]] == [4, 5, 6, 7, 8, 9]


def test_what_changed_words_one_token_in_the_singular() -> None:
    line = compare.what_changed(summary(), summary(tokens=1001), (3, 3), [], 0)
    assert line.endswith("B's next request is 1 token larger.")
    many = compare.what_changed(summary(), summary(tokens=143431), (3, 3), [], 0)
    assert many.endswith("B's next request is 142,431 tokens larger.")

"""Presenters are pure: handed plain values, they need no database (no `django_db` mark, so
pytest-django refuses any query), and what they compute is what the pages print."""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.utils import timezone

from conversations.dashboard.presenters.listing import conversation_rows, list_summary
from conversations.record.reads.rows import SearchHit
from conversations.sharing.presenters import shares_panel


@dataclass
class PlainConversation:
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    title: str = "plain"
    metadata: Any = field(default_factory=dict)
    message_count: int = 1204
    error_count: int = 3
    unanswered_calls: int = 1
    model: str = ""
    updated_at: datetime = field(default_factory=timezone.now)

    def get_absolute_url(self) -> str:
        return f"/c/{self.id}/"


@dataclass
class PlainLink:
    pk: int = 7
    created_at: datetime = datetime(2025, 1, 1, tzinfo=UTC)
    up_to_seq: int | None = 4
    toggles_label: str = "vision on · OpenAI"
    expires_at: datetime | None = None
    view_count: int = 2
    last_viewed_at: datetime | None = None

    def state(self, now: datetime) -> str:
        return "active"


def test_list_rows_are_presented_from_plain_values_and_a_search_hit() -> None:
    c = PlainConversation(
        metadata={"model": "gpt-4o"}, updated_at=timezone.now() - timedelta(hours=3)
    )
    (row,) = conversation_rows([c], hits={c.id: SearchHit(12, 0, "a needle here")})
    assert row.model == "gpt-4o"  # from its metadata, when no message names one
    assert (row.messages, row.errors, row.unanswered) == ("1,204", "3", True)
    assert row.relative == "3\xa0hours ago"  # timesince keeps the number with its unit
    assert (row.hit_url, row.hit_label, row.snippet) == (
        f"/c/{c.id}/#m-12",
        "message 12",
        "a needle here",
    )
    (plain,) = conversation_rows([PlainConversation(error_count=0)])
    assert (plain.errors, plain.hit_url) == ("", "")


def test_the_share_panel_lists_the_links_it_is_handed() -> None:
    c = PlainConversation()
    panel = shares_panel(c, [PlainLink(), PlainLink(pk=8, up_to_seq=None)])
    assert [r.scope for r in panel["share_rows"]] == ["frozen, #0 to #4", "live, whole"]
    assert panel["share_rows"][0].revoke_url == f"/c/{c.id}/shares/7/revoke"
    assert panel["last_seq_stored"] == 1203


def test_the_list_summary_counts_what_a_search_or_filter_found() -> None:
    from django.core.paginator import Paginator

    from conversations.core.list_status import ListFilters

    class Capped(Paginator):  # type: ignore[type-arg]
        capped = True  # as selectors.CappedPaginator says when its count stopped

    def page(count: int, paginator: Any = Paginator) -> Any:
        return paginator(list(range(count)), 25).get_page(1)

    errors = ListFilters(has_errors=True)
    assert list_summary(page(1), q="disk", filters=ListFilters()) == (
        "1 conversation matches “disk”"
    )
    assert list_summary(page(1234), q="", filters=errors) == (
        "1,234 conversations match these filters"
    )
    assert list_summary(page(3), q="", filters=ListFilters()) == "3 conversations"
    assert list_summary(page(0), q="<b>x</b>", filters=ListFilters()) == (
        "No conversation matches “<b>x</b>”."  # the template escapes it; the script sets text
    )
    capped = Capped(list(range(20)), 25).get_page(1)
    assert list_summary(capped, q="the", filters=errors) == (
        "20+ conversations match “the” with these filters"
    )


def test_message_and_block_paths_are_the_ones_reverse_builds_under_any_prefix() -> None:
    """A frame builds each message's and block's URL from its conversation's path, reversed
    once: the shapes must stay urls.py's, on the dashboard and under a share link's prefix."""
    from django.urls import reverse

    from conversations.dashboard import share_pages
    from conversations.web import links

    cid = uuid.uuid4()
    for scope in (None, "tok_en-1"):
        with share_pages.scoped_urls(scope) if scope else contextlib.nullcontext():
            for name, shape in links.MESSAGE_PATHS.items():
                args: list[Any] = [str(cid), 12, 3] if "{block}" in shape else [str(cid), 12]
                built = links.message_path(name, cid, 12, 3)
                assert built == reverse(name, args=args), (scope, name)
                assert built.startswith(f"/s/{scope}/c/" if scope else "/c/")
            wire = links.wire_text_url(cid, 5, vision=False, shape="anthropic", part=None)
            assert wire == reverse("wire-text", args=[str(cid), 5]) + "?vision=0&shape=anthropic"
            assert links.message_blocks_url(cid, 5, 100).endswith("/m/5/blocks?from=100")


def test_every_count_is_worded_by_one_helper_with_separators() -> None:
    """One helper words a number and its noun (docs/contract.md §4): the singular for one,
    thousands separators always."""
    from conversations.core.counting import words

    assert words.count(1, "token") == "1 token"
    assert words.count(0, "block") == "0 blocks"
    assert words.count(142431, "token") == "142,431 tokens"
    assert words.count(-1, "message") == "-1 message"
    assert words.count(2, "match", "matches") == "2 matches"


def test_a_compaction_boundary_says_its_tokens_with_separators() -> None:
    from conversations.dashboard.presenters.metadata import boundary

    marker = {"compact_boundary": {"trigger": "auto", "preTokens": 142431}}
    assert boundary(marker) == (
        "Compacted here (auto) from 142,431 tokens: the model receives what follows"
    )
    assert "from 1 token:" in boundary({"compact_boundary": {"preTokens": 1}})


def test_the_measured_input_and_usage_are_worded_without_a_bare_multiplier() -> None:
    from types import SimpleNamespace

    from conversations.core.counting import tokens
    from conversations.dashboard.presenters import pressure
    from conversations.record.reads.rows import Counted, MeasuredInput

    p = SimpleNamespace(measured=MeasuredInput(seq=5, input=45263, estimate=280))
    line = pressure.measured_input(p)  # type: ignore[arg-type]
    assert "×" not in line
    assert line == (
        "measured input of #5: 45,263 tokens vs ≈280 estimated (161.65 times the estimate)"
    )
    count = tokens.MessageCount(tokens=67, by_kind={"text": 57}, framing=10, blocks=(57,))
    counted = Counted(5, "assistant", count, tokens.Usage(input=1234, output=58), "gpt-4o")
    usage = pressure.tokens_view(counted).usage
    assert "×" not in usage
    assert usage == "measured 1,234 in · 58 out (1.02 times the ≈57 estimated)"


def next_of(basis: str, boundary: int | None) -> Any:
    from types import SimpleNamespace

    from conversations.core.counting import next_request as nr

    head = SimpleNamespace(
        next=nr.NextRequest(
            tokens=900, basis=basis, measured_seq=None, measured=None, since=0, factor=1.0
        ),
        unrecorded=SimpleNamespace(tokens=0),
        boundary=boundary,
    )
    return SimpleNamespace(headline=head)


def test_the_last_boundary_is_named_only_where_one_exists() -> None:
    from conversations.dashboard.presenters.pressure import next_note

    assert next_note(next_of("estimated", None)) == (
        "estimated from the record alone (no measured usage)"
    )
    assert next_note(next_of("estimated", 7)) == (
        "estimated from the record alone (no measured usage after the last boundary)"
    )

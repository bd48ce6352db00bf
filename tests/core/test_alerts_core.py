"""Alerts' pure rules (docs/contract.md §11): no database, no server, no `sleep`."""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta

from conversations.core import alerts


def test_a_match_is_in_the_title_or_the_source_whatever_the_case() -> None:
    assert alerts.matches("", "anything", {})
    assert alerts.matches("PROD", "nightly prod run", {})
    assert alerts.matches("prod", "run", {"source": "claude-code:Prod"})
    assert not alerts.matches("prod", "staging", {"source": 42})
    assert not alerts.matches("prod", "staging", "not a dict")


def test_pressure_is_reached_at_the_threshold_and_never_without_a_window() -> None:
    assert alerts.pressure_reached(80, 100, 80)
    assert not alerts.pressure_reached(79, 100, 80)
    assert not alerts.pressure_reached(10**9, None, 80)
    assert not alerts.pressure_reached(10, 0, 80)
    assert "80% of the 100-token window (threshold 80%)" in alerts.pressure_detail(80, 100, 80)


def test_retries_double_from_the_first_wait_until_24_hours_after_firing() -> None:
    fired = datetime(2026, 12, 2, tzinfo=UTC)
    assert alerts.next_attempt(fired, 1, 30, fired) == fired + timedelta(seconds=30)
    assert alerts.next_attempt(fired, 3, 30, fired) == fired + timedelta(seconds=120)
    late = fired + timedelta(hours=23, minutes=59)
    assert alerts.next_attempt(fired, 12, 30, late) is None


def test_the_signature_is_the_hmac_sha256_of_the_body() -> None:
    body = b'{"id": 1}'
    expected = hmac.new(b"secret", body, hashlib.sha256).hexdigest()
    assert alerts.signature("secret", body) == f"sha256={expected}"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_pressure_is_evaluated_at_most_every_few_seconds_and_never_forgotten() -> None:
    clock = Clock()
    turns = alerts.PressureTurns(clock, every=2.0)
    assert turns.take(["a", "b"]) == ({"a", "b"}, set())
    clock.now += 0.5
    assert turns.take(["a"]) == (set(), set())  # too soon: remembered
    assert turns.waiting
    clock.now += 1.0
    assert turns.take([]) == (set(), set())
    clock.now += 0.6  # a's turn has come, with nothing new written
    assert turns.take([]) == (set(), {"a"})
    assert not turns.waiting
    clock.now += 10
    assert turns.take(["b"]) == ({"b"}, set())
    assert set(turns.last) == {"b"}  # only the recently active are held

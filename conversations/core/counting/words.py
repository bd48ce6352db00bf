"""Numbers as the pages word them (docs/contract.md §4): pure (no Django)."""

from __future__ import annotations


def noun(n: int, one: str, many: str | None = None) -> str:
    """The noun for `n` of it: `one` for 1 (or -1), else `many` (`one` + "s" unless given)."""
    return one if abs(n) == 1 else (many if many is not None else one + "s")


def count(n: int, one: str, many: str | None = None) -> str:
    """`n` with thousands separators and its noun: "1 token", "142,431 tokens"."""
    return f"{n:,} {noun(n, one, many)}"

"""Comparing two runs (docs/contract.md §9): messages aligned by a minimal diff over their
signatures, unchanged runs folded, and the short account of what changed. Pure.

A message's signature is its role, its blocks' kinds in order and the names of its tool
uses. The alignment is Myers' O((n+m)·d) diff in linear space (the middle-snake split,
applied recursively), so two runs of the same task that differ in a few places align in
a few passes over their signatures whatever their length; long runs of repeated
signatures (call, result, call, result…) are exactly where a greedy matcher goes wrong.
Runs that differ almost everywhere stop being searched for a minimal script after
`STEP_BUDGET` diagonal steps: past that the alignment is still consistent (every message
once, in order, pairs of equal signatures), no longer guaranteed minimal.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TypeAlias

from conversations.core.counting import words

Signature: TypeAlias = tuple[str, tuple[str, ...], tuple[str, ...]]  # role, kinds, tool names
Run: TypeAlias = tuple[int, int, int]  # a paired stretch: (a start, b start, length)
Row: TypeAlias = tuple[int | None, int | None]  # (a seq, b seq); None: no partner

PAGE_ROWS = 500  # rows of one page (docs/contract.md §9)
STEP_BUDGET = 2_000_000  # diagonal steps one alignment may take before it stops minimising
FOLD_MIN = 3  # a run of this many identical pairs or more is folded…
FOLD_CONTEXT = 1  # …but for this many beside each difference
TOOL_NAMES_SHOWN = 100  # tool names a summary lists (the most called)
PICK_LIMIT = 20  # conversations the picker lists in each of its lists
_WIDTH = array("i").itemsize


def signature(role: str, kinds: Sequence[str], tool_names: Sequence[str]) -> Signature:
    """What two messages must share to be paired: role, block kinds in order, the names of
    their tool uses in order."""
    return (role, tuple(kinds), tuple(tool_names))


class Interner:
    """Signatures as small integers, the same integer for the same signature across both
    runs, so the diff compares ints (and runs of them as bytes)."""

    def __init__(self) -> None:
        self.ids: dict[Signature, int] = {}
        self.signatures: list[Signature] = []

    def __call__(self, sig: Signature) -> int:
        found = self.ids.get(sig)
        if found is None:
            found = self.ids[sig] = len(self.signatures)
            self.signatures.append(sig)
        return found


@dataclass(frozen=True, slots=True)
class Alignment:
    """Every message of run A (`n` of them) and of run B (`m`) once, in order: the paired
    stretches are `runs`; between two, A's unpaired messages come first, then B's."""

    n: int
    m: int
    runs: tuple[Run, ...]
    minimal: bool = True  # False when STEP_BUDGET ran out before the script was minimal

    @property
    def paired(self) -> int:
        return sum(length for _, _, length in self.runs)

    @property
    def total_rows(self) -> int:
        return self.n + self.m - self.paired

    @property
    def pages(self) -> int:
        return max(1, -(-self.total_rows // PAGE_ROWS))

    def rows(self, start: int = 0, stop: int | None = None) -> list[Row]:
        """Rows `start` to `stop` (row numbers from 0): O(number of runs + rows)."""
        stop = self.total_rows if stop is None else min(stop, self.total_rows)
        out: list[Row] = []
        for first, kind, lo, length in self._stretches():
            if first >= stop:
                break
            if first + length <= start:
                continue
            for k in range(max(start - first, 0), min(stop - first, length)):
                out.append(_row(kind, lo, k))
        return out

    def _stretches(self) -> Iterator[tuple[int, str, tuple[int, int], int]]:
        """(first row, kind, start seqs, length) for each stretch of A-only, B-only and
        paired rows, in row order."""
        row, i, j = 0, 0, 0
        for a, b, length in (*self.runs, (self.n, self.m, 0)):
            if a > i:
                yield row, "a", (i, j), a - i
                row += a - i
            if b > j:
                yield row, "b", (a, j), b - j
                row += b - j
            if length:
                yield row, "pair", (a, b), length
                row += length
            i, j = a + length, b + length

    def first_unpaired(self) -> int | None:
        """The row number of the first message without a partner, if any."""
        for first, kind, _lo, _length in self._stretches():
            if kind != "pair":
                return first
        return None

    def row_of(self, a_seq: int | None, b_seq: int | None) -> int | None:
        """The row holding A's message `a_seq` (or else B's `b_seq`)."""
        for first, kind, (i, j), length in self._stretches():
            if kind in ("a", "pair") and a_seq is not None and i <= a_seq < i + length:
                return first + a_seq - i
            if kind in ("b", "pair") and b_seq is not None and j <= b_seq < j + length:
                return first + b_seq - j
        return None

    def gaps(self) -> Iterator[tuple[range, range]]:
        """Each place where the runs part: A's unpaired seqs there and B's (one may be empty)."""
        i, j = 0, 0
        for a, b, length in (*self.runs, (self.n, self.m, 0)):
            if a > i or b > j:
                yield range(i, a), range(j, b)
            i, j = a + length, b + length


def _row(kind: str, lo: tuple[int, int], k: int) -> Row:
    if kind == "a":
        return (lo[0] + k, None)
    if kind == "b":
        return (None, lo[1] + k)
    return (lo[0] + k, lo[1] + k)


# The diff.


class _Seq:
    """One run's signature ids, as a list (single compares) and as bytes (runs compared
    in C, galloping, so a long common stretch costs a few slices, not a Python loop)."""

    def __init__(self, ids: Sequence[int]) -> None:
        self.items = list(ids)
        self.raw = array("i", self.items).tobytes()

    def chunk(self, start: int, length: int) -> bytes:
        return self.raw[start * _WIDTH : (start + length) * _WIDTH]


def _forward(a: _Seq, b: _Seq, x: int, y: int, limit: int) -> int:
    """How many signatures a[x:] and b[y:] share at their start (at most `limit`)."""
    if limit <= 0 or a.items[x] != b.items[y]:
        return 0
    good, step = 1, 2
    while good < limit:
        size = min(step, limit)
        if a.chunk(x, size) != b.chunk(y, size):
            bad = size
            while bad - good > 1:  # good matches, bad does not
                mid = (good + bad) // 2
                if a.chunk(x, mid) == b.chunk(y, mid):
                    good = mid
                else:
                    bad = mid
            return good
        good, step = size, step * 2
    return good


def _backward(a: _Seq, b: _Seq, x: int, y: int, limit: int) -> int:
    """How many signatures a[:x] and b[:y] share at their end (at most `limit`)."""
    if limit <= 0 or a.items[x - 1] != b.items[y - 1]:
        return 0
    good, step = 1, 2
    while good < limit:
        size = min(step, limit)
        if a.chunk(x - size, size) != b.chunk(y - size, size):
            bad = size
            while bad - good > 1:
                mid = (good + bad) // 2
                if a.chunk(x - mid, mid) == b.chunk(y - mid, mid):
                    good = mid
                else:
                    bad = mid
            return good
        good, step = size, step * 2
    return good


class _Budget:
    def __init__(self, steps: int) -> None:
        self.left = steps
        self.spent_out = False


def _split(
    a: _Seq, b: _Seq, alo: int, ahi: int, blo: int, bhi: int, budget: _Budget
) -> tuple[int, int] | None:
    """Where a minimal script of a[alo:ahi] → b[blo:bhi] passes (Myers' middle snake), as
    absolute (x, y); None when the two share nothing. Both ranges are non-empty and share
    no first and no last signature. Out of budget, the furthest point reached."""
    n, m = ahi - alo, bhi - blo
    max_d = (n + m + 1) // 2
    offset = max_d + 1
    size = 2 * max_d + 3
    v1 = [-1] * size
    v2 = [-1] * size
    v1[offset + 1] = 0
    v2[offset + 1] = 0
    delta = n - m
    front = delta % 2 != 0
    k1start = k1end = k2start = k2end = 0
    best: tuple[int, int] | None = None
    for d in range(max_d + 1):
        if budget.left <= 0:
            budget.spent_out = True
            return best
        budget.left -= 2 * d + 1
        for k1 in range(-d + k1start, d + 1 - k1end, 2):
            k1_offset = offset + k1
            if k1 == -d or (k1 != d and v1[k1_offset - 1] < v1[k1_offset + 1]):
                x1 = v1[k1_offset + 1]
            else:
                x1 = v1[k1_offset - 1] + 1
            y1 = x1 - k1
            if x1 < n and y1 < m:
                run = _forward(a, b, alo + x1, blo + y1, min(n - x1, m - y1))
                x1 += run
                y1 += run
            v1[k1_offset] = x1
            if x1 > n:
                k1end += 2
            elif y1 > m:
                k1start += 2
            else:
                if 0 < x1 + y1 < n + m and (
                    best is None or x1 + y1 > best[0] - alo + best[1] - blo
                ):
                    best = (alo + x1, blo + y1)
                if front:
                    k2_offset = offset + delta - k1
                    if 0 <= k2_offset < size and v2[k2_offset] != -1 and x1 >= n - v2[k2_offset]:
                        return alo + x1, blo + y1
        for k2 in range(-d + k2start, d + 1 - k2end, 2):
            k2_offset = offset + k2
            if k2 == -d or (k2 != d and v2[k2_offset - 1] < v2[k2_offset + 1]):
                x2 = v2[k2_offset + 1]
            else:
                x2 = v2[k2_offset - 1] + 1
            y2 = x2 - k2
            if x2 < n and y2 < m:
                run = _backward(a, b, ahi - x2, bhi - y2, min(n - x2, m - y2))
                x2 += run
                y2 += run
            v2[k2_offset] = x2
            if x2 > n:
                k2end += 2
            elif y2 > m:
                k2start += 2
            elif not front:
                k1_offset = offset + delta - k2
                if 0 <= k1_offset < size and v1[k1_offset] != -1:
                    x1 = v1[k1_offset]
                    y1 = offset + x1 - k1_offset
                    if x1 >= n - x2:
                        return alo + x1, blo + y1
    return best


def align(a: Sequence[int], b: Sequence[int], *, steps: int = STEP_BUDGET) -> Alignment:
    """A minimal alignment of two runs' signature ids (equal ids pair): common starts and
    ends are taken first, then the middle is split where a minimal script passes, and so
    on down. After `steps` diagonal steps the splits are the furthest points reached and,
    once nothing is left, the rest stands unpaired (`minimal` False)."""
    sa, sb = _Seq(a), _Seq(b)
    budget = _Budget(steps)
    found: list[Run] = []
    stack: list[tuple[int, int, int, int] | Run] = [(0, len(a), 0, len(b))]
    while stack:
        item = stack.pop()
        if len(item) == 3:
            found.append(item)  # a common end, put back to come after its middle
            continue
        alo, ahi, blo, bhi = item
        head = _forward(sa, sb, alo, blo, min(ahi - alo, bhi - blo)) if alo < ahi else 0
        if head:
            found.append((alo, blo, head))
            alo, blo = alo + head, blo + head
        tail = _backward(sa, sb, ahi, bhi, min(ahi - alo, bhi - blo)) if alo < ahi else 0
        if tail:
            stack.append((ahi - tail, bhi - tail, tail))
            ahi, bhi = ahi - tail, bhi - tail
        if alo == ahi or blo == bhi:
            continue
        where = _split(sa, sb, alo, ahi, blo, bhi, budget)
        if where is None:
            continue
        x, y = where
        stack.append((x, ahi, y, bhi))
        stack.append((alo, x, blo, y))
    return Alignment(len(a), len(b), _merged(found), minimal=not budget.spent_out)


def _merged(runs: list[Run]) -> tuple[Run, ...]:
    out: list[Run] = []
    for a, b, length in runs:
        if out and out[-1][0] + out[-1][2] == a and out[-1][1] + out[-1][2] == b:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + length)
        else:
            out.append((a, b, length))
    return tuple(out)


# Folding.


@dataclass(frozen=True, slots=True)
class Shown:
    """A row the page shows: its seqs and whether the pair is `same`."""

    row: int
    a_seq: int | None
    b_seq: int | None
    same: bool


@dataclass(frozen=True, slots=True)
class Fold:
    """A run of identical pairs the page folds: `count` of them, from (a_first, b_first)."""

    row: int
    count: int
    a_first: int
    b_first: int

    @property
    def a_last(self) -> int:
        return self.a_first + self.count - 1

    @property
    def b_last(self) -> int:
        return self.b_first + self.count - 1


def fold(
    first_row: int, rows: Sequence[Row], same: Sequence[bool], *, unfolded: int | None = None
) -> list[Shown | Fold]:
    """The rows of a page with each run of at least FOLD_MIN identical pairs folded, but for
    FOLD_CONTEXT of them beside a difference (a page's edges are no difference); the run
    holding row `unfolded` is shown whole."""
    out: list[Shown | Fold] = []
    k = 0
    while k < len(rows):
        if not same[k]:
            a_seq, b_seq = rows[k]
            out.append(Shown(first_row + k, a_seq, b_seq, False))
            k += 1
            continue
        end = k
        while end < len(rows) and same[end]:
            end += 1
        lead = FOLD_CONTEXT if k > 0 else 0
        trail = FOLD_CONTEXT if end < len(rows) else 0
        folded = range(k + lead, end - trail)
        opened = unfolded is not None and first_row + k <= unfolded < first_row + end
        if len(folded) < FOLD_MIN or opened:
            folded = range(k, k)
        for i in range(k, end):
            if i == folded.start and len(folded):
                a_seq, b_seq = rows[i]
                assert a_seq is not None and b_seq is not None
                out.append(Fold(first_row + i, len(folded), a_seq, b_seq))
            if i not in folded:
                a_seq, b_seq = rows[i]
                out.append(Shown(first_row + i, a_seq, b_seq, True))
        k = end
    return out


@dataclass(frozen=True, slots=True)
class MessageText:
    """The start of a message's projection as one text, whether it is cut, and its role."""

    role: str
    text: str
    cut: bool


# Summaries and what changed.


@dataclass(frozen=True, slots=True)
class Summary:
    """One run as docs/contract.md §9 sums it up."""

    messages: int
    tokens: int  # the next request's (docs/contract.md §7)
    tool_calls: Mapping[str, int]
    errors: int
    duration_s: float | None

    def as_json(self) -> dict[str, object]:
        return {
            "messages": self.messages,
            "tokens": self.tokens,
            "tool_calls": dict(self.tool_calls),
            "errors": self.errors,
            "duration_s": self.duration_s,
        }


def top_tools(counts: Mapping[str, int]) -> dict[str, int]:
    """The TOOL_NAMES_SHOWN most called tool names (by count, then name), most first."""
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return dict(ranked[:TOOL_NAMES_SHOWN])


def moment(metadata: object, created_at: datetime) -> datetime:
    """When a message was written: its source `timestamp` (ISO 8601) where the metadata
    holds one, else when it was stored."""
    if isinstance(metadata, dict):
        stamp = metadata.get("timestamp")
        if isinstance(stamp, str):
            try:
                parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
            except ValueError:
                parsed = None
            if parsed is not None and parsed.tzinfo is not None:
                return parsed
    return created_at


def duration(first: datetime | None, last: datetime | None) -> float | None:
    if first is None or last is None:
        return None
    return round((last - first).total_seconds(), 3)


def substitutions(
    alignment: Alignment, a_ids: Sequence[int], b_ids: Sequence[int], table: Sequence[Signature]
) -> Iterator[tuple[int, int, tuple[str, ...], tuple[str, ...]]]:
    """Places where one run called other tools than the other: a lone message on each side
    with the same role, both with tool uses, named differently — (a seq, b seq, A's tool
    names, B's)."""
    for a_range, b_range in alignment.gaps():
        for a_seq, b_seq in zip(a_range, b_range, strict=False):
            a_sig, b_sig = table[a_ids[a_seq]], table[b_ids[b_seq]]
            if a_sig[0] == b_sig[0] and a_sig[2] and b_sig[2] and a_sig[2] != b_sig[2]:
                yield a_seq, b_seq, a_sig[2], b_sig[2]


def _names(names: tuple[str, ...]) -> str:
    return ", ".join(f"`{n}`" for n in dict.fromkeys(names))


def _more(n: int, one: str, more: str, fewer: str) -> str:
    return f"B has {abs(n):,} {more if n > 0 else fewer} {words.noun(n, one)}"


def what_changed(
    a: Summary,
    b: Summary,
    first: Row | None,
    swaps: Sequence[tuple[int, int, tuple[str, ...], tuple[str, ...]]],
    swaps_total: int,
) -> str:
    """The page's one line: where the runs part, which tools B called instead, and how B's
    messages, errors and next request differ from A's."""
    if first is None:
        return "The runs are the same throughout."
    parts: list[str] = []
    a_seq, b_seq = first
    where = {
        (True, True): f"A #{a_seq} and B #{b_seq}",
        (True, False): f"A #{a_seq} (B ends before)",
        (False, True): f"B #{b_seq} (A ends before)",
    }
    parts.append(f"The runs part at {where[(a_seq is not None, b_seq is not None)]}")
    for a_seq, b_seq, a_names, b_names in swaps:
        at = f"#{a_seq}" if a_seq == b_seq else f"A #{a_seq} / B #{b_seq}"
        parts.append(f"B called {_names(b_names)} where A called {_names(a_names)} at {at}")
    if swaps_total > len(swaps):
        parts.append(f"{words.count(swaps_total - len(swaps), 'more such substitution')}")
    if b.messages != a.messages:
        parts.append(_more(b.messages - a.messages, "message", "more", "fewer"))
    if b.errors != a.errors:
        parts.append(_more(b.errors - a.errors, "error", "more", "fewer"))
    if b.tokens != a.tokens:
        size = "larger" if b.tokens > a.tokens else "smaller"
        parts.append(f"B's next request is {words.count(abs(b.tokens - a.tokens), 'token')} {size}")
    return "; ".join(parts) + "."

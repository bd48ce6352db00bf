"""Context windows: a model id → its window, from the `genai-prices` package's table.

Pure. The table is the one Pydantic maintains for ~1,400 models (dated ids match their
model), shipped inside the package, so no lookup leaves the machine. Conversation metadata
(`context_window`, `model`) and the view's `?window=` / `?model=` override it, in that
order: view first. A source that runs a model with a window of its own says so before the
table does: Claude Code gives every model 200,000 tokens unless it ran with the 1M context
(docs/contract.md §7).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias

from conversations.core.options import OptionError

MAX_WINDOW = 100_000_000
# Claude Code's windows: its default, and the 1M context it runs with when asked (a model id
# ending in `[1m]`, the `context-1m` beta). The table's figure is the API's largest.
CLAUDE_CODE_WINDOW = 200_000
CLAUDE_CODE_1M_WINDOW = 1_000_000
CLAUDE_CODE_1M_MARKS = ("[1m]", "context-1m")
# Where a window's figure came from, as the context API's `window_source` names it.
Source: TypeAlias = Literal[
    "view", "conversation", "claude-code", "claude-code-1m", "compaction", "table"
]


@functools.lru_cache(maxsize=1024)
def window_of(model: str) -> int | None:
    """The model's context window in tokens, or None when the table does not know it."""
    from genai_prices import data_snapshot  # a 1.6 MB table: loaded on first use only

    if not model or len(model) > 200:
        return None
    try:
        _provider, info = data_snapshot.get_snapshot().find_provider_model(model, None, None, None)
    except LookupError:
        return None
    return info.context_window


def preload() -> None:
    """Load the table now (a server's start-up), not on a page's first count."""
    window_of("")


@dataclass(frozen=True, slots=True)
class Window:
    """The window a view counts against: its size (None if unknown), the model it came
    from and where the figure came from (`view`, `conversation`, `claude-code`,
    `claude-code-1m`, `compaction`, `table`); `pre_tokens` the compaction that showed it."""

    tokens: int | None
    model: str
    source: Source
    pre_tokens: int | None = None


def _window_number(value: object, name: str) -> int:
    text = str(value)
    if not re.fullmatch(r"[1-9][0-9]{0,8}", text) or int(text) > MAX_WINDOW:
        raise OptionError(
            name, f"{name} must be a whole number of tokens from 1 to {MAX_WINDOW:,}."
        )
    return int(text)


def resolve(
    query: Mapping[str, str], conversation_metadata: object, message_models: Iterable[str]
) -> Window:
    """`?window=` beats `?model=` beats the conversation's `context_window` and `model`,
    which beat the latest model a message's metadata names. OptionError on a bad query."""
    meta = conversation_metadata if isinstance(conversation_metadata, dict) else {}
    model = query.get("model", "")
    if len(model) > 200:
        raise OptionError("model", "model must be at most 200 characters.")
    if not model:
        stored = meta.get("model")
        model = stored if isinstance(stored, str) else ""
    if not model:
        model = next((m for m in message_models if m), "")
    if "window" in query:
        return Window(_window_number(query["window"], "window"), model, "view")
    if "model" not in query:
        stored_window = meta.get("context_window")
        if (
            isinstance(stored_window, int)
            and not isinstance(stored_window, bool)
            and 0 < stored_window <= MAX_WINDOW
        ):
            return Window(stored_window, model, "conversation")
    if "model" not in query:
        ran_with = claude_code_window(meta, model)
        if ran_with is not None:
            return ran_with
    return Window(window_of(model) if model else None, model, "table")


def claude_code_window(meta: Mapping[str, object], model: str) -> Window | None:
    """The window a Claude Code session ran with (None for other sources): 1M when its
    model id or `betas` name the 1M context, or when it compacted itself past 200,000
    tokens (a compaction at `preTokens` P means the window held P); else 200,000."""
    source = meta.get("import")
    if not isinstance(source, dict) or source.get("format") != "claude-code":
        return None
    betas = meta.get("betas")
    named = betas if isinstance(betas, list) else [betas]
    said = " ".join([model, *(b for b in named if isinstance(b, str))]).lower()
    if any(mark in said for mark in CLAUDE_CODE_1M_MARKS):
        return Window(CLAUDE_CODE_1M_WINDOW, model, "claude-code-1m")
    marks = meta.get("compact_boundaries")
    pre = max(
        (
            m["preTokens"]
            for m in (marks if isinstance(marks, list) else [])
            if isinstance(m, dict) and isinstance(m.get("preTokens"), int)
        ),
        default=0,
    )
    if pre > CLAUDE_CODE_WINDOW:  # the session held more than the default window
        return Window(CLAUDE_CODE_1M_WINDOW, model, "compaction", pre)
    return Window(CLAUDE_CODE_WINDOW, model, "claude-code")

"""Context windows: a model id → its window, from the `genai-prices` package's table.

Pure. The table is the one Pydantic maintains for ~1,400 models (dated ids match their
model), shipped inside the package, so no lookup leaves the machine. Conversation metadata
(`context_window`, `model`) and the view's `?window=` / `?model=` override it, in that
order: view first.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from conversations.core.options import OptionError

MAX_WINDOW = 100_000_000


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
    from and where the figure came from (`view`, `conversation`, `table`)."""

    tokens: int | None
    model: str
    source: str


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
    return Window(window_of(model) if model else None, model, "table")

"""What the dashboard templates print, computed in Python (templates loop and print).

Presenters are pure: a view (or the live render step, `live/fragments.py`) fetches
through the record's selectors and counts, then hands the rows and models to these
functions, which import no model, selector or count (the import contract in
pyproject.toml). One module a page or job:

- `messages`: each message beside its projection, bounded; the window's tool rounds
- `conversation`: the conversation page's (and a window load's) context
- `pressure`: the pressure header and the margin counts
- `listing`: the conversation list's rows, pager and empty text
- `context`, `diff`: the compaction preview and the projection diff
- `sharing`: the page's share panel
- `notes`: the notes beside a message's record
- `metadata`: the header facts read from metadata, an import's source
- `texts`, `links`: folds, cuts and their labels; URLs and toggles
- `protocols`: the attributes presenters read of a conversation and a share link
"""

from conversations.dashboard.presenters.context import (
    PREVIEW_WINDOW,
    ContextRead,
    context_blocks,
    context_page,
    window_at,
)
from conversations.dashboard.presenters.conversation import PageRead, conversation_page
from conversations.dashboard.presenters.diff import (
    DIFF_WINDOW,
    DiffSide,
    diff_page,
    diff_window_page,
)
from conversations.dashboard.presenters.links import query
from conversations.dashboard.presenters.listing import (
    conversation_rows,
    list_empty,
    list_pager,
    list_summary,
    rejected_spans_note,
)
from conversations.dashboard.presenters.messages import (
    MessageView,
    MoreBlocks,
    block_full_text,
    compaction_views,
    message_views,
    more_blocks,
    read_only,
    with_notes,
    without_images,
)
from conversations.dashboard.presenters.metadata import (
    CONVERSATION_META_ITEMS,
    MetaItem,
    conversation_meta,
    message_meta,
    source_time,
)
from conversations.dashboard.presenters.notes import (
    NotesView,
    note_item,
    notes_view,
)
from conversations.dashboard.presenters.pressure import margin_counts, pressure_view
from conversations.dashboard.presenters.sharing import shares_panel
from conversations.dashboard.presenters.texts import (
    Truncation,
    fold_label,
    input_text,
    line_count,
    size_note,
)

__all__ = [
    "CONVERSATION_META_ITEMS",
    "ContextRead",
    "PREVIEW_WINDOW",
    "window_at",
    "DIFF_WINDOW",
    "DiffSide",
    "MessageView",
    "MoreBlocks",
    "MetaItem",
    "NotesView",
    "PageRead",
    "Truncation",
    "block_full_text",
    "note_item",
    "notes_view",
    "read_only",
    "with_notes",
    "context_blocks",
    "context_page",
    "conversation_meta",
    "conversation_page",
    "conversation_rows",
    "diff_page",
    "diff_window_page",
    "fold_label",
    "input_text",
    "line_count",
    "list_empty",
    "list_pager",
    "list_summary",
    "rejected_spans_note",
    "margin_counts",
    "message_meta",
    "message_views",
    "more_blocks",
    "without_images",
    "compaction_views",
    "pressure_view",
    "query",
    "shares_panel",
    "size_note",
    "source_time",
]

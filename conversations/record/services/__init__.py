"""The one write path: every conversation, message and block is created here.

Callers (API, admin, management commands, the demo loader) pass validated `schemas` values
and call these names through the package (`services.message_append(...)`). Each function is
atomic and announces what it stored on commit. One file a domain:

- `conversations`: create, describe, delete, prune; the row lock appends hold
- `appending`: messages and blocks (`inserts`: the multi-row INSERTs; `search_entries`:
  the search entries stored with titles and blocks; `finder_marks`: the finder's marks of
  error results and unanswered calls)
- `imports`: transcript files; `following`: `manage.py tail` and OTLP traces
- `notes`: operators' notes on messages (docs/contract.md §10)
- `sharing`: share links; `api_tokens`: API tokens; `idempotency`: Idempotency-Key answers
- `alerts`: alert rules, evaluation after commit, acknowledging; `webhooks`: their
  deliveries (claimed, attempted, retried, redelivered)
- `errors`: IngestError, which every write raises for what it cannot store
"""

from conversations.record.services.alerts import (
    Change,
    alert_acknowledge,
    alert_rule_create,
    alert_rule_delete,
    alerts_due,
    alerts_evaluate,
    alerts_on_commit,
    webhook_url_check,
)
from conversations.record.services.api_tokens import (
    api_token_create,
    api_token_delete,
    api_token_revoke,
    token_digest,
)
from conversations.record.services.appending import (
    UNKNOWN_TOOL,
    block_append,
    message_append,
    messages_append,
)
from conversations.record.services.conversations import (
    conversation_create,
    conversation_delete,
    conversation_update,
    conversation_window_set,
    conversations_prune,
)
from conversations.record.services.errors import IngestError
from conversations.record.services.following import (
    TailServer,
    Traced,
    TracedMessage,
    blocks_in,
    message_in,
    path_digest,
    span_rejected,
    tail_append,
    tail_cursor_create,
    tail_rewind,
    tail_send,
    trace_continue,
)
from conversations.record.services.idempotency import IDEMPOTENCY_TTL, idempotent_response_save
from conversations.record.services.imports import (
    IMPORT_TITLE_MAX,
    ImportOutcome,
    conversation_import,
    gc_paused,
    import_find,
    message_validated,
    transcript_import,
)
from conversations.record.services.notes import note_add, note_delete, note_edit
from conversations.record.services.sharing import (
    SHARE_DEFAULT_EXPIRY,
    SHARE_MAX_EXPIRY,
    SHARE_TOKEN_BYTES,
    share_create,
    share_revoke,
    share_viewed,
)
from conversations.record.services.webhooks import (
    Claimed,
    Outcome,
    deliveries_attempted,
    deliveries_claim,
    delivery_redeliver,
)

__all__ = [
    "IDEMPOTENCY_TTL",
    "IMPORT_TITLE_MAX",
    "SHARE_DEFAULT_EXPIRY",
    "SHARE_MAX_EXPIRY",
    "SHARE_TOKEN_BYTES",
    "UNKNOWN_TOOL",
    "ImportOutcome",
    "IngestError",
    "Traced",
    "TracedMessage",
    "api_token_create",
    "api_token_delete",
    "api_token_revoke",
    "block_append",
    "blocks_in",
    "conversation_create",
    "conversation_delete",
    "conversation_import",
    "conversation_update",
    "conversation_window_set",
    "conversations_prune",
    "gc_paused",
    "idempotent_response_save",
    "import_find",
    "message_append",
    "message_in",
    "span_rejected",
    "message_validated",
    "messages_append",
    "note_add",
    "note_delete",
    "note_edit",
    "path_digest",
    "share_create",
    "share_revoke",
    "share_viewed",
    "TailServer",
    "tail_append",
    "tail_cursor_create",
    "tail_rewind",
    "tail_send",
    "token_digest",
    "trace_continue",
    "transcript_import",
    # alerts (docs/contract.md §11)
    "Change",
    "Claimed",
    "alert_acknowledge",
    "alert_rule_create",
    "alert_rule_delete",
    "alerts_due",
    "alerts_evaluate",
    "alerts_on_commit",
    "webhook_url_check",
    "Outcome",
    "deliveries_attempted",
    "deliveries_claim",
    "delivery_redeliver",
]

"""The one write path: every conversation, message and block is created here.

Callers (API, admin, management commands, the demo loader) pass validated `schemas` values
and import the module of the domain they write (`appending.message_append(...)`); there is
no re-export here. Each function is atomic and announces what it stored on commit. One
file a domain:

- `conversations`: create, describe, delete, prune; the row lock appends hold
- `appending`: messages and blocks (`inserts`: the multi-row INSERTs; `search_entries`:
  the search entries stored with titles and blocks; `finder_marks`: the finder's marks of
  error results and unanswered calls; `token_figures`: each block's stored counts)
- `api_tokens`: API tokens; `idempotency`: Idempotency-Key answers

The slices write through their own services beside these: `record.notes.services`,
`sharing.services`, `alerts.services` and `alerts.webhooks`, `ingest.imports` and
`ingest.following`. Every write raises `record.errors.IngestError` for what it cannot store.
"""

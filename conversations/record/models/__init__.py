"""The record's models, one file a facet: `conversation` (conversations, messages, blocks),
`search` (search entries and the finder's marks), `tokens` (API tokens and Idempotency-Key
answers), `notes`. The slices keep theirs (`alerts.models`, `sharing.models`,
`ingest.models`); Django finds them all through `conversations/models.py`."""

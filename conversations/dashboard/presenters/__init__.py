"""What the dashboard templates print, computed in Python (templates loop and print).

Presenters are pure: a view (or the live render step, `live/fragments.py`) fetches
through the record's selectors and counts, then hands the rows and models to these
functions, which import no model, selector or count (the import contract in
pyproject.toml). One module a page or job, imported by name (no re-export here):

- `messages`: each message beside its projection, bounded; the window's tool rounds
- `conversation`: the conversation page's (and a window load's) context
- `pressure`: the pressure header and the margin counts
- `listing`: the conversation list's rows, pager and empty text
- `context`, `diff`: the compaction preview and the projection diff
- `notes`: the notes beside a message's record
- `metadata`: the header facts read from metadata, an import's source
- `texts`: folds, cuts and their labels

The slices keep their own presenters (`alerts.presenters`, `sharing.presenters`,
`compare.presenters`); URLs and toggles are `web.links`, the attributes presenters read of
a conversation and a share link `web.protocols`.
"""

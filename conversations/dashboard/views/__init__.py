"""The dashboard's views (docs/contract.md §4), one module a page: `listing`, `conversation`
(the page, its windows and what it fetches on demand), `context` (the compaction preview
and the diff), `sharing` and `share_panel`, `finding`, `notes`. What every page shares is
`web.pages`; the slices' pages are theirs (`alerts.views`, `compare.views`,
`ingest.views`).

Each view fetches through the record (selectors, counts, the finder's reads), then hands
the rows to a presenter and renders its template.
"""

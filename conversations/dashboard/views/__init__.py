"""The dashboard's views (docs/contract.md §4), one module a page: `listing`, `conversation`
(the page, its windows and what it fetches on demand), `context` (the compaction preview
and the diff), `sharing`, `finding` and `imports`; `common` holds what they share.

Each view fetches through the record (selectors, counts, the finder's reads), then hands
the rows to a presenter and renders its template.
"""

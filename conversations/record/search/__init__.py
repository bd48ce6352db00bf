"""Search (docs/contract.md §3): the full-text index of the blocks, the list's search,
and the conversation page's finder."""

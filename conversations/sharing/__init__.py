"""Share links (docs/contract.md §8): read-only links to one conversation, their admin,
API shape and share panel."""

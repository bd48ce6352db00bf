"""The JSON API (docs/contract.md §3), token-authenticated."""

"""The operators' pages (docs/contract.md §4): views, presenters and the socket paths they
link to."""

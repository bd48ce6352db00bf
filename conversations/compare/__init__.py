"""Comparing two runs (docs/contract.md §9): the reads behind the alignment, the page and
its picker."""

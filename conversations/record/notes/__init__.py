"""Notes (docs/contract.md §10): their reads, their own full-text index, and their writes."""

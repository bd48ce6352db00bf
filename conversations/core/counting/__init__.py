"""Counting, pure (docs/contract.md §7): the tokenizer, what a message stores of its
count, the next request, context windows, compaction policies and long texts cut."""

"""Counts read from the stored figures (docs/contract.md §7): the next request, previews
after a policy, and the policy decided over the blocks it looks at."""

"""What comes in from outside (docs/contract.md §6): imports, the file drop, `manage.py
tail` and `POST /v1/traces`, all storing through the record's services."""

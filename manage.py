#!/usr/bin/env python
"""Django's command-line utility for Replay."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "replaysite.settings")
    from django.core.management import execute_from_command_line

    from replaysite.commands import refusal

    refused = refusal(sys.argv)
    if refused:
        sys.exit(refused)
    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()

"""`manage.py tail` as a real process beside the test, on the test database."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from tests.conftest import ROOT, database_url


class TailProcess:
    def __init__(
        self,
        path: Path,
        log: Path,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        self.path = path
        self.log = log
        self.env = env or {}
        self.args = args
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        environment = os.environ | {
            "DATABASE_URL": database_url(),
            "DJANGO_SECRET_KEY": settings.SECRET_KEY,
            "DJANGO_DEBUG": "1",
        }
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "tail", str(self.path), "--interval", "0.1", *self.args],
            cwd=ROOT,
            env=environment | self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        """SIGKILL: no chance to finish anything (a crash, an OOM kill, a power cut)."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)
        self.process = None

    def stop(self) -> int:
        """SIGTERM, as a service manager stops it; the exit code."""
        if self.process is None:
            return 0
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(10)
        self.process = None
        return code


def eventually(check: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout} s: {what}")

"""`make install-prod` (docs/deploying.md): what it installs is the app's dependencies at the
lock's versions and none of the dev extras. Resolved by pip itself (`--dry-run --report`),
from the Makefile's own command line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEV_ONLY = ("pytest", "mypy", "playwright", "hypothesis", "ruff", "anthropic", "openai", "uv")


def install_prod_command() -> list[str]:
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\ninstall-prod:\n", 1)[1].split("\n\n", 1)[0]
    (line,) = [line for line in recipe.splitlines() if "-c requirements.lock" in line]
    return line.split("-m pip install", 1)[1].split()


@pytest.mark.timeout(180)
def test_the_production_install_takes_the_lock_and_no_dev_extras(tmp_path: Path) -> None:
    args = [a for a in install_prod_command() if a != "--quiet"]
    assert "-e" in args and "." in args and not any("[dev]" in a for a in args)
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", *args, "--dry-run", "--ignore-installed",
         "--quiet", "--report", str(report)],
        cwd=ROOT, capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    installed = {
        re.sub(r"[-_.]+", "-", item["metadata"]["name"].lower()): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    pins = [line.split("==", 1) for line in (ROOT / "requirements.lock").read_text().split()]
    locked = {re.sub(r"[-_.]+", "-", pin[0].lower()): pin[1] for pin in pins if len(pin) == 2}
    assert {"django", "daphne", "channels-redis", "psycopg-pool", "prometheus-client"} <= set(
        installed
    )
    assert not [name for name in DEV_ONLY if name in installed]
    assert {n: v for n, v in installed.items() if n in locked and locked[n] != v} == {}

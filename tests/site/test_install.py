"""`make install-prod` (docs/deploying.md): what it installs is the app's dependencies at the
lock's versions and none of the dev extras. Resolved by pip itself (`--dry-run --report`),
from the Makefile's own command line."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.timeout(120)
def test_the_wheel_holds_every_package_and_the_vendored_encoding_without_a_warning(
    tmp_path: Path,
) -> None:
    """setuptools' packages configuration names every package and data directory: the build
    warns of nothing, and the wheel holds each subpackage and the vendored BPE file."""
    # Built from a copy: setuptools leaves build/ and egg-info beside the sources it builds.
    source = tmp_path / "source"
    for top in ("conversations", "replaysite"):
        shutil.copytree(ROOT / top, source / top, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", source)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--verbose", "-w", str(tmp_path), "."],
        cwd=source, capture_output=True, text=True, timeout=110,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    output = done.stdout + done.stderr
    assert "absent from the `packages` configuration" not in output
    assert "BuildBackendWarning" not in output
    (wheel,) = tmp_path.glob("replay-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    packages = {
        path.parent.relative_to(ROOT).as_posix()
        for top in ("conversations", "replaysite")
        for path in (ROOT / top).rglob("__init__.py")
    }
    assert {f"{package}/__init__.py" for package in packages} - names == set()
    assert "conversations/core/encodings/o200k_base.tiktoken" in names

"""requirements.lock (written by `make lock`, docs/contributing.md) covers pyproject.toml: every
requirement, with the dev extra, is pinned at a version it allows, and so is everything they
need in turn, as the installed packages' metadata says. Offline: it reads files only."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]


def pins(text: str) -> list[tuple[str, str]]:
    """The lock's `name==version` lines in order, names canonical; comments skipped."""
    found = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            found.append((canonicalize_name(name), version.strip()))
    return found


def requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    listed = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return [Requirement(line) for line in listed]


def needed(roots: list[Requirement]) -> set[str]:
    """The requirements and, through each installed package's metadata, theirs (with the
    extras asked for), for this interpreter."""
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [(req, frozenset(req.extras)) for req in roots]
    while todo:
        req, extras = todo.pop()
        name = canonicalize_name(req.name)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        for line in metadata.requires(name) or []:
            sub = Requirement(line)
            asked = [{"extra": extra} for extra in extras] or [{"extra": ""}]
            if sub.marker is None or any(sub.marker.evaluate(env) for env in asked):
                todo.append((sub, frozenset(sub.extras)))
    return {name for name, _ in seen}


def uncovered(lock: str) -> list[str]:
    pinned = dict(pins(lock))
    problems = []
    for req in requirements():
        version = pinned.get(canonicalize_name(req.name))
        if version is None:
            problems.append(f"{req.name}: not in the lock")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name}=={version}: outside {req.specifier}")
    problems += [f"{name}: needed, not in the lock" for name in sorted(needed(requirements()))
                 if name not in pinned]  # fmt: skip
    return problems


def test_the_lock_pins_every_requirement_and_what_they_need() -> None:
    assert uncovered((ROOT / "requirements.lock").read_text()) == []


def test_the_lock_is_sorted_with_one_pin_a_package() -> None:
    names = [name for name, _ in pins((ROOT / "requirements.lock").read_text())]
    assert names == sorted(set(names))


def test_a_lock_missing_a_requirement_or_outside_its_range_is_caught() -> None:
    lock = (ROOT / "requirements.lock").read_text()
    without_django = "\n".join(
        line for line in lock.splitlines() if not line.lower().startswith("django==")
    )
    assert "django: not in the lock" in uncovered(without_django)
    too_old = lock.replace("\nchannels==", "\nchannels==3.0.0\n#", 1)
    assert any(p.startswith("channels==3.0.0: outside") for p in uncovered(too_old))

"""Vendored assets (issue 3, "Assets"): htmx and its WebSocket extension are files in static/
at pinned versions recorded with their SHA-256, loaded by base.html, never from a CDN."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.templatetags.static import static
from django.test import Client

ROOT = Path(__file__).resolve().parent.parent
VENDOR = ROOT / "static" / "vendor"
TEMPLATES = ROOT / "templates"
RECORD = json.loads((VENDOR / "VENDORED.json").read_text())

# The deliberate choice: htmx 2.0.x with htmx-ext-ws 2.0.x. Changing either is a decision that
# must be made here too, not a file that drifts in unnoticed.
PINNED = {"htmx.org": "2.0.11", "htmx-ext-ws": "2.0.4"}

STATIC_TAG = re.compile(r"""\{%\s*static\s+['"]([^'"]+)['"]\s*%\}""")
TAG = re.compile(r"<(script|link)\b[^>]*>", re.IGNORECASE | re.DOTALL)
URL_ATTR = re.compile(r"""\b(src|href)\s*=\s*(['"])(.*?)\2""", re.IGNORECASE | re.DOTALL)


def by_package(package: str) -> tuple[str, dict[str, str]]:
    (entry,) = [(name, e) for name, e in RECORD.items() if e["package"] == package]
    return entry


def test_every_vendored_script_is_recorded_and_every_record_is_a_file() -> None:
    scripts = {p.name for p in VENDOR.iterdir() if p.suffix == ".js"}
    assert scripts == set(RECORD)
    assert {e["package"] for e in RECORD.values()} == set(PINNED)


@pytest.mark.parametrize("name", sorted(RECORD))
def test_vendored_file_matches_its_recorded_sha256(name: str) -> None:
    digest = hashlib.sha256((VENDOR / name).read_bytes()).hexdigest()
    assert digest == RECORD[name]["sha256"], f"{name} changed; re-vendor it and record why"


@pytest.mark.parametrize("package", sorted(PINNED))
def test_vendored_versions_are_the_pinned_ones(package: str) -> None:
    name, entry = by_package(package)
    assert entry["version"] == PINNED[package]
    assert PINNED[package] in name  # the file name says which version it is
    assert re.fullmatch(r"2\.0\.\d+", entry["version"])
    assert entry["from"].startswith("npm registry tarball")
    licence = re.search(r"\((.+?)\)", entry["licence"])
    assert licence is not None and (VENDOR / licence.group(1)).is_file()


def test_htmx_file_is_the_version_it_claims() -> None:
    name, entry = by_package("htmx.org")
    source = (VENDOR / name).read_text()
    versions = set(re.findall(r"""version\s*:\s*["']([0-9][^"']*)["']""", source))
    assert versions == {entry["version"]}


def test_ws_extension_is_the_ws_extension_for_htmx_2() -> None:
    name, entry = by_package("htmx-ext-ws")
    source = (VENDOR / name).read_text()
    assert 'htmx.defineExtension("ws"' in source
    # Its peer range admits the htmx that is vendored beside it.
    peer = re.search(r"htmx\.org \^(2\.0\.(\d+))", entry["from"])
    assert peer is not None
    htmx_patch = int(PINNED["htmx.org"].split(".")[2])
    assert htmx_patch >= int(peer.group(2))


def test_base_template_loads_exactly_the_vendored_scripts_through_static() -> None:
    base = (TEMPLATES / "base.html").read_text()
    scripts = [m.group(0) for m in TAG.finditer(base) if m.group(1).lower() == "script"]
    vendored = []
    for tag in scripts:
        src = URL_ATTR.search(tag)
        assert src is not None, tag
        static = STATIC_TAG.fullmatch(src.group(3))
        assert static is not None, f"not loaded through {{% static %}}: {tag}"
        if static.group(1).startswith("vendor/"):
            vendored.append(static.group(1).removeprefix("vendor/"))
    assert vendored == [by_package("htmx.org")[0], by_package("htmx-ext-ws")[0]]  # htmx first
    for tag in scripts:
        path = STATIC_TAG.search(tag).group(1)  # type: ignore[union-attr]
        assert finders.find(path), f"{path} is not a static file"


def template_files() -> list[Path]:
    files = sorted(TEMPLATES.rglob("*.html"))
    assert files
    return files


@pytest.mark.parametrize("path", template_files(), ids=lambda p: str(p.relative_to(TEMPLATES)))
def test_no_template_loads_anything_from_another_origin(path: Path) -> None:
    source = path.read_text()
    for tag in TAG.finditer(source):
        for attr in URL_ATTR.finditer(tag.group(0)):
            url = attr.group(3).strip().lower()
            assert not url.startswith(("http://", "https://", "//")), (path.name, tag.group(0))
    assert "unpkg.com" not in source and "jsdelivr" not in source and "cdnjs" not in source


# -- /favicon.ico (issue 11) ------------------------------------------------------------


def test_favicon_ico_redirects_to_the_svg_icon(client: Client) -> None:
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    assert response["Location"] == static("favicon.svg")
    assert "max-age=86400" in response["Cache-Control"]
    assert client.head("/favicon.ico").status_code == 302
    assert client.post("/favicon.ico").status_code == 405


def test_theme_script_runs_in_the_head_before_the_first_paint() -> None:
    """Not deferred and not async, so data-theme is on <html> before the body is parsed."""
    base = (TEMPLATES / "base.html").read_text()
    head = base[: base.index("</head>")]
    tags = [m.group(0) for m in TAG.finditer(head) if "replay-theme.js" in m.group(0)]
    assert len(tags) == 1
    assert not re.search(r"\b(defer|async)\b", tags[0])
    assert finders.find("replay-theme.js")

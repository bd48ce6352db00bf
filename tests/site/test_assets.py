"""Vendored assets (docs/architecture.md, `templates/`): htmx and its WebSocket extension are files
in static/ at pinned versions recorded with their SHA-256, loaded by base.html, never from a CDN.
Our page scripts are ES modules whose imports survive collectstatic's hashing."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.templatetags.static import static
from django.test import Client
from whitenoise.media_types import MediaTypes

ROOT = Path(__file__).resolve().parents[2]
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


# -- /favicon.ico ---------------------------------------------------------------------


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


# -- the page scripts are ES modules (docs/architecture.md) ----------------------------------------

STATIC = ROOT / "static"
SCRIPT_TAG = re.compile(r"<script\b[^>]*>", re.IGNORECASE)
IMPORT = re.compile(r"""^\s*import\s+(?:[^"';]*?\s+from\s+)?["']([^"']+)["']\s*;""", re.MULTILINE)


def page_scripts() -> list[Path]:
    return sorted(STATIC.glob("*.js"))


def imports_of(path: Path) -> list[str]:
    return IMPORT.findall(path.read_text())


def loaded_scripts() -> dict[str, str]:
    """Every script a template loads through {% static %}: path → its tag."""
    loaded = {}
    for template in template_files():
        for tag in SCRIPT_TAG.finditer(template.read_text()):
            static_path = STATIC_TAG.search(tag.group(0))
            if static_path:
                loaded[static_path.group(1)] = tag.group(0)
    return loaded


def test_our_scripts_are_modules_but_the_theme_and_the_vendored_ones_are_classic() -> None:
    loaded = loaded_scripts()
    assert "replay-theme.js" in loaded and "replay.js" in loaded
    for path, tag in loaded.items():
        module = 'type="module"' in tag
        if path == "replay-theme.js" or path.startswith("vendor/"):
            assert not module, tag  # htmx defines a global; the theme applies before paint
        else:
            assert module, tag
            assert not re.search(r"\b(defer|async)\b", tag), tag  # deferred as it is
    # Module scripts run in document order with the deferred classic ones: htmx first.
    base = (TEMPLATES / "base.html").read_text()
    first_module = base.index('type="module"')
    assert base.index("vendor/htmx-2") < first_module
    assert base.index("vendor/htmx-ext-ws") < first_module


def test_imports_are_relative_files_that_exist_and_are_never_also_script_tags() -> None:
    """One URL per module (one instance): what is imported is not loaded by a tag too."""
    loaded = loaded_scripts()
    imported = set()
    for script in page_scripts():
        for target in imports_of(script):
            assert target.startswith("./") and target.endswith(".js"), (script.name, target)
            assert (STATIC / target).is_file(), (script.name, target)
            imported.add(target.removeprefix("./"))
    assert imported == {"replay-shared.js", "replay-windows.js"}
    assert not imported & set(loaded)
    assert not imports_of(STATIC / "replay-theme.js")


def test_page_scripts_share_no_window_globals_and_copy_no_server_constants() -> None:
    for script in page_scripts():
        source = script.read_text()
        assert not re.search(r"window\.replay\w*\s*=", source), script.name
        # page_windows.DOCUMENT and LAST reach the scripts as data- attributes.
        assert "999999999" not in source and not re.search(r"\b300\b", source), script.name


def test_the_ws_extension_still_retries_only_the_codes_replay_live_js_works_around() -> None:
    """replay-live.js (retryingSocket) intercepts the `onclose` handler the extension
    assigns and reports clean closes as 1006. A new extension that no longer does this
    must be looked at; the browser tests in tests/browser/live/test_live.py say whether it works."""
    name, _ = by_package("htmx-ext-ws")
    source = (VENDOR / name).read_text()
    assert "htmx.createWebSocket" in source
    assert re.search(
        r"\.onclose=function\((\w)\)\{if\(!\w+\(\w+\)&&\[1006,1011,1012,1013\]\.indexOf\(\1\.code\)",
        source,
    ), "the ws extension's close handling changed: revisit retryingSocket in replay-live.js"


def test_collectstatic_rewrites_module_imports_to_the_hashed_names(
    settings: Any, tmp_path: Path
) -> None:
    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = settings.STORAGES | {
        "staticfiles": {"BACKEND": "replaysite.static_storage.ModuleManifestStaticFilesStorage"}
    }
    call_command("collectstatic", interactive=False, verbosity=0)

    hashed = json.loads((tmp_path / "staticfiles.json").read_text())["paths"]
    for script in page_scripts():
        served = (tmp_path / hashed[script.name]).read_text()
        wanted = ["./" + hashed[target.removeprefix("./")] for target in imports_of(script)]
        assert imports_of(tmp_path / hashed[script.name]) == wanted, script.name
        assert "./replay-shared.js" not in served and "./replay-windows.js" not in served
    assert MediaTypes().get_type("replay.1234567890ab.js") == "text/javascript"

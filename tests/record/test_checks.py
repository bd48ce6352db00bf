"""The match over block types is exhaustive (docs/contract.md §2 rule 4), caught three ways: the
system check at start-up, the type checker, and a test; and the presenters do no I/O, caught by
the import contract."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.core.checks import run_checks
from django.core.checks.registry import registry
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from conversations.core import replay
from conversations.record import checks
from conversations.record.models.conversation import BlockType

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True, slots=True)
class VideoBlock:
    """A block type the projection has never heard of."""

    url: str


class BlockTypesWithVideo:
    values = [*BlockType.values, "video"]


@pytest.fixture
def video_block(monkeypatch: pytest.MonkeyPatch) -> VideoBlock:
    """A new block class registered like the others, but with no case in `replay.prose`."""
    sample = VideoBlock("https://example.com/v.mp4")
    monkeypatch.setitem(replay.BLOCK_TYPES, "video", VideoBlock)  # type: ignore[arg-type]
    monkeypatch.setitem(checks.SAMPLES, "video", sample)  # type: ignore[arg-type]
    return sample


# (a) The system check.


def test_every_stored_block_type_has_prose() -> None:
    assert checks.every_block_type_has_prose() == []
    assert set(BlockType.values) == set(replay.BLOCK_TYPES) == set(checks.SAMPLES)


def test_stored_type_without_a_value_class_is_e001() -> None:
    errors = checks.every_block_type_has_prose(block_types=["text", "video"])
    assert [error.id for error in errors] == ["conversations.E001"]
    assert "'video'" in errors[0].msg


def test_block_class_without_a_prose_case_is_e002(video_block: VideoBlock) -> None:
    errors = checks.every_block_type_has_prose(block_types=[*BlockType.values, "video"])
    assert [error.id for error in errors] == ["conversations.E002"]
    assert "'video'" in errors[0].msg
    assert "AssertionError" in errors[0].msg


def test_check_is_registered_with_django() -> None:
    assert checks.every_block_type_has_prose in registry.get_checks()
    assert not [m for m in run_checks() if m.id and m.id.startswith("conversations.")]


def test_run_checks_reports_a_new_stored_type_without_prose(
    monkeypatch: pytest.MonkeyPatch, video_block: VideoBlock
) -> None:
    monkeypatch.setattr(checks, "BlockType", BlockTypesWithVideo)
    ids = [m.id for m in run_checks()]
    assert "conversations.E002" in ids


def test_check_command_fails_on_a_new_stored_type_without_a_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(checks, "BlockType", BlockTypesWithVideo)
    with pytest.raises(SystemCheckError, match=r"conversations\.E001"):
        call_command("check")


def test_check_command_passes() -> None:
    call_command("check")


def test_manage_py_check_passes_at_start_up(tmp_path: Path) -> None:
    env = os.environ | {
        "DJANGO_SECRET_KEY": "x" * 60,
        "REPLAY_DATA_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'check.sqlite3'}",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


# (c) In a test: a block with no prose form raises, never drops silently.


def test_prose_of_an_unknown_block_raises() -> None:
    with pytest.raises(AssertionError):
        replay.prose(VideoBlock("v"))  # type: ignore[arg-type]


@pytest.mark.parametrize("vision", [True, False])
@pytest.mark.parametrize("shape", replay.SHAPES)
def test_projection_of_an_unknown_block_raises(vision: bool, shape: str) -> None:
    message = replay.StoredMessage(
        "user",
        (replay.TextBlock("see"), VideoBlock("v")),  # type: ignore[arg-type]
    )
    with pytest.raises(AssertionError):
        replay.project([message], vision=vision, shape=shape)


# (b) The type checker.

NEW_CLASS = """

@dataclass(frozen=True, slots=True)
class VideoBlock:
    url: str
"""
UNION = (
    "Block: TypeAlias = TextBlock | ToolUseBlock | ToolResultBlock | ReasoningBlock | ImageBlock"
)


def mypy(tree: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    """The project's own mypy run (strict, django-stubs) over a copy of the tree."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(cache),
            "--no-error-summary",
            "--show-error-codes",
            "conversations",
            "replaysite",
        ],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
    )


def project_copy(into: Path) -> Path:
    into.mkdir()
    for name in ("conversations", "replaysite"):
        shutil.copytree(ROOT / name, into / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", into / "pyproject.toml")
    return into


def test_type_checker_rejects_a_block_kind_without_a_case_in_every_layer(tmp_path: Path) -> None:
    """One kind more in the registry fails the type check in the projection, the registry's
    own functions, the token counter, the record's API shapes and the dashboard's presenter
    alike."""
    cache = tmp_path / "cache"
    tree = project_copy(tmp_path / "with_video")
    blocks = tree / "conversations" / "core" / "blocks.py"
    source = blocks.read_text()
    assert source.count(UNION) == 1, "blocks.Block changed: update this test"
    anchor = "Block: TypeAlias"
    blocks.write_text(
        source.replace(anchor, NEW_CLASS.lstrip("\n") + "\n\n" + anchor, 1).replace(
            UNION, UNION + " | VideoBlock"
        )
    )
    result = mypy(tree, cache)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    errors = [line for line in output.splitlines() if ": error:" in line]
    assert errors, output
    assert all("VideoBlock" in line for line in errors), output
    failing = {line.split(":", 1)[0] for line in errors}
    for layer in (
        "conversations/core/blocks.py",
        "conversations/core/replay.py",
        "conversations/core/counting/tokens.py",
        "conversations/record/reads/shapes.py",
        "conversations/dashboard/presenters/messages.py",
    ):
        assert layer in failing, output


# (d) The presenters do no I/O: the import contract, kept by the code and broken by a presenter
# that imports a selector (checked on a copy, as the type checker is above).

PURE_PRESENTERS = "Presenters do no I/O: no models, selectors, counts, finder reads or services"
PRESENTERS = ROOT / "conversations" / "dashboard" / "presenters"


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    """The project's own import-linter run (pyproject.toml's contracts) over a copy."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_import_contract_forbids_a_presenter_to_read_the_record(tmp_path: Path) -> None:
    tree = project_copy(tmp_path / "project")
    clean = lint_imports(tree)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert f"{PURE_PRESENTERS} KEPT" in clean.stdout

    presenter = tree / "conversations" / "dashboard" / "presenters" / "listing.py"
    source = presenter.read_text()
    anchor = "from conversations.record.reads.rows import"
    assert source.count(anchor) == 1, "listing.py's imports changed: update this test"
    presenter.write_text(
        source.replace(anchor, "from conversations.record.reads import selectors\n" + anchor, 1)
    )
    broken = lint_imports(tree)
    output = broken.stdout + broken.stderr
    assert broken.returncode == 1, output
    assert f"{PURE_PRESENTERS} BROKEN" in output
    # The report wraps long lines to the terminal's width: compare words, not lines.
    assert (
        "conversations.dashboard.presenters.listing -> conversations.record.reads.selectors"
        in " ".join(output.split())
    )


def test_no_presenter_imports_the_orm() -> None:
    """What the contract cannot say (import-linter forbids only a whole external package,
    and presenters use django.urls): no presenter imports django.db."""
    app = ROOT / "conversations"
    presenters = sorted(PRESENTERS.glob("*.py")) + [
        app / "alerts" / "presenters.py",
        app / "sharing" / "presenters.py",
        app / "compare" / "presenters.py",
        app / "web" / "links.py",
        app / "web" / "protocols.py",
    ]
    assert all(path.is_file() for path in presenters)
    for path in presenters:
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported |= {node.module, *(f"{node.module}.{a.name}" for a in node.names)}
        orm = {name for name in imported if name == "django.db" or name.startswith("django.db.")}
        assert not orm, f"{path.name} imports {sorted(orm)}"

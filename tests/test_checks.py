"""The match over block types is exhaustive (SPEC §2 rule 4), caught three ways: the system
check at start-up, the type checker, and a test."""

from __future__ import annotations

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

from conversations import checks, replay
from conversations.models import BlockType

ROOT = Path(__file__).resolve().parent.parent


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


def mypy(path: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    config = path.parent / "mypy.ini"
    config.write_text("[mypy]\n")
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file", str(config),
         "--cache-dir", str(cache), "--no-error-summary", "--show-error-codes", path.name],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip


def test_type_checker_rejects_a_block_type_without_a_prose_case(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    (tmp_path / "unchanged").mkdir()
    (tmp_path / "with_video").mkdir()
    unchanged = tmp_path / "unchanged" / "replay.py"
    shutil.copy(ROOT / "conversations" / "replay.py", unchanged)

    clean = mypy(unchanged, cache)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    source = unchanged.read_text()
    assert source.count(UNION) == 1, "replay.Block changed: update this test"
    anchor = "Block: TypeAlias"
    modified = source.replace(anchor, NEW_CLASS.lstrip("\n") + "\n\n" + anchor, 1).replace(
        UNION, UNION + " | VideoBlock"
    )
    with_video = tmp_path / "with_video" / "replay.py"
    with_video.write_text(modified)

    result = mypy(with_video, cache)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    errors = [line for line in output.splitlines() if ": error:" in line]
    assert errors, output
    assert all("assert_never" in line and "VideoBlock" in line for line in errors), output

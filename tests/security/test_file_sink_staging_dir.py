"""The s3:// FileSink stages its parts in a directory of this user's own, never in a shared
predictable path another user could plant a symlink at."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from weir.core.config import Configuration
from weir.core.errors import UserError
from weir.operators.sinks.file import FileSinkOperator
from weir.taskexecutor.operator import OperatorContext, StateContext

S3 = {"s3.endpoint": "http://127.0.0.1:9", "s3.access-key": "k", "s3.secret-key": "s",
      "execution.checkpointing.interval": "1 s"}


def open_sink() -> FileSinkOperator:
    sink = FileSinkOperator("sink", "s3://bucket/out", "json", 1 << 20)
    sink.setup(OperatorContext("sink", 0, 1, 128, configuration=Configuration.from_pairs(S3)),
               output=None)  # type: ignore[arg-type]
    sink.initialize_state(StateContext())
    return sink


def test_a_symlink_planted_at_the_staging_name_is_refused(tmp_path: Path, monkeypatch):
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    attacker = tmp_path / "attacker"
    attacker.mkdir()
    os.symlink(attacker, shared / f"weir-file-sink-{os.geteuid()}")
    with pytest.raises(UserError, match="weir-file-sink"):
        open_sink()
    assert list(attacker.iterdir()) == []


def test_the_staging_directory_is_private(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    open_sink()
    root = tmp_path / f"weir-file-sink-{os.geteuid()}"
    assert root.is_dir() and not root.is_symlink()
    assert root.stat().st_mode & 0o777 == 0o700

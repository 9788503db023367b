"""The default Spark staging root in a shared temp directory is this user's alone: a symlink
or directory planted there by someone else is refused, never followed."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

import pytest

from weir.core.config import Configuration
from weir.core.errors import UserError
from weir.datastream.connectors.spark import default_staging_root


@pytest.fixture
def shared_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A world-writable sticky directory standing in for /tmp ($TMPDIR)."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    return shared


def _root() -> Path:
    return default_staging_root(Configuration())


def _refused(*needles: str) -> None:
    with pytest.raises(UserError) as info:
        _root()
    for needle in (*needles, "spark.staging.dir"):
        assert needle in str(info.value), str(info.value)


def test_the_default_root_is_private_to_this_user(shared_tmp: Path):
    root = _root()
    assert root.parent == shared_tmp
    info = os.lstat(root)
    assert stat.S_ISDIR(info.st_mode)
    assert info.st_uid == os.geteuid()
    assert stat.S_IMODE(info.st_mode) == 0o700
    assert _root() == root  # the same directory next time


def test_a_symlink_planted_at_the_shared_name_is_not_followed(shared_tmp: Path,
                                                                tmp_path: Path):
    # Before, every user staged into $TMPDIR/weir-staging: whoever created it first, e.g.
    # as a symlink to their own directory, received everyone's staged data.
    attacker = tmp_path / "attacker"
    attacker.mkdir()
    os.symlink(attacker, shared_tmp / "weir-staging")
    root = _root()
    assert not root.is_symlink()
    assert not os.path.samefile(root, attacker)
    assert stat.S_IMODE(os.lstat(root).st_mode) == 0o700


def test_the_per_user_symlink_is_refused(shared_tmp: Path, tmp_path: Path):
    (tmp_path / "attacker").mkdir()
    planted = shared_tmp / f"weir-staging-{os.geteuid()}"
    os.symlink(tmp_path / "attacker", planted)
    _refused(str(planted), "symbolic link")


def test_a_directory_open_to_others_is_refused(shared_tmp: Path):
    planted = shared_tmp / f"weir-staging-{os.geteuid()}"
    planted.mkdir()
    planted.chmod(0o777)
    _refused(str(planted), "open to other users")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make another user's directory")
def test_another_users_directory_is_refused(shared_tmp: Path):
    planted = shared_tmp / f"weir-staging-{os.geteuid()}"
    planted.mkdir(mode=0o700)
    os.chown(planted, 65534, 65534)
    _refused(str(planted), "another user")

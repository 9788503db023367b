"""The default Spark staging root in a shared temp directory is this user's alone: a symlink
or directory planted there by someone else is refused, never followed. And
``spark.staging.dir`` is a local path, ``file://`` or ``s3://bucket/prefix``: anything else
is refused in one line, never turned into a local folder named ``s3:``."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.cluster import user_error_line, write_job
from weir.core.config import Configuration
from weir.core.errors import ConfigError, UserError
from weir.datastream.connectors.spark import default_staging_root, staging_dir
from weir.datastream.connectors.spark_staging import delete_staging

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def shared_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A world-writable sticky directory standing in for /tmp ($TMPDIR)."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    return shared


def _root() -> Path:
    return Path(default_staging_root(Configuration()))


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


# -- spark.staging.dir is a local path, file:// or s3://bucket/prefix, nothing else ---------

MISPARSED = [
    ("s3:/bucket/prefix", "not a valid URI"),       # one slash: was a folder named "s3:"
    ("s3:bucket/prefix", "not a valid URI"),
    ("S3:/bucket", "not a valid URI"),
    ("s3://", "no valid bucket"),
    ("s3:///prefix", "no valid bucket"),
    ("s3://Bad_Bucket/x", "no valid bucket"),
    ("hdfs://namenode/staging", "unsupported scheme hdfs://"),
    ("gs://bucket/x", "unsupported scheme gs://"),
    ("file://otherhost/staging", "names a host"),
]


@pytest.mark.parametrize(("value", "cause"), MISPARSED)
def test_a_misparsed_staging_dir_is_refused_in_one_line(value: str, cause: str):
    conf = Configuration.from_pairs({"spark.staging.dir": value})
    with pytest.raises(ConfigError) as info:
        staging_dir(conf)
    message = str(info.value)
    assert "\n" not in message
    for needle in ("spark.staging.dir", repr(value), cause, "s3://bucket/prefix"):
        assert needle in message, message


@pytest.mark.parametrize(("value", "expected"), [
    ("s3://bucket/prefix/", "s3://bucket/prefix"),
    ("S3://bucket/prefix", "s3://bucket/prefix"),
    ("file:///srv/staging", "/srv/staging"),
    ("/srv/staging/", "/srv/staging"),
])
def test_accepted_staging_dirs_are_normalized(value: str, expected: str):
    assert staging_dir(Configuration.from_pairs({"spark.staging.dir": value})) == expected


def test_weir_run_refuses_a_misparsed_staging_dir_before_anything_is_staged(tmp_path: Path):
    # Before, s3:/x became the local folder ./s3:/x and the job restart-looped on
    # "cannot read parquet file .../s3:/...".
    job = write_job(tmp_path, """
        from weir import StreamExecutionEnvironment
        env = StreamExecutionEnvironment.get_execution_environment()
        env.from_spark(lambda spark: spark.range(3)).print()
        env.execute()
    """)
    result = subprocess.run(
        [sys.executable, "-m", "weir", "run", "--jobmaster", "127.0.0.1:9",
         "-D", "spark.staging.dir=s3:/bucket/staging", str(job)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    user_error_line(result, "spark.staging.dir", "not a valid URI", "s3://bucket/prefix")
    assert not (tmp_path / "s3:").exists()


def test_deleting_a_staging_root_never_follows_a_symlink(tmp_path: Path):
    # The JobMaster and `weir staging clean` delete roots named in job configurations and
    # listings: a symlink planted there must not redirect the deletion.
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("x")
    link = tmp_path / "staging-root"
    os.symlink(victim, link)
    with pytest.raises(OSError, match="symbolic link"):
        delete_staging(str(link))
    assert (victim / "keep.txt").exists()
    delete_staging(str(tmp_path / "missing"))  # nothing there: nothing to do

"""A client host holds no S3 keys (the daemons do): checking a job's ``s3://`` checkpoint
directory before submission must not refuse it for that, while keys it does hold are still
checked."""

from __future__ import annotations

import pytest

from weir.checkpoint.storage import check_storage
from weir.core.config import Configuration
from weir.core.errors import UserError


@pytest.fixture
def no_keys_here(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """This process as a client host without any S3 credentials."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE", "WEIR_S3_ACCESS_KEY", "WEIR_S3_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_a_client_without_keys_accepts_an_s3_checkpoint_directory(no_keys_here, seaweed_s3,
                                                                  s3_bucket):
    check_storage(f"s3://{s3_bucket}/checkpoints", Configuration.from_pairs({
        "s3.endpoint": seaweed_s3.endpoint, "s3.path.style.access": "true"}))


def test_a_client_with_wrong_keys_is_still_refused(no_keys_here, seaweed_s3, s3_bucket):
    with pytest.raises(UserError, match=r"s3\.secret-key"):
        check_storage(f"s3://{s3_bucket}/checkpoints", Configuration.from_pairs({
            "s3.endpoint": seaweed_s3.endpoint, "s3.path.style.access": "true",
            "s3.access-key": seaweed_s3.access_key, "s3.secret-key": "wrong"}))

"""The high-availability job store on a real S3 server (SeaweedFS): the conformance suite,
the layout under the bucket, and a damaged pointer refused naming the object."""

from __future__ import annotations

import pytest

from tests.support.seaweedfs import SeaweedS3
from weir.core.errors import CorruptStateError
from weir.jobmaster.high_availability import StorageJobStore, create_job_store
from weir.testing.job_store import JOB, check_job_store


@pytest.fixture
def store(seaweed_s3: SeaweedS3, s3_bucket: str) -> StorageJobStore:
    conf = seaweed_s3.config(s3_bucket, **{
        "high-availability.type": "file",
        "high-availability.storageDir": f"s3://{s3_bucket}/ha",
        "high-availability.cluster-id": "blue"})
    created = create_job_store(conf)
    assert isinstance(created, StorageJobStore)
    return created


def test_the_store_on_s3(store: StorageJobStore):
    check_job_store(store)


def test_layout_and_a_damaged_pointer_on_s3(store: StorageJobStore, seaweed_s3: SeaweedS3,
                                            s3_bucket: str):
    store.put_job(b"graph", JOB)
    store.put_checkpoint_pointer(JOB, 12, f"s3://{s3_bucket}/checkpoints/{JOB}/chk-12")
    client = seaweed_s3.client()
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket)["Contents"])
    assert keys == [f"ha/blue/jobs/{JOB}/checkpoint", f"ha/blue/jobs/{JOB}/jobgraph"]
    assert store.checkpoint_pointer(JOB).metadata_uri.endswith(f"{JOB}/chk-12")

    key = f"ha/blue/jobs/{JOB}/checkpoint"
    data = client.get_object(Bucket=s3_bucket, Key=key)["Body"].read()
    client.put_object(Bucket=s3_bucket, Key=key, Body=data[: len(data) // 2])
    with pytest.raises(CorruptStateError, match=f"s3://{s3_bucket}/{key} is corrupt"):
        store.checkpoint_pointer(JOB)
    store.remove_job(JOB)
    assert "Contents" not in client.list_objects_v2(Bucket=s3_bucket)

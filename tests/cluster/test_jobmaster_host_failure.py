"""The JobMaster host SIGKILLed mid-job and started again at the same address, with high
availability on S3: the new JobMaster, back with an empty disk, finds the job in S3,
resumes it from its latest checkpoint on the TaskExecutor hosts that waited, and the
committed output is exact."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.cluster.keyed_job import all_running, start_cluster
from tests.support.cluster import poll

pytestmark = pytest.mark.extended


def test_a_restarted_jobmaster_host_resumes_the_job_from_s3(hosts, seaweed_s3, s3_bucket):
    ha = ("high-availability.type=file",
          f"high-availability.storageDir=s3://{s3_bucket}/ha")
    cluster = start_cluster(hosts, seaweed_s3, s3_bucket, taskexecutors=2,
                            jobmaster_options=ha, fixed_jobmaster_port=True)
    address = cluster.address
    n = 20_000
    job_id = cluster.submit("sequence", n)
    before = cluster.running_with_checkpoint(job_id, after=1).last_checkpoint_id

    killed = cluster.jobmaster.kill()
    # Nothing of the job may come from the JobMaster host's disk: it comes back empty.
    shutil.rmtree(cluster.jobmaster.disk)
    cluster.jobmaster.disk.mkdir(mode=0o700)
    cluster.jobmaster.restart()
    assert cluster.address == address
    resumed = poll(lambda: (d := cluster.details(job_id)) and all_running(d) and d, 120,
                   interval=0.05, what=f"job {job_id} to run again after the restart")
    print(f"JobMaster host SIGKILL + restart -> job running again: "
          f"{time.monotonic() - killed:.2f} s")
    status = poll(lambda: (s := cluster.status_json(job_id))["last_restore"] and s, 30,
                  interval=0.2, what="the resumed job's restore to be reported")
    assert status["last_restore"]["checkpoint_id"] >= before, (before, status["last_restore"])
    assert resumed.last_checkpoint_id >= before

    cluster.open_gate()
    cluster.finished_exactly_once(job_id, n)

"""Task-local recovery across hosts: a TaskExecutor host SIGKILLed and restarted with the same
resource id and working directory (on its own disk, which nobody else sees) restores its
subtasks from the state it kept, downloading none of it from S3, and the job's committed
output stays exact."""

from __future__ import annotations

import time

import pytest

from tests.cluster.keyed_job import start_cluster
from tests.support.cluster import poll

pytestmark = pytest.mark.extended

LOCAL_RECOVERY = {"state.backend.type": "rocksdb", "state.backend.local-recovery": "true"}


def test_a_restarted_taskexecutor_host_restores_from_its_own_disk(hosts, seaweed_s3,
                                                                   s3_bucket):
    # Two hosts of one slot for a job of two: after the kill the job can only run again
    # once the victim is back, on the disk it had.
    cluster = start_cluster(hosts, seaweed_s3, s3_bucket, taskexecutors=2,
                            resource_ids=True)
    n = 20_000
    job_id = cluster.submit("sequence", n, settings=LOCAL_RECOVERY)
    details = cluster.running_with_checkpoint(job_id)
    victim = cluster.busy_hosts(details)[0]
    [info] = victim.taskexecutors()
    kept = victim.path(f"/tmp/tm-{info.resource_id}")
    assert any(p.is_file() for p in kept.rglob("*")), "the TaskExecutor kept no local state"
    killed = victim.kill()
    victim.restart()
    cluster.running_again(job_id, details.summary.restarts)
    print(f"TaskExecutor host SIGKILL + restart -> job running again: "
          f"{time.monotonic() - killed:.2f} s")

    status = poll(lambda: (s := cluster.status_json(job_id))["last_restore"] and s, 30,
                  interval=0.2, what="the restore to be reported")
    restores = [t for t in status["tasks"]
                if t["taskexecutor"] == info.resource_id and t["last_restore"]]
    assert restores, f"no restored task on {info.resource_id}: {status['tasks']}"
    local = sum(t["last_restore"]["local_bytes"] for t in restores)
    remote = sum(t["last_restore"]["remote_bytes"] for t in restores)
    print(f"restored on the restarted host: {local} bytes local, {remote} bytes remote "
          f"(job: {status['last_restore']['local_bytes']} local, "
          f"{status['last_restore']['remote_bytes']} remote)")
    assert local > 0, restores
    # Only the FileSink's union state (its part counter) is read from the other subtask's
    # snapshot, which the restarted host never had; everything else is on its disk.
    downloading = [t["name"] for t in restores if t["last_restore"]["remote_bytes"]]
    assert all("Sink: File" in name for name in downloading), \
        [(t["name"], t["last_restore"]) for t in restores]
    assert remote < 1024, restores

    cluster.open_gate()
    cluster.finished_exactly_once(job_id, n)

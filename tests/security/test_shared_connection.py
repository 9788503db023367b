"""One job's record that cannot be encoded fails that job's producing task, with the real
cause, and nothing else: the data connection it shares with other jobs stays up."""

from __future__ import annotations

from tests.support.cluster import job_details, poll, wait_all_running, write_job
from tests.support.exactly_once import status_name

HEALTHY = """
import sys
import time
from weir import FileSink, StreamExecutionEnvironment

def slow(n):
    if n % 200 == 0:
        time.sleep(0.02)
    return n

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.configure({"restart-strategy.type": "none"})
(env.from_sequence(0, int(sys.argv[2]) - 1).map(slow).rebalance().map(lambda n: n * 2)
    .sink_to(FileSink(sys.argv[1], format="json")))
env.execute("healthy")
"""

# Every record is an object pickle refuses; half of them cross to the other TaskExecutor.
BAD = """
import threading
from weir import DiscardingSink, StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.configure({"restart-strategy.type": "none"})
(env.from_sequence(0, 999).map(lambda n: threading.Lock()).rebalance().map(lambda lock: 1)
    .sink_to(DiscardingSink()))
env.execute("unpicklable")
"""


def test_unpicklable_record_fails_its_task_not_the_shared_connection(cluster_factory,
                                                                      tmp_path):
    cluster = cluster_factory(2, 2)            # spread out: each job uses both TaskExecutors
    out, n = tmp_path / "out", 40_000
    healthy_job = write_job(tmp_path, HEALTHY, "healthy.py")
    healthy = cluster.weir("run", "--detached", str(healthy_job), str(out), str(n))
    assert healthy.returncode == 0, healthy.stderr
    healthy_id = healthy.stdout.strip().splitlines()[-1]
    wait_all_running(cluster, healthy_id)

    bad_job = write_job(tmp_path, BAD, "bad.py")
    bad = cluster.weir("run", str(bad_job))
    assert bad.returncode != 0
    assert "cannot pickle" in bad.stderr + bad.stdout, bad.stderr + bad.stdout

    details = poll(lambda: (d := job_details(cluster, healthy_id)) and
                   status_name(d) in ("FINISHED", "FAILED", "CANCELED") and d,
                   120, interval=0.2, what="the healthy job to end")
    assert status_name(details) == "FINISHED", details.failure.message
    got = sorted(int(line) for part in out.glob("part-*")
                 for line in part.read_text().splitlines())
    assert got == [2 * i for i in range(n)]

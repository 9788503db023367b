"""The end of a bounded job (FLIP-147): every task ends only after a checkpoint taken after
its end of input completed, also when its producer subtasks end at different times and a
barrier overtook the end of the input it followed."""

from __future__ import annotations

from collections import Counter

from tests.support.cluster import poll, write_job
from tests.support.exactly_once import committed_output, diff, status_name, wait_ended

#: Source subtask 0 reads its half of the numbers at once and ends; subtask 1 reads its
#: half slowly. A slow map behind a FORWARD edge keeps source 0's last records (and its
#: end of data) queued, so the barrier of source 0's final checkpoint, waiting behind
#: them, overtakes them once the aligned-checkpoint timeout passed: map subtask 0 takes
#: that checkpoint before its input ends, and needs a later one that no barrier brings.
UNEVEN = """
    import sys
    import time

    from weir import FileSink, StreamExecutionEnvironment

    OUT, N = sys.argv[1], int(sys.argv[2])

    def pace(n):
        if n >= N // 2:
            time.sleep(0.004)
        return n

    def slow(n):
        time.sleep(0.001)
        return ("n", n)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    (env.from_sequence(0, N - 1).map(pace).map(slow).start_new_chain()
        .sink_to(FileSink(OUT)))
    env.execute("uneven sources")
"""

N = 3000


def test_a_forward_consumer_whose_producer_ended_first_takes_a_final_checkpoint(
        cluster_factory, tmp_path):
    cluster = cluster_factory(1, 4)
    out = tmp_path / "out"
    job = write_job(tmp_path, UNEVEN, "uneven.py")
    config = {"execution.checkpointing.interval": "200 ms",
              "execution.checkpointing.unaligned.enabled": "true",
              "execution.checkpointing.aligned-checkpoint-timeout": "20 ms",
              # A checkpoint no barrier reaches would hang the job this long.
              "execution.checkpointing.timeout": "10 min"}
    started = cluster.weir("run", "--detached", *(f"-D{k}={v}" for k, v in config.items()),
                           str(job), str(out), str(N))
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip().splitlines()[-1]
    final = wait_ended(cluster, job_id, timeout=90)
    assert status_name(final) == "FINISHED", final.failure.message
    expected = Counter(("n", n) for n in range(N))
    got = poll(lambda: committed_output(out) or None, 10, what="committed output")
    assert got == expected, diff(expected, got)

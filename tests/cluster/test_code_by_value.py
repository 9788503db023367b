"""A job's code that exists only on the client host runs on the TaskExecutor hosts: functions
of the job program and a module shipped with ``add_python_file``, both on the client's
disk alone, travel with the job by value."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.cluster.keyed_job import committed, start_cluster
from tests.support.exactly_once import diff

pytestmark = pytest.mark.extended

HELPER = '''
"""Only on the client host's disk."""

WEIGHTS = {0: "zero", 1: "one", 2: "two"}


def describe(n):
    return WEIGHTS[n % 3], n * n
'''

JOB = '''
import os
import sys

from weir import FileSink, StreamExecutionEnvironment

import client_helpers

OUT, N = sys.argv[1], int(sys.argv[2])


def where_it_ran(n):
    """Defined in the job program; records that the helper's file is not on this host."""
    name, square = client_helpers.describe(n)
    return (n, name, square, os.path.exists("/tmp/work/client_helpers.py"))


env = StreamExecutionEnvironment.get_execution_environment()
env.add_python_file(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                 "client_helpers.py"))
env.set_parallelism(2)
env.from_collection(list(range(N))).map(where_it_ran).sink_to(FileSink(OUT))
env.execute("client-only code")
'''


def test_functions_and_python_files_of_the_client_host_run_on_other_hosts(
        hosts, seaweed_s3, s3_bucket):
    cluster = start_cluster(hosts, seaweed_s3, s3_bucket, taskexecutors=2)
    helper = cluster.client.write("/tmp/work/client_helpers.py", HELPER)
    job = cluster.client.write("/tmp/work/job.py", JOB)
    for host in (cluster.jobmaster, *cluster.taskexecutors):
        assert not host.path(helper).exists() and not host.path(job).exists()
    n = 500
    result = cluster.client.weir("run", "--jobmaster", cluster.address, str(job),
                                 f"s3://{s3_bucket}/out", str(n), timeout=180)
    assert result.returncode == 0, result.stderr + cluster.hosts.logs()
    names = {0: "zero", 1: "one", 2: "two"}
    # False: the TaskExecutor hosts ran the helper without having its file.
    expected = Counter((i, names[i % 3], i * i, False) for i in range(n))
    got = committed(seaweed_s3, s3_bucket, "out")
    assert got == expected, diff(expected, got)

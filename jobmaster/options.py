"""JobMaster options."""

from __future__ import annotations

import re

from weir.core.addresses import host_problem
from weir.core.config import Option, Seconds, non_negative, positive

RPC_BIND_HOST = Option(
    "jobmaster.rpc.bind-host", str, default="127.0.0.1", validator=host_problem,
    doc="Address the JobMaster's gRPC server binds to: 0.0.0.0 (or ::) for every "
        "interface.")
RPC_ADDRESS = Option(
    "jobmaster.rpc.address", str, default=None, validator=host_problem,
    doc="Host name or IP address TaskExecutors and clients reach the JobMaster at (its "
        "info file, `weir cluster status`, logs; the port is jobmaster.rpc.port). Unset: "
        "jobmaster.rpc.bind-host, or the host's name when that is a wildcard (0.0.0.0, ::).")
RPC_PORT = Option(
    "jobmaster.rpc.port", int, default=6123, validator=non_negative,
    doc="Port of the JobMaster's gRPC server (0 picks a free port).")
REST_PORT = Option(
    "rest.port", int, default=8081, validator=non_negative,
    doc="Port of the JobMaster's REST API (Flink's paths and JSON; 0 picks a free port).")
REST_BIND_ADDRESS = Option(
    "rest.bind-address", str, default=None, validator=host_problem,
    doc="Address the REST API binds to. Unset: 127.0.0.1 when no security.auth.token is "
        "configured (an unprotected API stays on this host), else jobmaster.rpc.bind-host.")
REST_ADDRESS = Option(
    "rest.address", str, default=None, validator=host_problem,
    doc="Host name or IP address clients reach the REST API at (its URL in the info file, "
        "`weir cluster status` and logs). Unset: rest.bind-address, or the JobMaster's "
        "advertised host when that is a wildcard.")
SLOT_REQUEST_TIMEOUT = Option(
    "slot.request.timeout", Seconds, default="5 min", validator=positive,
    doc="How long a job waits for enough free slots before it fails.")
EVENLY_SPREAD_OUT_SLOTS = Option(
    "cluster.evenly-spread-out-slots", bool, default=True,
    doc="Spread a job's slots over all TaskExecutors instead of filling one first.")
COLLECT_BUFFER_BATCHES = Option(
    "jobmaster.collect.buffer-batches", int, default=64, validator=positive,
    doc="Record batches of execute_and_collect() results the JobMaster buffers per job "
        "before sinks are held back.")
CHECKPOINTS_HISTORY = Option(
    "web.checkpoints.history", int, default=100, validator=positive,
    doc="Checkpoints (completed and failed) and recoveries (restarts and restores) a job "
        "keeps for the REST API (`/jobs/:jobid/checkpoints`, `recoveries` of `/jobs/:jobid`) "
        "and `weir status`: the newest ones. With high availability they are also kept in "
        "high-availability.storageDir, so a JobMaster that takes a job over shows them.")
JOBS_RETAINED = Option(
    "jobstore.max-capacity", int, default=100, validator=positive,
    doc="Finished jobs kept for `weir list` and `weir status`.")

# -- high availability (Flink's high-availability.* keys) --------------------------------------

HA_TYPE = Option(
    "high-availability.type", str, default="none", choices=("none", "file"),
    doc="none: a lost JobMaster fails its jobs. file: submitted job graphs and each job's "
        "latest completed checkpoint pointer are kept in high-availability.storageDir, and "
        "a restarted JobMaster (same address) recovers every running job from it.")
HA_STORAGE_DIR = Option(
    "high-availability.storageDir", str, default=None,
    doc="Where high availability keeps job graphs and checkpoint pointers: a "
        "file:///absolute/path or s3://bucket/prefix that every JobMaster of the cluster can "
        "reach (required when high-availability.type is file). It holds job code: only the "
        "cluster's own identity may write it.")
HA_CLUSTER_ID = Option(
    "high-availability.cluster-id", str, default="default",
    validator=lambda v: None if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", v) else
    "letters, digits, '.', '_' and '-', starting with a letter or digit",
    doc="Names this cluster's directory under high-availability.storageDir, so clusters "
        "can share one storage directory.")

# -- restart strategies (Flink's restart-strategy.* keys and defaults) ------------------------

RESTART_STRATEGY = Option(
    "restart-strategy.type", str, default=None,
    choices=("none", "off", "disable", "fixed-delay", "fixeddelay", "failure-rate",
             "failurerate", "exponential-delay", "exponentialdelay"),
    doc="What a failed job does: none (fail), fixed-delay, failure-rate or "
        "exponential-delay. Unset: exponential-delay when checkpointing is on, else none.")
FIXED_DELAY_ATTEMPTS = Option(
    "restart-strategy.fixed-delay.attempts", int, default=1, validator=non_negative,
    doc="fixed-delay: restarts before the job fails.")
FIXED_DELAY_DELAY = Option(
    "restart-strategy.fixed-delay.delay", Seconds, default="1 s", validator=non_negative,
    doc="fixed-delay: time between a failure and the restart.")
FAILURE_RATE_MAX_FAILURES = Option(
    "restart-strategy.failure-rate.max-failures-per-interval", int, default=1,
    validator=positive,
    doc="failure-rate: failures within one interval that still restart the job.")
FAILURE_RATE_INTERVAL = Option(
    "restart-strategy.failure-rate.failure-rate-interval", Seconds, default="1 min",
    validator=positive, doc="failure-rate: the interval failures are counted in.")
FAILURE_RATE_DELAY = Option(
    "restart-strategy.failure-rate.delay", Seconds, default="1 s", validator=non_negative,
    doc="failure-rate: time between a failure and the restart.")
EXPONENTIAL_INITIAL_BACKOFF = Option(
    "restart-strategy.exponential-delay.initial-backoff", Seconds, default="1 s",
    validator=non_negative, doc="exponential-delay: delay of the first restart.")
EXPONENTIAL_MAX_BACKOFF = Option(
    "restart-strategy.exponential-delay.max-backoff", Seconds, default="5 min",
    validator=non_negative, doc="exponential-delay: the longest delay.")
EXPONENTIAL_MULTIPLIER = Option(
    "restart-strategy.exponential-delay.backoff-multiplier", float, default="2.0",
    validator=lambda v: None if v >= 1.0 else "must be 1.0 or more",
    doc="exponential-delay: each restart's delay is the previous one times this.")
EXPONENTIAL_JITTER = Option(
    "restart-strategy.exponential-delay.jitter-factor", float, default="0.1",
    validator=lambda v: None if 0.0 <= v <= 1.0 else "must be between 0 and 1",
    doc="exponential-delay: a delay varies randomly by up to this fraction.")
EXPONENTIAL_RESET_THRESHOLD = Option(
    "restart-strategy.exponential-delay.reset-backoff-threshold", Seconds, default="1 h",
    validator=positive,
    doc="exponential-delay: a job that ran this long without failing starts again at the "
        "initial backoff.")
EXPONENTIAL_ATTEMPTS = Option(
    "restart-strategy.exponential-delay.attempts-before-reset-backoff", int,
    default="2147483647", validator=positive,
    doc="exponential-delay: restarts before the job fails (counted since the last reset).")

# -- failover strategy (Flink's jobmanager.execution.failover-strategy) -----------------------

FAILOVER_STRATEGY = Option(
    "jobmanager.execution.failover-strategy", str, default="region",
    choices=("region", "full", "approximate"),
    doc="Which tasks a task failure restarts: region (the failed task's pipelined region, "
        "the producers of lost inputs and every region downstream), full (every task) or "
        "approximate (only the failed task, from the latest checkpoint, when no task reads "
        "its output; its producers keep running; at-most-once for its input, else region).")

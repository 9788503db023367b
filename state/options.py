"""State backend options (Flink's key names where the concept is the same)."""

from __future__ import annotations

from typing import Any

from weir.core.config import ByteSize, Option, Seconds, non_negative, positive
from weir.core.errors import ConfigError


class _DisabledByZero(Option[Seconds]):
    """A duration where Flink reads a negative value as "off": weir's durations are never
    negative, so a negative value's error says how to turn the feature off instead."""

    def parse(self, raw: object) -> Any:
        try:
            return super().parse(raw)
        except ConfigError as err:
            if str(raw).strip().startswith("-"):
                msg = f"{err}; use 0 to disable"
                raise ConfigError(msg) from err
            raise

BACKEND_TYPE = Option(
    "state.backend.type", str, default="hashmap", choices=("hashmap", "rocksdb"),
    deprecated_keys=("state.backend",),
    value_aliases=(("jobmanager", "hashmap"), ("filesystem", "hashmap")),
    doc="Keyed state backend: in-memory hash maps or RocksDB (rocksdict). Flink's older "
        "key state.backend works too, and its values jobmanager and filesystem mean "
        "hashmap.")
INCREMENTAL = Option(
    "state.backend.incremental", bool, default=True,
    doc="RocksDB: upload only the SST files a previous checkpoint did not (native "
        "incremental snapshots).")
ROCKSDB_LOCALDIR = Option(
    "state.backend.rocksdb.localdir", str, default=None,
    doc="Directory of the RocksDB instances: each TaskExecutor uses "
        "<localdir>/weir-tm-<resource id>, locked while it runs, and empties it when it "
        "starts; that of a random resource id goes at a stop, or after a crash when the "
        "next TaskExecutor starts on the host (default: <working directory>/rocksdb).")
ROCKSDB_MEMORY = Option(
    "state.backend.rocksdb.memory.managed-size", ByteSize, default="64mb",
    validator=positive, doc="Block cache and write buffers of one RocksDB instance.")
LAZY_RESTORE = Option(
    "state.backend.restore.lazy", bool, default=False,
    doc="Start processing before all key groups are restored; a record waits only for "
        "its own key group.")
RESCALE_METHOD = Option(
    "state.backend.rocksdb.restore.rescale-method", str, default="clip",
    choices=("clip", "baseline"),
    doc="How RocksDB native state is restored at another parallelism: clip (open the "
        "overlapping instance with the most key groups and delete the others' key groups "
        "from it, then insert the rest) or baseline (an empty instance, every row "
        "inserted).")
LOCAL_RECOVERY = Option(
    "state.backend.local-recovery", bool, default=False,
    doc="Keep a verified secondary copy of each snapshot in the TaskExecutor's working "
        "directory for task-local recovery.")
LOCAL_ROOT_DIR = Option(
    "taskmanager.state.local.root-dirs", str, default=None,
    doc="Where local copies of snapshots go when state.backend.local-recovery is on "
        "(default: <TaskExecutor working directory>/localState).")
LOCAL_RECOVERY_WAIT = Option(
    "state.backend.local-recovery.taskexecutor-wait", Seconds, default="0 s",
    validator=non_negative,
    doc="How long a restart waits for a lost TaskExecutor that holds task-local state to "
        "come back (same taskmanager.resource-id, e.g. restarted by its supervisor) before "
        "it restores those tasks elsewhere from checkpoint storage. 0: never wait.")

# -- the changelog state backend (generic log-based incremental checkpoints) -------------------

CHANGELOG_ENABLED = Option(
    "state.changelog.enabled", bool, default=False,
    deprecated_keys=("state.backend.changelog.enabled",),
    doc="Also write every keyed state change to a durable short-term log (DSTL) that is "
        "uploaded continuously: a checkpoint uploads only the log's tail, and the backend's "
        "own snapshot (materialization) runs on its own schedule. Flink's older key "
        "state.backend.changelog.enabled works too.")
CHANGELOG_STORAGE = Option(
    "state.changelog.storage", str, default="filesystem", choices=("filesystem",),
    deprecated_keys=("state.backend.changelog.storage",),
    doc="Where the state change log goes: filesystem (file:// or s3://, see "
        "state.changelog.dstl.dfs.base-path).")
CHANGELOG_BASE_PATH = Option(
    "state.changelog.dstl.dfs.base-path", str, default=None,
    doc="Where the state change log files go (file:// or s3://), under <base-path>/<job-id>. "
        "Default: <job's checkpoint directory>/changelog, so that nothing more needs "
        "configuring. Either way a file is deleted once no retained checkpoint refers to "
        "it.")
CHANGELOG_MATERIALIZE_INTERVAL = _DisabledByZero(
    "state.changelog.periodic-materialize.interval", Seconds, default="10 min",
    deprecated_keys=("state.backend.changelog.periodic-materialize.interval",),
    doc="How often the wrapped backend takes its own snapshot (materialization), after "
        "which the log before it is no longer needed. 0: no periodic materialization "
        "(where Flink takes a negative value).")
CHANGELOG_MAX_FAILURES = Option(
    "state.changelog.max-failures-allowed", int, default=3, validator=non_negative,
    deprecated_keys=("state.backend.changelog.max-failures-allowed",),
    doc="Consecutive failed materializations that fail the task.")
CHANGELOG_PREEMPTIVE_PERSIST = Option(
    "state.changelog.dstl.dfs.preemptive-persist-threshold", ByteSize, default="5mb",
    validator=positive,
    doc="A backend's changes not yet uploaded that are persisted at once, without waiting "
        "for a checkpoint (keeps the checkpoint's own upload small).")
CHANGELOG_PERSIST_DELAY = Option(
    "state.changelog.dstl.dfs.batch.persist-delay", Seconds, default="10 ms",
    validator=non_negative,
    doc="How long a persist request waits for others (of every task on the TaskExecutor) "
        "so that they share one file and one request.")
CHANGELOG_PERSIST_SIZE = Option(
    "state.changelog.dstl.dfs.batch.persist-size-threshold", ByteSize, default="10mb",
    validator=positive,
    doc="Waiting changes (of every task on the TaskExecutor) that are uploaded at once, "
        "before the persist delay has passed.")
CHANGELOG_UPLOAD_TIMEOUT = Option(
    "state.changelog.dstl.dfs.upload.timeout", Seconds, default="1 s", validator=positive,
    doc="How long one upload attempt of a log file may take before it is retried (an "
        "attempt that finishes later has its file deleted).")
CHANGELOG_UPLOAD_ATTEMPTS = Option(
    "state.changelog.dstl.dfs.upload.max-attempts", int, default=3, validator=positive,
    doc="Attempts per log file upload (timeouts and failures) before it fails.")
CHANGELOG_UPLOAD_RETRY_DELAY = Option(
    "state.changelog.dstl.dfs.upload.next-attempt-delay", Seconds, default="50 ms",
    validator=non_negative,
    doc="Delay before the next attempt of a log file upload that timed out.")
CHANGELOG_MAX_IN_FLIGHT = Option(
    "state.changelog.dstl.dfs.upload.max-in-flight", ByteSize, default="100mb",
    validator=positive,
    doc="Log bytes buffered or being uploaded per TaskExecutor; reaching it backpressures "
        "the tasks that write state until uploads complete. A task that waits while no "
        "upload completes for twice (persist-delay + max-attempts x upload.timeout + "
        "(max-attempts - 1) x next-attempt-delay) fails: the log storage cannot keep up "
        "or is unreachable.")

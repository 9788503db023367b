"""State backend options (Flink's key names where the concept is the same)."""

from __future__ import annotations

from weir.core.config import ByteSize, Option, Seconds, non_negative, positive

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
    doc="Directory of the RocksDB instances (default: the TaskExecutor's working directory).")
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

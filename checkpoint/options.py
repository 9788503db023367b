"""Checkpoint storage options (Flink's key names where the concept is the same)."""

from __future__ import annotations

from weir.core.config import Configuration, Option, Seconds, non_negative, positive
from weir.core.options import RUNTIME_MODE

CHECKPOINTS_DIR = Option(
    "state.checkpoints.dir", str, default=None,
    doc="Where checkpoints are written: a file:// path or s3://bucket/prefix. Unset, "
        "`weir cluster start` uses its directory's checkpoints/ (the embedded S3 bucket "
        "with --with-s3), a job run in process (`python job.py`) its in-process "
        "cluster's temporary directory, deleted when the job ends; daemons started by "
        "hand refuse a job that checkpoints without it.")
SAVEPOINTS_DIR = Option(
    "execution.checkpointing.savepoint-dir", str, default=None,
    deprecated_keys=("state.savepoints.dir",),
    doc="Default target directory of savepoints (file:// or s3://): `weir savepoint` and "
        "`weir stop` write below it when given no directory.")
# -- checkpointing (Flink's execution.checkpointing.* keys and defaults) ---------------------

CHECKPOINTING_INTERVAL = Option(
    "execution.checkpointing.interval", Seconds, default=None, validator=positive,
    doc="Time between the triggers of two periodic checkpoints; unset: checkpointing is "
        "off.")
CHECKPOINTING_TIMEOUT = Option(
    "execution.checkpointing.timeout", Seconds, default="10 min", validator=positive,
    doc="A checkpoint not acknowledged by every task this long after its trigger expires "
        "(fails with CHECKPOINT_EXPIRED).")
MIN_PAUSE = Option(
    "execution.checkpointing.min-pause", Seconds, default="0 ms", validator=non_negative,
    doc="Least time between the end of one checkpoint and the trigger of the next.")
MAX_CONCURRENT_CHECKPOINTS = Option(
    "execution.checkpointing.max-concurrent-checkpoints", int, default=1, validator=positive,
    doc="Checkpoints that may be in progress at once (unaligned checkpoints need 1).")
TOLERABLE_FAILED_CHECKPOINTS = Option(
    "execution.checkpointing.tolerable-failed-checkpoints", int, default=0,
    validator=non_negative,
    doc="Consecutive checkpoint failures the job tolerates; one more fails the job (and "
        "restarts it, if its restart strategy allows).")
CHECKPOINTING_MODE = Option(
    "execution.checkpointing.mode", str, default="EXACTLY_ONCE",
    choices=("EXACTLY_ONCE", "AT_LEAST_ONCE"),
    doc="EXACTLY_ONCE aligns barriers (or overtakes in-flight data, unaligned); "
        "AT_LEAST_ONCE never blocks an input, so records after a barrier may be counted in "
        "the checkpoint and replayed after a failure.")
UNALIGNED = Option(
    "execution.checkpointing.unaligned.enabled", bool, default=False,
    deprecated_keys=("execution.checkpointing.unaligned",),
    doc="Barriers overtake in-flight data, which becomes part of the checkpoint: "
        "checkpoints complete quickly under backpressure (EXACTLY_ONCE only).")
ALIGNED_CHECKPOINT_TIMEOUT = Option(
    "execution.checkpointing.aligned-checkpoint-timeout", Seconds, default="0 ms",
    validator=non_negative,
    doc="With unaligned checkpoints on and a value above 0, a checkpoint starts aligned and "
        "each subtask switches to unaligned once this much time passed since the trigger.")
EXTERNALIZED_RETENTION = Option(
    "execution.checkpointing.externalized-checkpoint-retention", str,
    default="NO_EXTERNALIZED_CHECKPOINTS",
    choices=("NO_EXTERNALIZED_CHECKPOINTS", "RETAIN_ON_CANCELLATION",
             "DELETE_ON_CANCELLATION"),
    doc="What happens to the retained checkpoints when the job ends: deleted always; kept "
        "on cancellation and failure; or deleted on cancellation but kept on failure. They "
        "are deleted when the job finishes in every case.")
NUM_RETAINED = Option(
    "state.checkpoints.num-retained", int, default=1, validator=positive,
    doc="Completed checkpoints to keep; older ones are subsumed and deleted.")
RECOVER_WITHOUT_CHANNEL_STATE = Option(
    "execution.checkpointing.recover-without-channel-state.checkpoint-id", int, default=-1,
    doc="Restore this checkpoint without its in-flight data (the records it holds are "
        "lost): a way out when channel state cannot be read. -1: never.")
# -- restoring a savepoint or retained checkpoint (Flink's execution.state-recovery.*) ------

RECOVERY_PATH = Option(
    "execution.state-recovery.path", str, default=None,
    doc="Start the job from this savepoint or retained checkpoint (its directory or its "
        "_metadata file); `weir run -s PATH` sets it.")
CLAIM_MODE = Option(
    "execution.state-recovery.claim-mode", str, default="NO_CLAIM",
    choices=("NO_CLAIM", "CLAIM"),
    doc="NO_CLAIM: the job never modifies or deletes the snapshot; its first checkpoint is "
        "a full one, and until that completes a failover restores the snapshot. CLAIM: the "
        "job owns the snapshot: it counts as a retained checkpoint, later checkpoints may "
        "reuse its files, and it is deleted once subsumed.")
IGNORE_UNCLAIMED_STATE = Option(
    "execution.state-recovery.ignore-unclaimed-state", bool, default=False,
    doc="Start even when the snapshot holds state of an operator (uid) the job does not "
        "have; that state is dropped. `weir run --allow-non-restored-state` sets it.")

UPLOAD_THREADS = Option(
    "state.checkpoints.upload-threads", int, default=4, validator=positive,
    doc="Threads per TaskExecutor that write the asynchronous part of checkpoints; tasks "
        "never upload on their own thread.")


def checkpointing_enabled(config: Configuration) -> bool:
    """Whether a job with ``config`` takes checkpoints: an interval is set and the job runs
    in STREAMING mode (as Flink, checkpoints are off in BATCH mode)."""
    return config.get(CHECKPOINTING_INTERVAL) is not None and \
        config.get(RUNTIME_MODE).upper() != "BATCH"

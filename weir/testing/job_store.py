"""The conformance suite of high-availability job stores: every implementation of
:class:`~weir.jobmaster.high_availability.JobStore` (``file://``, ``s3://``) must pass
:func:`check_job_store`.

Example:
    >>> import tempfile
    >>> from weir.jobmaster.high_availability import StorageJobStore
    >>> from weir.checkpoint.storage import create_storage
    >>> check_job_store(StorageJobStore(create_storage(tempfile.mkdtemp())))
"""

from __future__ import annotations

from weir.core.errors import MissingStateError
from weir.core.ids import CheckpointId, JobId
from weir.jobmaster.high_availability import CheckpointPointer, JobStore
from weir.testing.asserts import raises

JOB = JobId("0123456789abcdef0123456789abcdef")
OTHER = JobId("fedcba9876543210fedcba9876543210")


def check_job_store(store: JobStore) -> None:
    """What every job store does, from an empty store: jobs, pointers that never go back,
    histories, removal (that also stops later pointers and histories of the job). Raises
    AssertionError naming what differs."""
    assert store.job_ids() == []
    store.put_job(b"graph of job", JOB)
    store.put_job(b"graph of other", OTHER)
    assert store.job_ids() == sorted([JOB, OTHER])
    assert store.get_job(JOB) == b"graph of job"
    assert store.checkpoint_pointer(JOB) is None

    store.put_checkpoint_pointer(JOB, CheckpointId(3), "s3://b/chk/" + JOB + "/chk-3")
    assert store.checkpoint_pointer(JOB) == CheckpointPointer(JOB, CheckpointId(3), f"s3://b/chk/{JOB}/chk-3")
    store.put_checkpoint_pointer(JOB, CheckpointId(5), "s3://b/chk/" + JOB + "/chk-5")
    # Out of order (concurrent finalizations): an older pointer never replaces a newer one.
    store.put_checkpoint_pointer(JOB, CheckpointId(4), "s3://b/chk/" + JOB + "/chk-4")
    pointer = store.checkpoint_pointer(JOB)
    assert pointer is not None and pointer.checkpoint_id == 5

    assert store.history(JOB) is None
    store.put_history(JOB, b"history 1")
    store.put_history(JOB, b"history 2")
    assert store.history(JOB) == b"history 2"
    assert store.history(OTHER) is None
    # A job submitted again under the same id starts with no history.
    store.put_job(b"graph of other", OTHER)
    store.put_history(OTHER, b"old history")
    store.put_job(b"graph of other, again", OTHER)
    assert store.history(OTHER) is None

    store.remove_job(JOB)
    assert store.job_ids() == [OTHER]
    store.put_history(JOB, b"late history")      # a write after the job ended: skipped
    assert store.history(JOB) is None
    # A finalization that finishes after the job ended writes nothing.
    store.put_checkpoint_pointer(JOB, CheckpointId(6), "s3://b/chk/" + JOB + "/chk-6")
    assert store.job_ids() == [OTHER]
    with raises(MissingStateError, "jobgraph does not exist"):
        store.get_job(JOB)
    store.remove_job(JOB)            # removing twice is not an error
    store.remove_job(OTHER)
    assert store.job_ids() == []

"""What the JobMaster's operations raise: one class per meaning.

The JobMaster (``weir.jobmaster.daemon``) raises these from the operations its servicers
call; which gRPC status each one answers with is decided in one place,
``weir.jobmaster.status_codes``. Errors raised elsewhere keep their homes:
:class:`~weir.core.errors.JobNotFoundError` and :class:`~weir.core.errors.InvalidJobError`
(shared with the client), ``DuplicateTaskExecutorError`` (``resource_manager``),
``JobGraphValidationError``, ``JobChangeRefusedError`` and ``SnapshotMismatchError``.

Example:
    >>> from weir.core.errors import UserError, WeirError
    >>> issubclass(JobExistsError, UserError), issubclass(SavepointFailedError, WeirError)
    (True, True)
"""

from __future__ import annotations

from weir.core.errors import UserError, WeirError


class JobExistsError(UserError):
    """A job was submitted with the id of a job the JobMaster knows."""


class JobNotStoredError(UserError):
    """High availability is on and a submitted job's graph could not be stored: the job
    was not submitted."""


class SnapshotUnreadableError(UserError):
    """The savepoint or retained checkpoint a submitted job starts from cannot be read
    (missing, damaged, or its storage refuses access): the job was not submitted."""


class JobMasterStoppingError(WeirError):
    """Work was handed to the JobMaster's main thread after it began to stop."""


class TaskExecutorNotRegisteredError(WeirError):
    """A heartbeat stream was opened for a registration the JobMaster does not hold (never
    registered, or replaced by a newer registration): the TaskExecutor must register."""


class SplitEnumeratorError(WeirError):
    """A job's split enumerator raised while answering a split request; the job fails
    over, so the reader's request has no answer."""


class SavepointFailedError(WeirError):
    """A savepoint was taken and failed (a task declined it, storage failed, ...); the job
    keeps running as before."""


class JobChangeFailedError(WeirError):
    """A rescale or hot update was refused by the running job or rolled back; the job runs
    as before."""


class OperationTimeoutError(WeirError):
    """A savepoint, rescale or hot update did not end within the time the JobMaster waits
    for it; it may still end later."""


class SavepointNotDisposedError(WeirError):
    """A savepoint could not be disposed of: the path is no savepoint, or deleting it
    failed; the message names the path and the cause."""

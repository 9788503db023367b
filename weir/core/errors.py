"""The error hierarchy. Each class means one thing; user errors reach the CLI as one line.

Example:
    >>> from weir.core.errors import ConfigError, UserError
    >>> issubclass(ConfigError, UserError)
    True
"""

from __future__ import annotations


class WeirError(Exception):
    """Base class of every error weir raises on purpose."""


class UserError(WeirError):
    """Something the user can fix: the message names the cause and the fix."""


class ConfigError(UserError):
    """An unknown configuration key or an invalid value."""


class InvalidJobError(UserError):
    """The job program or its graph is malformed (raises, cannot be pickled, bad parameter)."""


class ClusterUnreachableError(UserError):
    """The JobMaster cannot be reached at the address the client resolved."""


class AuthenticationError(UserError):
    """An RPC was refused because it carried no token or the wrong one."""


class JobNotFoundError(UserError):
    """A job id that the JobMaster does not know."""


class JobExecutionError(WeirError):
    """A job ended FAILED or CANCELED; ``reason`` is the root cause reported by the cluster."""

    def __init__(self, job_id: str, status: str, reason: str) -> None:
        super().__init__(f"job {job_id} {status.lower()}: {reason}")
        self.job_id = job_id
        self.status = status
        self.reason = reason


class PartitionNotFoundError(WeirError):
    """A consumer requested a result partition its producer does not (or no longer) serve.
    ``partition_id`` names it when known: the JobMaster then produces it again."""

    def __init__(self, message: str, partition_id: str = "") -> None:
        super().__init__(message)
        self.partition_id = partition_id


class RemoteTransportError(WeirError):
    """A data connection to another TaskExecutor broke; the cause is in ``__cause__``."""


class InternalError(WeirError):
    """An invariant of weir itself was broken: this is a bug in weir, please report it."""


class StateError(WeirError):
    """Keyed or operator state was used wrongly or could not be read or written; the message
    names the state and the cause."""


class IncompatibleStateError(StateError):
    """A restored state does not fit what the job declares (another kind of state under
    the same name): restoring would read it wrongly. The message names the operator, the
    state and the fix."""


class StorageError(WeirError):
    """Reading or writing checkpoint storage failed; the message names the URI or bucket."""


class MissingStateError(StorageError):
    """A state object that a handle points to does not exist (deleted, or never written)."""


class CorruptStateError(StorageError):
    """A state object's length or checksum differs from what its handle recorded."""


class StorageAccessError(UserError, StorageError):
    """Checkpoint storage refused access: wrong credentials, or the bucket does not exist."""


class StorageUnreachableError(UserError, StorageError):
    """The checkpoint storage endpoint cannot be reached (connection refused or timed out),
    or answers that it cannot serve now (a 5xx answer after retries): retried, never taken
    for damaged state."""


class MailboxFullError(WeirError):
    """A task's mailbox stayed full for the whole timeout of a ``put``: its thread takes no
    mails (stuck, or far behind), and the mail was not enqueued."""

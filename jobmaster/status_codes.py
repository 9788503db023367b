"""The gRPC status each domain error of the JobMaster answers with: the one place where the
JobMaster's servicers (``gateway_servicer``, ``dispatcher_servicer``) turn what its
operations raise into status codes.

The message of the error is the call's details, as it is: each names the cause and, for a
client, the fix. An error not listed here (nor any of its bases) is not translated: it
ends the call as gRPC ends one whose handler raised (UNKNOWN), and the traceback is logged.

Example:
    >>> from weir.core.errors import JobNotFoundError
    >>> status_code(JobNotFoundError("no job with id 'x'"))
    <StatusCode.NOT_FOUND: (5, 'not found')>
    >>> status_code(ValueError("not a domain error")) is None
    True
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import grpc

from weir.core.errors import ConfigError, InternalError, InvalidJobError, JobNotFoundError
from weir.jobmaster.errors import (
    JobChangeFailedError,
    JobExistsError,
    JobMasterStoppingError,
    JobNotStoredError,
    OperationTimeoutError,
    SavepointFailedError,
    SavepointNotDisposedError,
    SnapshotUnreadableError,
    SplitEnumeratorError,
    TaskExecutorNotRegisteredError,
)
from weir.jobmaster.job_change import JobChangeRefusedError
from weir.jobmaster.resource_manager import DuplicateTaskExecutorError
from weir.jobmaster.savepoints import SnapshotMismatchError

#: Domain error -> status. An error answers with the entry of the first class of its MRO
#: that is listed (JobGraphValidationError is an InvalidJobError).
STATUS_CODES: Mapping[type, grpc.StatusCode] = {
    # Nothing of that name.
    JobNotFoundError: grpc.StatusCode.NOT_FOUND,
    # The name is taken.
    JobExistsError: grpc.StatusCode.ALREADY_EXISTS,
    DuplicateTaskExecutorError: grpc.StatusCode.ALREADY_EXISTS,
    # The request itself is wrong: asking again the same way cannot work.
    InvalidJobError: grpc.StatusCode.INVALID_ARGUMENT,
    ConfigError: grpc.StatusCode.INVALID_ARGUMENT,
    JobChangeRefusedError: grpc.StatusCode.INVALID_ARGUMENT,
    # The request is fine, but the state of the cluster, the job or its snapshots is not.
    TaskExecutorNotRegisteredError: grpc.StatusCode.FAILED_PRECONDITION,
    SplitEnumeratorError: grpc.StatusCode.FAILED_PRECONDITION,
    JobNotStoredError: grpc.StatusCode.FAILED_PRECONDITION,
    SnapshotMismatchError: grpc.StatusCode.FAILED_PRECONDITION,
    SnapshotUnreadableError: grpc.StatusCode.FAILED_PRECONDITION,
    SavepointFailedError: grpc.StatusCode.FAILED_PRECONDITION,
    JobChangeFailedError: grpc.StatusCode.FAILED_PRECONDITION,
    SavepointNotDisposedError: grpc.StatusCode.FAILED_PRECONDITION,
    OperationTimeoutError: grpc.StatusCode.DEADLINE_EXCEEDED,
    # The JobMaster is going away: another one (high availability) may take the call.
    JobMasterStoppingError: grpc.StatusCode.UNAVAILABLE,
    InternalError: grpc.StatusCode.INTERNAL,
}


def status_code(error: BaseException) -> grpc.StatusCode | None:
    """The status ``error`` answers with, or None when it is no listed domain error."""
    for cls in type(error).__mro__:
        code = STATUS_CODES.get(cls)
        if code is not None:
            return code
    return None


@contextmanager
def domain_errors(context: grpc.ServicerContext) -> Iterator[None]:
    """Ends the call with the status of a domain error raised inside (see
    :data:`STATUS_CODES`) and the error's message as details; other exceptions pass.

    Used around the domain calls of a handler, on its RPC thread::

        with domain_errors(context):
            job_id = self._jm.submit_job(request.job_graph)
    """
    try:
        yield
    except Exception as err:
        code = status_code(err)
        if code is None:
            raise
        context.abort(code, str(err))

from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ExecutionState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CREATED: _ClassVar[ExecutionState]
    SCHEDULED: _ClassVar[ExecutionState]
    DEPLOYING: _ClassVar[ExecutionState]
    INITIALIZING: _ClassVar[ExecutionState]
    RUNNING: _ClassVar[ExecutionState]
    FINISHED: _ClassVar[ExecutionState]
    CANCELING: _ClassVar[ExecutionState]
    CANCELED: _ClassVar[ExecutionState]
    FAILED: _ClassVar[ExecutionState]

class JobStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_INITIALIZING: _ClassVar[JobStatus]
    JOB_CREATED: _ClassVar[JobStatus]
    JOB_RUNNING: _ClassVar[JobStatus]
    JOB_FAILING: _ClassVar[JobStatus]
    JOB_FAILED: _ClassVar[JobStatus]
    JOB_CANCELLING: _ClassVar[JobStatus]
    JOB_CANCELED: _ClassVar[JobStatus]
    JOB_FINISHED: _ClassVar[JobStatus]
    JOB_RESTARTING: _ClassVar[JobStatus]
    JOB_SUSPENDED: _ClassVar[JobStatus]

class FailureReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAILURE_UNKNOWN: _ClassVar[FailureReason]
    USER_CODE_ERROR: _ClassVar[FailureReason]
    TASK_EXECUTOR_LOST: _ClassVar[FailureReason]
    HEARTBEAT_TIMEOUT: _ClassVar[FailureReason]
    PARTITION_NOT_FOUND: _ClassVar[FailureReason]
    REMOTE_TRANSPORT: _ClassVar[FailureReason]
    NO_RESOURCES: _ClassVar[FailureReason]
    DEPLOYMENT_FAILED: _ClassVar[FailureReason]
    JOB_CANCELLED: _ClassVar[FailureReason]
    INTERNAL_ERROR: _ClassVar[FailureReason]
    SOURCE_ERROR: _ClassVar[FailureReason]
    CHECKPOINT_FAILURE: _ClassVar[FailureReason]
    STATE_RESTORE_FAILED: _ClassVar[FailureReason]
    STATE_INCOMPATIBLE: _ClassVar[FailureReason]
    JOBMASTER_FAILOVER: _ClassVar[FailureReason]

class PartitionerType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FORWARD: _ClassVar[PartitionerType]
    REBALANCE: _ClassVar[PartitionerType]
    HASH: _ClassVar[PartitionerType]
    BROADCAST: _ClassVar[PartitionerType]
CREATED: ExecutionState
SCHEDULED: ExecutionState
DEPLOYING: ExecutionState
INITIALIZING: ExecutionState
RUNNING: ExecutionState
FINISHED: ExecutionState
CANCELING: ExecutionState
CANCELED: ExecutionState
FAILED: ExecutionState
JOB_INITIALIZING: JobStatus
JOB_CREATED: JobStatus
JOB_RUNNING: JobStatus
JOB_FAILING: JobStatus
JOB_FAILED: JobStatus
JOB_CANCELLING: JobStatus
JOB_CANCELED: JobStatus
JOB_FINISHED: JobStatus
JOB_RESTARTING: JobStatus
JOB_SUSPENDED: JobStatus
FAILURE_UNKNOWN: FailureReason
USER_CODE_ERROR: FailureReason
TASK_EXECUTOR_LOST: FailureReason
HEARTBEAT_TIMEOUT: FailureReason
PARTITION_NOT_FOUND: FailureReason
REMOTE_TRANSPORT: FailureReason
NO_RESOURCES: FailureReason
DEPLOYMENT_FAILED: FailureReason
JOB_CANCELLED: FailureReason
INTERNAL_ERROR: FailureReason
SOURCE_ERROR: FailureReason
CHECKPOINT_FAILURE: FailureReason
STATE_RESTORE_FAILED: FailureReason
STATE_INCOMPATIBLE: FailureReason
JOBMASTER_FAILOVER: FailureReason
FORWARD: PartitionerType
REBALANCE: PartitionerType
HASH: PartitionerType
BROADCAST: PartitionerType

class ErrorInfo(_message.Message):
    __slots__ = ("reason", "message", "exception_class", "traceback", "task", "partition_id", "timestamp_ms")
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXCEPTION_CLASS_FIELD_NUMBER: _ClassVar[int]
    TRACEBACK_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    reason: FailureReason
    message: str
    exception_class: str
    traceback: str
    task: str
    partition_id: str
    timestamp_ms: int
    def __init__(self, reason: _Optional[_Union[FailureReason, str]] = ..., message: _Optional[str] = ..., exception_class: _Optional[str] = ..., traceback: _Optional[str] = ..., task: _Optional[str] = ..., partition_id: _Optional[str] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

from weir.proto import checkpoint_pb2 as _checkpoint_pb2
from weir.proto import jobgraph_pb2 as _jobgraph_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CancelTaskRequest(_message.Message):
    __slots__ = ("attempt_id",)
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    def __init__(self, attempt_id: _Optional[str] = ...) -> None: ...

class ReleaseJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class TriggerCheckpointRequest(_message.Message):
    __slots__ = ("attempt_id", "checkpoint_id", "timestamp_ms", "options")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    checkpoint_id: int
    timestamp_ms: int
    options: _checkpoint_pb2.CheckpointOptions
    def __init__(self, attempt_id: _Optional[str] = ..., checkpoint_id: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., options: _Optional[_Union[_checkpoint_pb2.CheckpointOptions, _Mapping]] = ...) -> None: ...

class CheckpointNotification(_message.Message):
    __slots__ = ("job_id", "checkpoint_id", "complete", "attempt_ids", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    COMPLETE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_IDS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    checkpoint_id: int
    complete: bool
    attempt_ids: _containers.RepeatedScalarFieldContainer[str]
    reason: _checkpoint_pb2.CheckpointFailureReason
    def __init__(self, job_id: _Optional[str] = ..., checkpoint_id: _Optional[int] = ..., complete: _Optional[bool] = ..., attempt_ids: _Optional[_Iterable[str]] = ..., reason: _Optional[_Union[_checkpoint_pb2.CheckpointFailureReason, str]] = ...) -> None: ...

from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class CheckpointFailureReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHECKPOINT_FAILURE_UNKNOWN: _ClassVar[CheckpointFailureReason]
    CHECKPOINT_EXPIRED: _ClassVar[CheckpointFailureReason]
    CHECKPOINT_DECLINED: _ClassVar[CheckpointFailureReason]
    CHECKPOINT_DECLINED_TASK_NOT_READY: _ClassVar[CheckpointFailureReason]
    CHECKPOINT_DECLINED_SUBSUMED: _ClassVar[CheckpointFailureReason]
    CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER: _ClassVar[CheckpointFailureReason]
    CHECKPOINT_ASYNC_EXCEPTION: _ClassVar[CheckpointFailureReason]
    CHECKPOINT_SUBSUMED: _ClassVar[CheckpointFailureReason]
    TASK_FAILURE: _ClassVar[CheckpointFailureReason]
    TASK_CHECKPOINT_FAILURE: _ClassVar[CheckpointFailureReason]
    FINALIZE_CHECKPOINT_FAILURE: _ClassVar[CheckpointFailureReason]
    IO_EXCEPTION: _ClassVar[CheckpointFailureReason]
    JOB_FAILOVER_REGION: _ClassVar[CheckpointFailureReason]
    CHECKPOINT_COORDINATOR_SHUTDOWN: _ClassVar[CheckpointFailureReason]
    TOO_MANY_CHECKPOINT_REQUESTS: _ClassVar[CheckpointFailureReason]
    TRIGGER_CHECKPOINT_FAILURE: _ClassVar[CheckpointFailureReason]
    CHECKPOINT_DECLINED_INPUT_END_OF_STREAM: _ClassVar[CheckpointFailureReason]

class SavepointFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SAVEPOINT_CANONICAL: _ClassVar[SavepointFormat]
    SAVEPOINT_NATIVE: _ClassVar[SavepointFormat]
    SAVEPOINT_NATIVE_FULL: _ClassVar[SavepointFormat]
CHECKPOINT_FAILURE_UNKNOWN: CheckpointFailureReason
CHECKPOINT_EXPIRED: CheckpointFailureReason
CHECKPOINT_DECLINED: CheckpointFailureReason
CHECKPOINT_DECLINED_TASK_NOT_READY: CheckpointFailureReason
CHECKPOINT_DECLINED_SUBSUMED: CheckpointFailureReason
CHECKPOINT_DECLINED_ON_CANCELLATION_BARRIER: CheckpointFailureReason
CHECKPOINT_ASYNC_EXCEPTION: CheckpointFailureReason
CHECKPOINT_SUBSUMED: CheckpointFailureReason
TASK_FAILURE: CheckpointFailureReason
TASK_CHECKPOINT_FAILURE: CheckpointFailureReason
FINALIZE_CHECKPOINT_FAILURE: CheckpointFailureReason
IO_EXCEPTION: CheckpointFailureReason
JOB_FAILOVER_REGION: CheckpointFailureReason
CHECKPOINT_COORDINATOR_SHUTDOWN: CheckpointFailureReason
TOO_MANY_CHECKPOINT_REQUESTS: CheckpointFailureReason
TRIGGER_CHECKPOINT_FAILURE: CheckpointFailureReason
CHECKPOINT_DECLINED_INPUT_END_OF_STREAM: CheckpointFailureReason
SAVEPOINT_CANONICAL: SavepointFormat
SAVEPOINT_NATIVE: SavepointFormat
SAVEPOINT_NATIVE_FULL: SavepointFormat

class StreamHandle(_message.Message):
    __slots__ = ("uri", "size", "checksum")
    URI_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    CHECKSUM_FIELD_NUMBER: _ClassVar[int]
    uri: str
    size: int
    checksum: str
    def __init__(self, uri: _Optional[str] = ..., size: _Optional[int] = ..., checksum: _Optional[str] = ...) -> None: ...

class OperatorSubtaskState(_message.Message):
    __slots__ = ("operator_uid", "keyed_state", "operator_state", "keyed_state_size", "incremental_size", "operator_state_split_only")
    OPERATOR_UID_FIELD_NUMBER: _ClassVar[int]
    KEYED_STATE_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_STATE_FIELD_NUMBER: _ClassVar[int]
    KEYED_STATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    INCREMENTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_STATE_SPLIT_ONLY_FIELD_NUMBER: _ClassVar[int]
    operator_uid: str
    keyed_state: str
    operator_state: StreamHandle
    keyed_state_size: int
    incremental_size: int
    operator_state_split_only: bool
    def __init__(self, operator_uid: _Optional[str] = ..., keyed_state: _Optional[str] = ..., operator_state: _Optional[_Union[StreamHandle, _Mapping]] = ..., keyed_state_size: _Optional[int] = ..., incremental_size: _Optional[int] = ..., operator_state_split_only: _Optional[bool] = ...) -> None: ...

class ChannelStateHandle(_message.Message):
    __slots__ = ("data", "input_bytes", "output_bytes", "gate_channels")
    DATA_FIELD_NUMBER: _ClassVar[int]
    INPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    GATE_CHANNELS_FIELD_NUMBER: _ClassVar[int]
    data: StreamHandle
    input_bytes: int
    output_bytes: int
    gate_channels: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, data: _Optional[_Union[StreamHandle, _Mapping]] = ..., input_bytes: _Optional[int] = ..., output_bytes: _Optional[int] = ..., gate_channels: _Optional[_Iterable[int]] = ...) -> None: ...

class TaskStateSnapshot(_message.Message):
    __slots__ = ("operators", "channel_state")
    OPERATORS_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_STATE_FIELD_NUMBER: _ClassVar[int]
    operators: _containers.RepeatedCompositeFieldContainer[OperatorSubtaskState]
    channel_state: ChannelStateHandle
    def __init__(self, operators: _Optional[_Iterable[_Union[OperatorSubtaskState, _Mapping]]] = ..., channel_state: _Optional[_Union[ChannelStateHandle, _Mapping]] = ...) -> None: ...

class CheckpointTaskMetrics(_message.Message):
    __slots__ = ("sync_duration_ms", "async_duration_ms", "alignment_duration_ms", "start_delay_ms", "processed_bytes", "persisted_bytes", "state_size", "incremental_size", "unaligned", "ack_timestamp_ms", "in_flight_bound_bytes", "changelog_state_size")
    SYNC_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ASYNC_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    START_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    PROCESSED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PERSISTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    STATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    INCREMENTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    UNALIGNED_FIELD_NUMBER: _ClassVar[int]
    ACK_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_BOUND_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHANGELOG_STATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    sync_duration_ms: int
    async_duration_ms: int
    alignment_duration_ms: int
    start_delay_ms: int
    processed_bytes: int
    persisted_bytes: int
    state_size: int
    incremental_size: int
    unaligned: bool
    ack_timestamp_ms: int
    in_flight_bound_bytes: int
    changelog_state_size: int
    def __init__(self, sync_duration_ms: _Optional[int] = ..., async_duration_ms: _Optional[int] = ..., alignment_duration_ms: _Optional[int] = ..., start_delay_ms: _Optional[int] = ..., processed_bytes: _Optional[int] = ..., persisted_bytes: _Optional[int] = ..., state_size: _Optional[int] = ..., incremental_size: _Optional[int] = ..., unaligned: _Optional[bool] = ..., ack_timestamp_ms: _Optional[int] = ..., in_flight_bound_bytes: _Optional[int] = ..., changelog_state_size: _Optional[int] = ...) -> None: ...

class SubtaskCheckpointState(_message.Message):
    __slots__ = ("vertex_id", "subtask_index", "state", "finished")
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    vertex_id: int
    subtask_index: int
    state: TaskStateSnapshot
    finished: bool
    def __init__(self, vertex_id: _Optional[int] = ..., subtask_index: _Optional[int] = ..., state: _Optional[_Union[TaskStateSnapshot, _Mapping]] = ..., finished: _Optional[bool] = ...) -> None: ...

class MasterState(_message.Message):
    __slots__ = ("vertex_id", "enumerator")
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    ENUMERATOR_FIELD_NUMBER: _ClassVar[int]
    vertex_id: int
    enumerator: bytes
    def __init__(self, vertex_id: _Optional[int] = ..., enumerator: _Optional[bytes] = ...) -> None: ...

class CheckpointMetadata(_message.Message):
    __slots__ = ("version", "job_id", "checkpoint_id", "trigger_timestamp_ms", "completion_timestamp_ms", "unaligned", "savepoint", "subtasks", "master_states", "vertices", "savepoint_format")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    UNALIGNED_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    SUBTASKS_FIELD_NUMBER: _ClassVar[int]
    MASTER_STATES_FIELD_NUMBER: _ClassVar[int]
    VERTICES_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    version: int
    job_id: str
    checkpoint_id: int
    trigger_timestamp_ms: int
    completion_timestamp_ms: int
    unaligned: bool
    savepoint: bool
    subtasks: _containers.RepeatedCompositeFieldContainer[SubtaskCheckpointState]
    master_states: _containers.RepeatedCompositeFieldContainer[MasterState]
    vertices: _containers.RepeatedCompositeFieldContainer[VertexLayout]
    savepoint_format: SavepointFormat
    def __init__(self, version: _Optional[int] = ..., job_id: _Optional[str] = ..., checkpoint_id: _Optional[int] = ..., trigger_timestamp_ms: _Optional[int] = ..., completion_timestamp_ms: _Optional[int] = ..., unaligned: _Optional[bool] = ..., savepoint: _Optional[bool] = ..., subtasks: _Optional[_Iterable[_Union[SubtaskCheckpointState, _Mapping]]] = ..., master_states: _Optional[_Iterable[_Union[MasterState, _Mapping]]] = ..., vertices: _Optional[_Iterable[_Union[VertexLayout, _Mapping]]] = ..., savepoint_format: _Optional[_Union[SavepointFormat, str]] = ...) -> None: ...

class VertexLayout(_message.Message):
    __slots__ = ("vertex_id", "parallelism", "max_parallelism", "operator_uids")
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_UIDS_FIELD_NUMBER: _ClassVar[int]
    vertex_id: int
    parallelism: int
    max_parallelism: int
    operator_uids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, vertex_id: _Optional[int] = ..., parallelism: _Optional[int] = ..., max_parallelism: _Optional[int] = ..., operator_uids: _Optional[_Iterable[str]] = ...) -> None: ...

class CheckpointOptions(_message.Message):
    __slots__ = ("unaligned", "aligned_timeout_ms", "at_least_once", "savepoint", "savepoint_format", "target_location", "terminate", "drain")
    UNALIGNED_FIELD_NUMBER: _ClassVar[int]
    ALIGNED_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    AT_LEAST_ONCE_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    TARGET_LOCATION_FIELD_NUMBER: _ClassVar[int]
    TERMINATE_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    unaligned: bool
    aligned_timeout_ms: int
    at_least_once: bool
    savepoint: bool
    savepoint_format: SavepointFormat
    target_location: str
    terminate: bool
    drain: bool
    def __init__(self, unaligned: _Optional[bool] = ..., aligned_timeout_ms: _Optional[int] = ..., at_least_once: _Optional[bool] = ..., savepoint: _Optional[bool] = ..., savepoint_format: _Optional[_Union[SavepointFormat, str]] = ..., target_location: _Optional[str] = ..., terminate: _Optional[bool] = ..., drain: _Optional[bool] = ...) -> None: ...

class CheckpointStats(_message.Message):
    __slots__ = ("checkpoint_id", "status", "unaligned", "savepoint", "trigger_timestamp_ms", "duration_ms", "state_size", "incremental_size", "persisted_bytes", "processed_bytes", "alignment_ms", "failure_reason", "failure_message", "external_path", "acknowledged", "total", "subtasks", "in_flight_bound_bytes", "changelog_state_size")
    class Status(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        IN_PROGRESS: _ClassVar[CheckpointStats.Status]
        COMPLETED: _ClassVar[CheckpointStats.Status]
        FAILED: _ClassVar[CheckpointStats.Status]
    IN_PROGRESS: CheckpointStats.Status
    COMPLETED: CheckpointStats.Status
    FAILED: CheckpointStats.Status
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    UNALIGNED_FIELD_NUMBER: _ClassVar[int]
    SAVEPOINT_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    STATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    INCREMENTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    PERSISTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROCESSED_BYTES_FIELD_NUMBER: _ClassVar[int]
    ALIGNMENT_MS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    FAILURE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EXTERNAL_PATH_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    SUBTASKS_FIELD_NUMBER: _ClassVar[int]
    IN_FLIGHT_BOUND_BYTES_FIELD_NUMBER: _ClassVar[int]
    CHANGELOG_STATE_SIZE_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: int
    status: CheckpointStats.Status
    unaligned: bool
    savepoint: bool
    trigger_timestamp_ms: int
    duration_ms: int
    state_size: int
    incremental_size: int
    persisted_bytes: int
    processed_bytes: int
    alignment_ms: int
    failure_reason: CheckpointFailureReason
    failure_message: str
    external_path: str
    acknowledged: int
    total: int
    subtasks: _containers.RepeatedCompositeFieldContainer[SubtaskCheckpointStats]
    in_flight_bound_bytes: int
    changelog_state_size: int
    def __init__(self, checkpoint_id: _Optional[int] = ..., status: _Optional[_Union[CheckpointStats.Status, str]] = ..., unaligned: _Optional[bool] = ..., savepoint: _Optional[bool] = ..., trigger_timestamp_ms: _Optional[int] = ..., duration_ms: _Optional[int] = ..., state_size: _Optional[int] = ..., incremental_size: _Optional[int] = ..., persisted_bytes: _Optional[int] = ..., processed_bytes: _Optional[int] = ..., alignment_ms: _Optional[int] = ..., failure_reason: _Optional[_Union[CheckpointFailureReason, str]] = ..., failure_message: _Optional[str] = ..., external_path: _Optional[str] = ..., acknowledged: _Optional[int] = ..., total: _Optional[int] = ..., subtasks: _Optional[_Iterable[_Union[SubtaskCheckpointStats, _Mapping]]] = ..., in_flight_bound_bytes: _Optional[int] = ..., changelog_state_size: _Optional[int] = ...) -> None: ...

class SubtaskCheckpointStats(_message.Message):
    __slots__ = ("vertex_id", "task_name", "subtask_index", "metrics")
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    vertex_id: int
    task_name: str
    subtask_index: int
    metrics: CheckpointTaskMetrics
    def __init__(self, vertex_id: _Optional[int] = ..., task_name: _Optional[str] = ..., subtask_index: _Optional[int] = ..., metrics: _Optional[_Union[CheckpointTaskMetrics, _Mapping]] = ...) -> None: ...

from weir.proto import checkpoint_pb2 as _checkpoint_pb2
from weir.proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Ack(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RegisterTaskExecutorRequest(_message.Message):
    __slots__ = ("resource_id", "rpc_address", "data_address", "num_slots", "metrics_url", "pid", "instance_id", "local_state")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    RPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NUM_SLOTS_FIELD_NUMBER: _ClassVar[int]
    METRICS_URL_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_STATE_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    rpc_address: str
    data_address: str
    num_slots: int
    metrics_url: str
    pid: int
    instance_id: str
    local_state: _containers.RepeatedCompositeFieldContainer[LocalStateEntry]
    def __init__(self, resource_id: _Optional[str] = ..., rpc_address: _Optional[str] = ..., data_address: _Optional[str] = ..., num_slots: _Optional[int] = ..., metrics_url: _Optional[str] = ..., pid: _Optional[int] = ..., instance_id: _Optional[str] = ..., local_state: _Optional[_Iterable[_Union[LocalStateEntry, _Mapping]]] = ...) -> None: ...

class LocalStateEntry(_message.Message):
    __slots__ = ("job_id", "owner", "checkpoint_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    owner: str
    checkpoint_id: int
    def __init__(self, job_id: _Optional[str] = ..., owner: _Optional[str] = ..., checkpoint_id: _Optional[int] = ...) -> None: ...

class RestoreStats(_message.Message):
    __slots__ = ("checkpoint_id", "duration_ms", "local_bytes", "remote_bytes")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    REMOTE_BYTES_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: int
    duration_ms: int
    local_bytes: int
    remote_bytes: int
    def __init__(self, checkpoint_id: _Optional[int] = ..., duration_ms: _Optional[int] = ..., local_bytes: _Optional[int] = ..., remote_bytes: _Optional[int] = ...) -> None: ...

class RegisterTaskExecutorResponse(_message.Message):
    __slots__ = ("jobmaster_id", "heartbeat_interval_ms", "heartbeat_timeout_ms", "registration_id")
    JOBMASTER_ID_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_INTERVAL_MS_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    jobmaster_id: str
    heartbeat_interval_ms: int
    heartbeat_timeout_ms: int
    registration_id: str
    def __init__(self, jobmaster_id: _Optional[str] = ..., heartbeat_interval_ms: _Optional[int] = ..., heartbeat_timeout_ms: _Optional[int] = ..., registration_id: _Optional[str] = ...) -> None: ...

class TaskMetrics(_message.Message):
    __slots__ = ("attempt_id", "records_in", "records_out", "bytes_in", "bytes_out", "back_pressured_ms_per_s", "busy_ms_per_s", "idle_ms_per_s", "input_watermark", "output_watermark")
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_IN_FIELD_NUMBER: _ClassVar[int]
    RECORDS_OUT_FIELD_NUMBER: _ClassVar[int]
    BYTES_IN_FIELD_NUMBER: _ClassVar[int]
    BYTES_OUT_FIELD_NUMBER: _ClassVar[int]
    BACK_PRESSURED_MS_PER_S_FIELD_NUMBER: _ClassVar[int]
    BUSY_MS_PER_S_FIELD_NUMBER: _ClassVar[int]
    IDLE_MS_PER_S_FIELD_NUMBER: _ClassVar[int]
    INPUT_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_WATERMARK_FIELD_NUMBER: _ClassVar[int]
    attempt_id: str
    records_in: int
    records_out: int
    bytes_in: int
    bytes_out: int
    back_pressured_ms_per_s: float
    busy_ms_per_s: float
    idle_ms_per_s: float
    input_watermark: int
    output_watermark: int
    def __init__(self, attempt_id: _Optional[str] = ..., records_in: _Optional[int] = ..., records_out: _Optional[int] = ..., bytes_in: _Optional[int] = ..., bytes_out: _Optional[int] = ..., back_pressured_ms_per_s: _Optional[float] = ..., busy_ms_per_s: _Optional[float] = ..., idle_ms_per_s: _Optional[float] = ..., input_watermark: _Optional[int] = ..., output_watermark: _Optional[int] = ...) -> None: ...

class TaskExecutorHeartbeat(_message.Message):
    __slots__ = ("resource_id", "running_attempts", "task_metrics", "registration_id", "unhealthy_reason")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    RUNNING_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    TASK_METRICS_FIELD_NUMBER: _ClassVar[int]
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    UNHEALTHY_REASON_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    running_attempts: _containers.RepeatedScalarFieldContainer[str]
    task_metrics: _containers.RepeatedCompositeFieldContainer[TaskMetrics]
    registration_id: str
    unhealthy_reason: str
    def __init__(self, resource_id: _Optional[str] = ..., running_attempts: _Optional[_Iterable[str]] = ..., task_metrics: _Optional[_Iterable[_Union[TaskMetrics, _Mapping]]] = ..., registration_id: _Optional[str] = ..., unhealthy_reason: _Optional[str] = ...) -> None: ...

class JobMasterHeartbeat(_message.Message):
    __slots__ = ("jobmaster_id", "unknown_attempts")
    JOBMASTER_ID_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    jobmaster_id: str
    unknown_attempts: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, jobmaster_id: _Optional[str] = ..., unknown_attempts: _Optional[_Iterable[str]] = ...) -> None: ...

class DisconnectTaskExecutorRequest(_message.Message):
    __slots__ = ("resource_id", "registration_id", "reason")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    REGISTRATION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    registration_id: str
    reason: str
    def __init__(self, resource_id: _Optional[str] = ..., registration_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class TaskExecutionStateUpdate(_message.Message):
    __slots__ = ("job_id", "attempt_id", "state", "error", "metrics", "restore")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt_id: str
    state: _common_pb2.ExecutionState
    error: _common_pb2.ErrorInfo
    metrics: TaskMetrics
    restore: RestoreStats
    def __init__(self, job_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.ExecutionState, str]] = ..., error: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ..., metrics: _Optional[_Union[TaskMetrics, _Mapping]] = ..., restore: _Optional[_Union[RestoreStats, _Mapping]] = ...) -> None: ...

class SplitRequest(_message.Message):
    __slots__ = ("job_id", "vertex_id", "subtask_index", "attempt_id", "checkpoint_passed")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_PASSED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    vertex_id: int
    subtask_index: int
    attempt_id: str
    checkpoint_passed: int
    def __init__(self, job_id: _Optional[str] = ..., vertex_id: _Optional[int] = ..., subtask_index: _Optional[int] = ..., attempt_id: _Optional[str] = ..., checkpoint_passed: _Optional[int] = ...) -> None: ...

class SplitResponse(_message.Message):
    __slots__ = ("splits", "no_more_splits", "retry_after_ms")
    SPLITS_FIELD_NUMBER: _ClassVar[int]
    NO_MORE_SPLITS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    splits: _containers.RepeatedScalarFieldContainer[bytes]
    no_more_splits: bool
    retry_after_ms: int
    def __init__(self, splits: _Optional[_Iterable[bytes]] = ..., no_more_splits: _Optional[bool] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class CollectBatch(_message.Message):
    __slots__ = ("job_id", "subtask_index", "arrow_ipc", "end_of_stream", "attempt_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    ARROW_IPC_FIELD_NUMBER: _ClassVar[int]
    END_OF_STREAM_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    subtask_index: int
    arrow_ipc: bytes
    end_of_stream: bool
    attempt_id: str
    def __init__(self, job_id: _Optional[str] = ..., subtask_index: _Optional[int] = ..., arrow_ipc: _Optional[bytes] = ..., end_of_stream: _Optional[bool] = ..., attempt_id: _Optional[str] = ...) -> None: ...

class CollectAck(_message.Message):
    __slots__ = ("accepted",)
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    def __init__(self, accepted: _Optional[bool] = ...) -> None: ...

class AcknowledgeCheckpointRequest(_message.Message):
    __slots__ = ("job_id", "attempt_id", "checkpoint_id", "state", "metrics")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt_id: str
    checkpoint_id: int
    state: _checkpoint_pb2.TaskStateSnapshot
    metrics: _checkpoint_pb2.CheckpointTaskMetrics
    def __init__(self, job_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., checkpoint_id: _Optional[int] = ..., state: _Optional[_Union[_checkpoint_pb2.TaskStateSnapshot, _Mapping]] = ..., metrics: _Optional[_Union[_checkpoint_pb2.CheckpointTaskMetrics, _Mapping]] = ...) -> None: ...

class DeclineCheckpointRequest(_message.Message):
    __slots__ = ("job_id", "attempt_id", "checkpoint_id", "reason", "message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt_id: str
    checkpoint_id: int
    reason: _checkpoint_pb2.CheckpointFailureReason
    message: str
    def __init__(self, job_id: _Optional[str] = ..., attempt_id: _Optional[str] = ..., checkpoint_id: _Optional[int] = ..., reason: _Optional[_Union[_checkpoint_pb2.CheckpointFailureReason, str]] = ..., message: _Optional[str] = ...) -> None: ...

class EndOfDataReport(_message.Message):
    __slots__ = ("job_id", "attempt_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    attempt_id: str
    def __init__(self, job_id: _Optional[str] = ..., attempt_id: _Optional[str] = ...) -> None: ...

class JobSummary(_message.Message):
    __slots__ = ("job_id", "name", "status", "start_time_ms", "end_time_ms", "tasks_total", "tasks_running", "tasks_finished", "restarts")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    END_TIME_MS_FIELD_NUMBER: _ClassVar[int]
    TASKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TASKS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    TASKS_FINISHED_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    status: _common_pb2.JobStatus
    start_time_ms: int
    end_time_ms: int
    tasks_total: int
    tasks_running: int
    tasks_finished: int
    restarts: int
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., status: _Optional[_Union[_common_pb2.JobStatus, str]] = ..., start_time_ms: _Optional[int] = ..., end_time_ms: _Optional[int] = ..., tasks_total: _Optional[int] = ..., tasks_running: _Optional[int] = ..., tasks_finished: _Optional[int] = ..., restarts: _Optional[int] = ...) -> None: ...

class SubtaskDetails(_message.Message):
    __slots__ = ("subtask_index", "state", "attempt_id", "resource_id", "metrics", "restore", "attempt_number", "state_timestamps")
    class StateTimestampsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    STATE_TIMESTAMPS_FIELD_NUMBER: _ClassVar[int]
    subtask_index: int
    state: _common_pb2.ExecutionState
    attempt_id: str
    resource_id: str
    metrics: TaskMetrics
    restore: RestoreStats
    attempt_number: int
    state_timestamps: _containers.ScalarMap[int, int]
    def __init__(self, subtask_index: _Optional[int] = ..., state: _Optional[_Union[_common_pb2.ExecutionState, str]] = ..., attempt_id: _Optional[str] = ..., resource_id: _Optional[str] = ..., metrics: _Optional[_Union[TaskMetrics, _Mapping]] = ..., restore: _Optional[_Union[RestoreStats, _Mapping]] = ..., attempt_number: _Optional[int] = ..., state_timestamps: _Optional[_Mapping[int, int]] = ...) -> None: ...

class VertexDetails(_message.Message):
    __slots__ = ("vertex_id", "name", "parallelism", "subtasks")
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    SUBTASKS_FIELD_NUMBER: _ClassVar[int]
    vertex_id: int
    name: str
    parallelism: int
    subtasks: _containers.RepeatedCompositeFieldContainer[SubtaskDetails]
    def __init__(self, vertex_id: _Optional[int] = ..., name: _Optional[str] = ..., parallelism: _Optional[int] = ..., subtasks: _Optional[_Iterable[_Union[SubtaskDetails, _Mapping]]] = ...) -> None: ...

class JobDetails(_message.Message):
    __slots__ = ("summary", "vertices", "failure", "last_checkpoint_id", "last_checkpoint_path", "restart_causes", "last_restore", "last_change", "recoveries")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    VERTICES_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    LAST_CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    RESTART_CAUSES_FIELD_NUMBER: _ClassVar[int]
    LAST_RESTORE_FIELD_NUMBER: _ClassVar[int]
    LAST_CHANGE_FIELD_NUMBER: _ClassVar[int]
    RECOVERIES_FIELD_NUMBER: _ClassVar[int]
    summary: JobSummary
    vertices: _containers.RepeatedCompositeFieldContainer[VertexDetails]
    failure: _common_pb2.ErrorInfo
    last_checkpoint_id: int
    last_checkpoint_path: str
    restart_causes: _containers.RepeatedCompositeFieldContainer[_common_pb2.ErrorInfo]
    last_restore: RestoreStats
    last_change: JobChange
    recoveries: _containers.RepeatedCompositeFieldContainer[Recovery]
    def __init__(self, summary: _Optional[_Union[JobSummary, _Mapping]] = ..., vertices: _Optional[_Iterable[_Union[VertexDetails, _Mapping]]] = ..., failure: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ..., last_checkpoint_id: _Optional[int] = ..., last_checkpoint_path: _Optional[str] = ..., restart_causes: _Optional[_Iterable[_Union[_common_pb2.ErrorInfo, _Mapping]]] = ..., last_restore: _Optional[_Union[RestoreStats, _Mapping]] = ..., last_change: _Optional[_Union[JobChange, _Mapping]] = ..., recoveries: _Optional[_Iterable[_Union[Recovery, _Mapping]]] = ...) -> None: ...

class Recovery(_message.Message):
    __slots__ = ("cause", "tasks", "checkpoint_id", "duration_ms", "local_bytes", "remote_bytes")
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    TASKS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    LOCAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    REMOTE_BYTES_FIELD_NUMBER: _ClassVar[int]
    cause: _common_pb2.ErrorInfo
    tasks: int
    checkpoint_id: int
    duration_ms: int
    local_bytes: int
    remote_bytes: int
    def __init__(self, cause: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ..., tasks: _Optional[int] = ..., checkpoint_id: _Optional[int] = ..., duration_ms: _Optional[int] = ..., local_bytes: _Optional[int] = ..., remote_bytes: _Optional[int] = ...) -> None: ...

class JobHistory(_message.Message):
    __slots__ = ("checkpoints", "recoveries", "completed_checkpoints", "failed_checkpoints")
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    RECOVERIES_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    FAILED_CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[_checkpoint_pb2.CheckpointStats]
    recoveries: _containers.RepeatedCompositeFieldContainer[Recovery]
    completed_checkpoints: int
    failed_checkpoints: int
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[_checkpoint_pb2.CheckpointStats, _Mapping]]] = ..., recoveries: _Optional[_Iterable[_Union[Recovery, _Mapping]]] = ..., completed_checkpoints: _Optional[int] = ..., failed_checkpoints: _Optional[int] = ...) -> None: ...

class SavepointRequest(_message.Message):
    __slots__ = ("job_id", "target_directory", "format", "terminate", "drain")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    TERMINATE_FIELD_NUMBER: _ClassVar[int]
    DRAIN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    target_directory: str
    format: _checkpoint_pb2.SavepointFormat
    terminate: bool
    drain: bool
    def __init__(self, job_id: _Optional[str] = ..., target_directory: _Optional[str] = ..., format: _Optional[_Union[_checkpoint_pb2.SavepointFormat, str]] = ..., terminate: _Optional[bool] = ..., drain: _Optional[bool] = ...) -> None: ...

class JobChange(_message.Message):
    __slots__ = ("kind", "checkpoint_id", "downtime_ms", "timestamp_ms", "restarted_operators")
    KIND_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    DOWNTIME_MS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    RESTARTED_OPERATORS_FIELD_NUMBER: _ClassVar[int]
    kind: str
    checkpoint_id: int
    downtime_ms: int
    timestamp_ms: int
    restarted_operators: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, kind: _Optional[str] = ..., checkpoint_id: _Optional[int] = ..., downtime_ms: _Optional[int] = ..., timestamp_ms: _Optional[int] = ..., restarted_operators: _Optional[_Iterable[str]] = ...) -> None: ...

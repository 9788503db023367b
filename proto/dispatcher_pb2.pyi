from weir.proto import checkpoint_pb2 as _checkpoint_pb2
from weir.proto import common_pb2 as _common_pb2
from weir.proto import jobgraph_pb2 as _jobgraph_pb2
from weir.proto import jobmaster_pb2 as _jobmaster_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitJobRequest(_message.Message):
    __slots__ = ("job_graph",)
    JOB_GRAPH_FIELD_NUMBER: _ClassVar[int]
    job_graph: _jobgraph_pb2.JobGraph
    def __init__(self, job_graph: _Optional[_Union[_jobgraph_pb2.JobGraph, _Mapping]] = ...) -> None: ...

class SubmitJobResponse(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class JobIdRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_jobmaster_pb2.JobSummary]
    def __init__(self, jobs: _Optional[_Iterable[_Union[_jobmaster_pb2.JobSummary, _Mapping]]] = ...) -> None: ...

class CheckpointHistory(_message.Message):
    __slots__ = ("checkpoints", "restored_checkpoint_id", "restore_timestamp_ms", "completed_count", "failed_count")
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    RESTORED_CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    RESTORE_TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_COUNT_FIELD_NUMBER: _ClassVar[int]
    FAILED_COUNT_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[_checkpoint_pb2.CheckpointStats]
    restored_checkpoint_id: int
    restore_timestamp_ms: int
    completed_count: int
    failed_count: int
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[_checkpoint_pb2.CheckpointStats, _Mapping]]] = ..., restored_checkpoint_id: _Optional[int] = ..., restore_timestamp_ms: _Optional[int] = ..., completed_count: _Optional[int] = ..., failed_count: _Optional[int] = ...) -> None: ...

class FetchCollectRequest(_message.Message):
    __slots__ = ("job_id", "max_batches", "wait_ms")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCHES_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    max_batches: int
    wait_ms: int
    def __init__(self, job_id: _Optional[str] = ..., max_batches: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class FetchCollectResponse(_message.Message):
    __slots__ = ("arrow_ipc", "end_of_results", "status", "failure")
    ARROW_IPC_FIELD_NUMBER: _ClassVar[int]
    END_OF_RESULTS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    arrow_ipc: _containers.RepeatedScalarFieldContainer[bytes]
    end_of_results: bool
    status: _common_pb2.JobStatus
    failure: _common_pb2.ErrorInfo
    def __init__(self, arrow_ipc: _Optional[_Iterable[bytes]] = ..., end_of_results: _Optional[bool] = ..., status: _Optional[_Union[_common_pb2.JobStatus, str]] = ..., failure: _Optional[_Union[_common_pb2.ErrorInfo, _Mapping]] = ...) -> None: ...

class ClusterOverviewRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TaskExecutorInfo(_message.Message):
    __slots__ = ("resource_id", "rpc_address", "data_address", "slots_total", "slots_free", "metrics_url", "pid", "registered_at_ms", "registrations", "tasks_running", "task_failures")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    RPC_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FREE_FIELD_NUMBER: _ClassVar[int]
    METRICS_URL_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    REGISTRATIONS_FIELD_NUMBER: _ClassVar[int]
    TASKS_RUNNING_FIELD_NUMBER: _ClassVar[int]
    TASK_FAILURES_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    rpc_address: str
    data_address: str
    slots_total: int
    slots_free: int
    metrics_url: str
    pid: int
    registered_at_ms: int
    registrations: int
    tasks_running: int
    task_failures: int
    def __init__(self, resource_id: _Optional[str] = ..., rpc_address: _Optional[str] = ..., data_address: _Optional[str] = ..., slots_total: _Optional[int] = ..., slots_free: _Optional[int] = ..., metrics_url: _Optional[str] = ..., pid: _Optional[int] = ..., registered_at_ms: _Optional[int] = ..., registrations: _Optional[int] = ..., tasks_running: _Optional[int] = ..., task_failures: _Optional[int] = ...) -> None: ...

class ClusterOverview(_message.Message):
    __slots__ = ("task_executors", "slots_total", "slots_free", "metrics_url", "pid")
    TASK_EXECUTORS_FIELD_NUMBER: _ClassVar[int]
    SLOTS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FREE_FIELD_NUMBER: _ClassVar[int]
    METRICS_URL_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    task_executors: _containers.RepeatedCompositeFieldContainer[TaskExecutorInfo]
    slots_total: int
    slots_free: int
    metrics_url: str
    pid: int
    def __init__(self, task_executors: _Optional[_Iterable[_Union[TaskExecutorInfo, _Mapping]]] = ..., slots_total: _Optional[int] = ..., slots_free: _Optional[int] = ..., metrics_url: _Optional[str] = ..., pid: _Optional[int] = ...) -> None: ...

class SavepointResponse(_message.Message):
    __slots__ = ("path", "checkpoint_id")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    path: str
    checkpoint_id: int
    def __init__(self, path: _Optional[str] = ..., checkpoint_id: _Optional[int] = ...) -> None: ...

class DisposeSavepointRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class RescaleRequest(_message.Message):
    __slots__ = ("job_id", "parallelism", "operator_parallelism")
    class OperatorParallelismEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    parallelism: int
    operator_parallelism: _containers.ScalarMap[str, int]
    def __init__(self, job_id: _Optional[str] = ..., parallelism: _Optional[int] = ..., operator_parallelism: _Optional[_Mapping[str, int]] = ...) -> None: ...

class UpdateJobRequest(_message.Message):
    __slots__ = ("job_id", "job_graph", "allow_non_restored_state")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_GRAPH_FIELD_NUMBER: _ClassVar[int]
    ALLOW_NON_RESTORED_STATE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_graph: _jobgraph_pb2.JobGraph
    allow_non_restored_state: bool
    def __init__(self, job_id: _Optional[str] = ..., job_graph: _Optional[_Union[_jobgraph_pb2.JobGraph, _Mapping]] = ..., allow_non_restored_state: _Optional[bool] = ...) -> None: ...

from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WritePartitionRequest(_message.Message):
    __slots__ = ("job_id", "partition_id", "num_subpartitions", "subpartition", "data", "commit", "total_chunks", "total_bytes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_SUBPARTITIONS_FIELD_NUMBER: _ClassVar[int]
    SUBPARTITION_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_CHUNKS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    partition_id: str
    num_subpartitions: int
    subpartition: int
    data: bytes
    commit: bool
    total_chunks: int
    total_bytes: int
    def __init__(self, job_id: _Optional[str] = ..., partition_id: _Optional[str] = ..., num_subpartitions: _Optional[int] = ..., subpartition: _Optional[int] = ..., data: _Optional[bytes] = ..., commit: _Optional[bool] = ..., total_chunks: _Optional[int] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class WritePartitionResponse(_message.Message):
    __slots__ = ("chunks", "bytes", "runs")
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    chunks: int
    bytes: int
    runs: int
    def __init__(self, chunks: _Optional[int] = ..., bytes: _Optional[int] = ..., runs: _Optional[int] = ...) -> None: ...

class ReadSubpartitionRequest(_message.Message):
    __slots__ = ("job_id", "partition_id", "subpartition", "start_chunk", "max_bytes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    SUBPARTITION_FIELD_NUMBER: _ClassVar[int]
    START_CHUNK_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    partition_id: str
    subpartition: int
    start_chunk: int
    max_bytes: int
    def __init__(self, job_id: _Optional[str] = ..., partition_id: _Optional[str] = ..., subpartition: _Optional[int] = ..., start_chunk: _Optional[int] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class ReadSubpartitionResponse(_message.Message):
    __slots__ = ("chunks", "end_of_subpartition")
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    END_OF_SUBPARTITION_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedScalarFieldContainer[bytes]
    end_of_subpartition: bool
    def __init__(self, chunks: _Optional[_Iterable[bytes]] = ..., end_of_subpartition: _Optional[bool] = ...) -> None: ...

class ReleasePartitionsRequest(_message.Message):
    __slots__ = ("job_id", "partition_ids", "all_of_job")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_IDS_FIELD_NUMBER: _ClassVar[int]
    ALL_OF_JOB_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    partition_ids: _containers.RepeatedScalarFieldContainer[str]
    all_of_job: bool
    def __init__(self, job_id: _Optional[str] = ..., partition_ids: _Optional[_Iterable[str]] = ..., all_of_job: _Optional[bool] = ...) -> None: ...

class ReleasePartitionsResponse(_message.Message):
    __slots__ = ("released",)
    RELEASED_FIELD_NUMBER: _ClassVar[int]
    released: int
    def __init__(self, released: _Optional[int] = ...) -> None: ...

class ListPartitionsRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class PartitionInfo(_message.Message):
    __slots__ = ("job_id", "partition_id", "num_subpartitions", "state", "chunks", "bytes", "runs")
    class State(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        PARTITION_STATE_UNSPECIFIED: _ClassVar[PartitionInfo.State]
        COMMITTED: _ClassVar[PartitionInfo.State]
        IN_PROGRESS: _ClassVar[PartitionInfo.State]
    PARTITION_STATE_UNSPECIFIED: PartitionInfo.State
    COMMITTED: PartitionInfo.State
    IN_PROGRESS: PartitionInfo.State
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_SUBPARTITIONS_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    partition_id: str
    num_subpartitions: int
    state: PartitionInfo.State
    chunks: int
    bytes: int
    runs: int
    def __init__(self, job_id: _Optional[str] = ..., partition_id: _Optional[str] = ..., num_subpartitions: _Optional[int] = ..., state: _Optional[_Union[PartitionInfo.State, str]] = ..., chunks: _Optional[int] = ..., bytes: _Optional[int] = ..., runs: _Optional[int] = ...) -> None: ...

class ListPartitionsResponse(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionInfo]
    def __init__(self, partitions: _Optional[_Iterable[_Union[PartitionInfo, _Mapping]]] = ...) -> None: ...

class ExternalShuffleDescriptor(_message.Message):
    __slots__ = ("service_address", "job_id", "partition_id", "num_subpartitions")
    SERVICE_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_SUBPARTITIONS_FIELD_NUMBER: _ClassVar[int]
    service_address: str
    job_id: str
    partition_id: str
    num_subpartitions: int
    def __init__(self, service_address: _Optional[str] = ..., job_id: _Optional[str] = ..., partition_id: _Optional[str] = ..., num_subpartitions: _Optional[int] = ...) -> None: ...

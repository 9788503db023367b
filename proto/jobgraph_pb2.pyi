from weir.proto import checkpoint_pb2 as _checkpoint_pb2
from weir.proto import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class JobEdge(_message.Message):
    __slots__ = ("source_vertex", "partitioner", "key_selector", "input_index", "side_output")
    SOURCE_VERTEX_FIELD_NUMBER: _ClassVar[int]
    PARTITIONER_FIELD_NUMBER: _ClassVar[int]
    KEY_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    INPUT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SIDE_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    source_vertex: int
    partitioner: _common_pb2.PartitionerType
    key_selector: bytes
    input_index: int
    side_output: str
    def __init__(self, source_vertex: _Optional[int] = ..., partitioner: _Optional[_Union[_common_pb2.PartitionerType, str]] = ..., key_selector: _Optional[bytes] = ..., input_index: _Optional[int] = ..., side_output: _Optional[str] = ...) -> None: ...

class JobVertex(_message.Message):
    __slots__ = ("id", "name", "parallelism", "max_parallelism", "chain", "inputs", "source", "operator_uids", "operator_names", "operator_fingerprints")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_UIDS_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_NAMES_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_FINGERPRINTS_FIELD_NUMBER: _ClassVar[int]
    id: int
    name: str
    parallelism: int
    max_parallelism: int
    chain: bytes
    inputs: _containers.RepeatedCompositeFieldContainer[JobEdge]
    source: bytes
    operator_uids: _containers.RepeatedScalarFieldContainer[str]
    operator_names: _containers.RepeatedScalarFieldContainer[str]
    operator_fingerprints: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, id: _Optional[int] = ..., name: _Optional[str] = ..., parallelism: _Optional[int] = ..., max_parallelism: _Optional[int] = ..., chain: _Optional[bytes] = ..., inputs: _Optional[_Iterable[_Union[JobEdge, _Mapping]]] = ..., source: _Optional[bytes] = ..., operator_uids: _Optional[_Iterable[str]] = ..., operator_names: _Optional[_Iterable[str]] = ..., operator_fingerprints: _Optional[_Iterable[str]] = ...) -> None: ...

class JobGraph(_message.Message):
    __slots__ = ("job_id", "name", "vertices", "config", "has_collect_sink")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERTICES_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    HAS_COLLECT_SINK_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    name: str
    vertices: _containers.RepeatedCompositeFieldContainer[JobVertex]
    config: _containers.ScalarMap[str, str]
    has_collect_sink: bool
    def __init__(self, job_id: _Optional[str] = ..., name: _Optional[str] = ..., vertices: _Optional[_Iterable[_Union[JobVertex, _Mapping]]] = ..., config: _Optional[_Mapping[str, str]] = ..., has_collect_sink: _Optional[bool] = ...) -> None: ...

class ResultPartitionDeployment(_message.Message):
    __slots__ = ("partition_id", "num_subpartitions", "partitioner", "key_selector", "max_parallelism", "consumer_vertex", "blocking", "side_output")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    NUM_SUBPARTITIONS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONER_FIELD_NUMBER: _ClassVar[int]
    KEY_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_VERTEX_FIELD_NUMBER: _ClassVar[int]
    BLOCKING_FIELD_NUMBER: _ClassVar[int]
    SIDE_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    partition_id: str
    num_subpartitions: int
    partitioner: _common_pb2.PartitionerType
    key_selector: bytes
    max_parallelism: int
    consumer_vertex: int
    blocking: bool
    side_output: str
    def __init__(self, partition_id: _Optional[str] = ..., num_subpartitions: _Optional[int] = ..., partitioner: _Optional[_Union[_common_pb2.PartitionerType, str]] = ..., key_selector: _Optional[bytes] = ..., max_parallelism: _Optional[int] = ..., consumer_vertex: _Optional[int] = ..., blocking: _Optional[bool] = ..., side_output: _Optional[str] = ...) -> None: ...

class InputChannelDeployment(_message.Message):
    __slots__ = ("shuffle_descriptor", "subpartition")
    SHUFFLE_DESCRIPTOR_FIELD_NUMBER: _ClassVar[int]
    SUBPARTITION_FIELD_NUMBER: _ClassVar[int]
    shuffle_descriptor: bytes
    subpartition: int
    def __init__(self, shuffle_descriptor: _Optional[bytes] = ..., subpartition: _Optional[int] = ...) -> None: ...

class InputGateDeployment(_message.Message):
    __slots__ = ("input_index", "source_vertex", "channels", "partitioner", "key_selector", "max_parallelism")
    INPUT_INDEX_FIELD_NUMBER: _ClassVar[int]
    SOURCE_VERTEX_FIELD_NUMBER: _ClassVar[int]
    CHANNELS_FIELD_NUMBER: _ClassVar[int]
    PARTITIONER_FIELD_NUMBER: _ClassVar[int]
    KEY_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    input_index: int
    source_vertex: int
    channels: _containers.RepeatedCompositeFieldContainer[InputChannelDeployment]
    partitioner: _common_pb2.PartitionerType
    key_selector: bytes
    max_parallelism: int
    def __init__(self, input_index: _Optional[int] = ..., source_vertex: _Optional[int] = ..., channels: _Optional[_Iterable[_Union[InputChannelDeployment, _Mapping]]] = ..., partitioner: _Optional[_Union[_common_pb2.PartitionerType, str]] = ..., key_selector: _Optional[bytes] = ..., max_parallelism: _Optional[int] = ...) -> None: ...

class TaskDeploymentDescriptor(_message.Message):
    __slots__ = ("job_id", "job_name", "attempt_id", "vertex_id", "task_name", "subtask_index", "parallelism", "max_parallelism", "attempt_number", "chain", "source", "input_gates", "partitions", "config", "allocation_id", "operator_names", "operator_uids", "restore")
    class ConfigEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_NAME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_ID_FIELD_NUMBER: _ClassVar[int]
    VERTEX_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_NAME_FIELD_NUMBER: _ClassVar[int]
    SUBTASK_INDEX_FIELD_NUMBER: _ClassVar[int]
    PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    MAX_PARALLELISM_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_NUMBER_FIELD_NUMBER: _ClassVar[int]
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    INPUT_GATES_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    ALLOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_NAMES_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_UIDS_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    job_name: str
    attempt_id: str
    vertex_id: int
    task_name: str
    subtask_index: int
    parallelism: int
    max_parallelism: int
    attempt_number: int
    chain: bytes
    source: bytes
    input_gates: _containers.RepeatedCompositeFieldContainer[InputGateDeployment]
    partitions: _containers.RepeatedCompositeFieldContainer[ResultPartitionDeployment]
    config: _containers.ScalarMap[str, str]
    allocation_id: str
    operator_names: _containers.RepeatedScalarFieldContainer[str]
    operator_uids: _containers.RepeatedScalarFieldContainer[str]
    restore: TaskRestore
    def __init__(self, job_id: _Optional[str] = ..., job_name: _Optional[str] = ..., attempt_id: _Optional[str] = ..., vertex_id: _Optional[int] = ..., task_name: _Optional[str] = ..., subtask_index: _Optional[int] = ..., parallelism: _Optional[int] = ..., max_parallelism: _Optional[int] = ..., attempt_number: _Optional[int] = ..., chain: _Optional[bytes] = ..., source: _Optional[bytes] = ..., input_gates: _Optional[_Iterable[_Union[InputGateDeployment, _Mapping]]] = ..., partitions: _Optional[_Iterable[_Union[ResultPartitionDeployment, _Mapping]]] = ..., config: _Optional[_Mapping[str, str]] = ..., allocation_id: _Optional[str] = ..., operator_names: _Optional[_Iterable[str]] = ..., operator_uids: _Optional[_Iterable[str]] = ..., restore: _Optional[_Union[TaskRestore, _Mapping]] = ...) -> None: ...

class TaskRestore(_message.Message):
    __slots__ = ("checkpoint_id", "operators", "channel_state", "finished", "not_owned", "rescaled_inputs", "rescaled_outputs")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATORS_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_STATE_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    NOT_OWNED_FIELD_NUMBER: _ClassVar[int]
    RESCALED_INPUTS_FIELD_NUMBER: _ClassVar[int]
    RESCALED_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: int
    operators: _containers.RepeatedCompositeFieldContainer[OperatorRestore]
    channel_state: _checkpoint_pb2.ChannelStateHandle
    finished: bool
    not_owned: bool
    rescaled_inputs: _containers.RepeatedCompositeFieldContainer[_checkpoint_pb2.ChannelStateHandle]
    rescaled_outputs: _containers.RepeatedCompositeFieldContainer[_checkpoint_pb2.ChannelStateHandle]
    def __init__(self, checkpoint_id: _Optional[int] = ..., operators: _Optional[_Iterable[_Union[OperatorRestore, _Mapping]]] = ..., channel_state: _Optional[_Union[_checkpoint_pb2.ChannelStateHandle, _Mapping]] = ..., finished: _Optional[bool] = ..., not_owned: _Optional[bool] = ..., rescaled_inputs: _Optional[_Iterable[_Union[_checkpoint_pb2.ChannelStateHandle, _Mapping]]] = ..., rescaled_outputs: _Optional[_Iterable[_Union[_checkpoint_pb2.ChannelStateHandle, _Mapping]]] = ...) -> None: ...

class OperatorRestore(_message.Message):
    __slots__ = ("operator_uid", "keyed_state", "operator_state")
    OPERATOR_UID_FIELD_NUMBER: _ClassVar[int]
    KEYED_STATE_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_STATE_FIELD_NUMBER: _ClassVar[int]
    operator_uid: str
    keyed_state: _containers.RepeatedScalarFieldContainer[str]
    operator_state: _containers.RepeatedCompositeFieldContainer[_checkpoint_pb2.StreamHandle]
    def __init__(self, operator_uid: _Optional[str] = ..., keyed_state: _Optional[_Iterable[str]] = ..., operator_state: _Optional[_Iterable[_Union[_checkpoint_pb2.StreamHandle, _Mapping]]] = ...) -> None: ...

from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PartitionRequest(_message.Message):
    __slots__ = ("partition_id", "subpartition", "initial_credit", "consumer")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    SUBPARTITION_FIELD_NUMBER: _ClassVar[int]
    INITIAL_CREDIT_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    partition_id: str
    subpartition: int
    initial_credit: int
    consumer: str
    def __init__(self, partition_id: _Optional[str] = ..., subpartition: _Optional[int] = ..., initial_credit: _Optional[int] = ..., consumer: _Optional[str] = ...) -> None: ...

class ErrorResponse(_message.Message):
    __slots__ = ("kind", "message")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[ErrorResponse.Kind]
        PARTITION_NOT_FOUND: _ClassVar[ErrorResponse.Kind]
        PRODUCER_FAILED: _ClassVar[ErrorResponse.Kind]
    UNKNOWN: ErrorResponse.Kind
    PARTITION_NOT_FOUND: ErrorResponse.Kind
    PRODUCER_FAILED: ErrorResponse.Kind
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    kind: ErrorResponse.Kind
    message: str
    def __init__(self, kind: _Optional[_Union[ErrorResponse.Kind, str]] = ..., message: _Optional[str] = ...) -> None: ...

class PipelinedShuffleDescriptor(_message.Message):
    __slots__ = ("partition_id", "producer_resource_id", "producer_data_address")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    partition_id: str
    producer_resource_id: str
    producer_data_address: str
    def __init__(self, partition_id: _Optional[str] = ..., producer_resource_id: _Optional[str] = ..., producer_data_address: _Optional[str] = ...) -> None: ...

from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Challenge(_message.Message):
    __slots__ = ("nonce",)
    NONCE_FIELD_NUMBER: _ClassVar[int]
    nonce: bytes
    def __init__(self, nonce: _Optional[bytes] = ...) -> None: ...

class Hello(_message.Message):
    __slots__ = ("mac",)
    MAC_FIELD_NUMBER: _ClassVar[int]
    mac: bytes
    def __init__(self, mac: _Optional[bytes] = ...) -> None: ...

class PartitionRequest(_message.Message):
    __slots__ = ("partition_id", "subpartition", "receiver_id", "initial_credit", "consumer", "wait_ms")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    SUBPARTITION_FIELD_NUMBER: _ClassVar[int]
    RECEIVER_ID_FIELD_NUMBER: _ClassVar[int]
    INITIAL_CREDIT_FIELD_NUMBER: _ClassVar[int]
    CONSUMER_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    partition_id: str
    subpartition: int
    receiver_id: int
    initial_credit: int
    consumer: str
    wait_ms: int
    def __init__(self, partition_id: _Optional[str] = ..., subpartition: _Optional[int] = ..., receiver_id: _Optional[int] = ..., initial_credit: _Optional[int] = ..., consumer: _Optional[str] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class AddCredit(_message.Message):
    __slots__ = ("receiver_id", "credit")
    RECEIVER_ID_FIELD_NUMBER: _ClassVar[int]
    CREDIT_FIELD_NUMBER: _ClassVar[int]
    receiver_id: int
    credit: int
    def __init__(self, receiver_id: _Optional[int] = ..., credit: _Optional[int] = ...) -> None: ...

class CancelPartition(_message.Message):
    __slots__ = ("receiver_id",)
    RECEIVER_ID_FIELD_NUMBER: _ClassVar[int]
    receiver_id: int
    def __init__(self, receiver_id: _Optional[int] = ...) -> None: ...

class NewBufferSize(_message.Message):
    __slots__ = ("receiver_id", "buffer_size")
    RECEIVER_ID_FIELD_NUMBER: _ClassVar[int]
    BUFFER_SIZE_FIELD_NUMBER: _ClassVar[int]
    receiver_id: int
    buffer_size: int
    def __init__(self, receiver_id: _Optional[int] = ..., buffer_size: _Optional[int] = ...) -> None: ...

class CloseRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BufferHeader(_message.Message):
    __slots__ = ("receiver_id", "sequence_number", "backlog", "kind", "priority", "event_type", "message_end", "message_size", "buffers", "buffer_size", "overtaken_messages", "overtaken_buffers")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        DATA: _ClassVar[BufferHeader.Kind]
        SCHEMA: _ClassVar[BufferHeader.Kind]
        END_OF_PARTITION: _ClassVar[BufferHeader.Kind]
        EVENT: _ClassVar[BufferHeader.Kind]
    DATA: BufferHeader.Kind
    SCHEMA: BufferHeader.Kind
    END_OF_PARTITION: BufferHeader.Kind
    EVENT: BufferHeader.Kind
    RECEIVER_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    BACKLOG_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    EVENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_END_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    BUFFERS_FIELD_NUMBER: _ClassVar[int]
    BUFFER_SIZE_FIELD_NUMBER: _ClassVar[int]
    OVERTAKEN_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    OVERTAKEN_BUFFERS_FIELD_NUMBER: _ClassVar[int]
    receiver_id: int
    sequence_number: int
    backlog: int
    kind: BufferHeader.Kind
    priority: bool
    event_type: str
    message_end: bool
    message_size: int
    buffers: int
    buffer_size: int
    overtaken_messages: int
    overtaken_buffers: int
    def __init__(self, receiver_id: _Optional[int] = ..., sequence_number: _Optional[int] = ..., backlog: _Optional[int] = ..., kind: _Optional[_Union[BufferHeader.Kind, str]] = ..., priority: _Optional[bool] = ..., event_type: _Optional[str] = ..., message_end: _Optional[bool] = ..., message_size: _Optional[int] = ..., buffers: _Optional[int] = ..., buffer_size: _Optional[int] = ..., overtaken_messages: _Optional[int] = ..., overtaken_buffers: _Optional[int] = ...) -> None: ...

class ErrorResponse(_message.Message):
    __slots__ = ("receiver_id", "kind", "message")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        UNKNOWN: _ClassVar[ErrorResponse.Kind]
        PARTITION_NOT_FOUND: _ClassVar[ErrorResponse.Kind]
        PRODUCER_FAILED: _ClassVar[ErrorResponse.Kind]
        PROTOCOL_ERROR: _ClassVar[ErrorResponse.Kind]
        NOT_AUTHENTICATED: _ClassVar[ErrorResponse.Kind]
        ALREADY_SUBSCRIBED: _ClassVar[ErrorResponse.Kind]
        CONNECTION_IDLE: _ClassVar[ErrorResponse.Kind]
    UNKNOWN: ErrorResponse.Kind
    PARTITION_NOT_FOUND: ErrorResponse.Kind
    PRODUCER_FAILED: ErrorResponse.Kind
    PROTOCOL_ERROR: ErrorResponse.Kind
    NOT_AUTHENTICATED: ErrorResponse.Kind
    ALREADY_SUBSCRIBED: ErrorResponse.Kind
    CONNECTION_IDLE: ErrorResponse.Kind
    RECEIVER_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    receiver_id: int
    kind: ErrorResponse.Kind
    message: str
    def __init__(self, receiver_id: _Optional[int] = ..., kind: _Optional[_Union[ErrorResponse.Kind, str]] = ..., message: _Optional[str] = ...) -> None: ...

class PipelinedShuffleDescriptor(_message.Message):
    __slots__ = ("partition_id", "producer_resource_id", "producer_data_address")
    PARTITION_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_DATA_ADDRESS_FIELD_NUMBER: _ClassVar[int]
    partition_id: str
    producer_resource_id: str
    producer_data_address: str
    def __init__(self, partition_id: _Optional[str] = ..., producer_resource_id: _Optional[str] = ..., producer_data_address: _Optional[str] = ...) -> None: ...

"""Connectors (PyFlink's ``pyflink.datastream.connectors``): the source and sink contracts
(:mod:`~weir.datastream.connectors.base`), files (:mod:`~weir.datastream.connectors.file_system`)
and number sequences (:mod:`~weir.datastream.connectors.number_seq`), named here as
PyFlink names them; and weir's Spark source (:mod:`~weir.datastream.connectors.spark`).

PyFlink's Java connectors (Kafka, Pulsar, Kinesis, JDBC, ...) do not exist in weir, which
runs no JVM: their modules import, and every name in them is refused in one line saying
what to use instead.

Example:
    >>> from weir.datastream.connectors import FileSource, NumberSequenceSource
    >>> NumberSequenceSource(1, 10).name
    'Number Sequence Source'
"""

from __future__ import annotations

from weir.datastream.connectors import base as _base
from weir.datastream.connectors import file_system as _file_system
from weir.datastream.connectors.base import (
    DiscardingSink,
    Sink,
    Source,
    SourceReader,
    SplitAssignment,
    SplitEnumerator,
)
from weir.datastream.connectors.file_system import (
    FileSink,
    FileSource,
    FileSourceBuilder,
    OutputFileConfig,
    RollingPolicy,
    StreamFormat,
)
from weir.datastream.connectors.number_seq import NumberSequenceSource
from weir.unsupported import SINKS, SOURCES, java_connector, refuse_modules, refusing

__all__ = [
    "DiscardingSink",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "NumberSequenceSource",
    "OutputFileConfig",
    "RollingPolicy",
    "Sink",
    "Source",
    "SourceReader",
    "SplitAssignment",
    "SplitEnumerator",
    "StreamFormat",
]

__unsupported__ = {**_base.__unsupported__, **_file_system.__unsupported__}
__getattr__ = refusing(__name__, __unsupported__)

refuse_modules({
    f"{__name__}.{module}": java_connector(feature, instead)
    for module, (feature, instead) in {
        "kafka": ("the Kafka connector", SOURCES),
        "dynamic_kafka": ("the dynamic Kafka connector", SOURCES),
        "pulsar": ("the Pulsar connector", SOURCES),
        "kinesis": ("the Kinesis connector", SOURCES),
        "pubsub": ("the Pub/Sub connector", SOURCES),
        "rabbitmq": ("the RabbitMQ connector", SOURCES),
        "hybrid_source": ("the hybrid source", SOURCES),
        "elasticsearch": ("the Elasticsearch connector", SINKS),
        "jdbc": ("the JDBC connector", SINKS),
        "cassandra": ("the Cassandra connector", SINKS),
    }.items()})

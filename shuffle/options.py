"""Shuffle service options."""

from __future__ import annotations

from weir.core.config import ByteSize, Option, Seconds, non_negative, positive

SHUFFLE_SERVICE_FACTORY = Option(
    "shuffle-service-factory.class", str,
    default="weir.shuffle.pipelined.factory.PipelinedShuffleServiceFactory",
    doc="Dotted path of the ShuffleServiceFactory implementation.")
DATA_PORT = Option(
    "taskmanager.data.port", int, default=0, validator=non_negative,
    doc="Port of the TaskExecutor's data server for remote channels (0 picks a free port).")
BUFFERS_PER_CHANNEL = Option(
    "taskmanager.network.memory.buffers-per-channel", int, default=2, validator=positive,
    doc="Exclusive buffers of each input channel.")
FLOATING_BUFFERS_PER_GATE = Option(
    "taskmanager.network.memory.floating-buffers-per-gate", int, default=8,
    validator=non_negative, doc="Buffers shared by the channels of one input gate.")
SUBPARTITION_QUEUE = Option(
    "taskmanager.network.memory.buffers-per-subpartition", int, default=4,
    validator=positive,
    doc="Buffers a result subpartition holds before its producer is backpressured.")
REQUEST_BACKOFF_INITIAL = Option(
    "taskmanager.network.request-backoff.initial", Seconds, default="100 ms",
    validator=positive, doc="First back-off when a requested partition is not there yet.")
REQUEST_BACKOFF_MAX = Option(
    "taskmanager.network.request-backoff.max", Seconds, default="10 s",
    validator=positive,
    doc="Longest back-off between partition requests; past it the consumer fails.")
DEBLOAT_ENABLED = Option(
    "taskmanager.network.memory.buffer-debloat.enabled", bool, default=False,
    doc="Size network buffers to each input gate's throughput, so that the data buffered in "
        "front of a task takes about buffer-debloat.target to consume.")
DEBLOAT_TARGET = Option(
    "taskmanager.network.memory.buffer-debloat.target", Seconds, default="1 s",
    validator=positive, doc="Time the buffered input of a task should take to consume.")
DEBLOAT_PERIOD = Option(
    "taskmanager.network.memory.buffer-debloat.period", Seconds, default="200 ms",
    validator=positive, doc="How often the throughput is measured and buffer sizes revised.")
DEBLOAT_SAMPLES = Option(
    "taskmanager.network.memory.buffer-debloat.samples", int, default=20, validator=positive,
    doc="Throughput samples averaged (exponential moving average over this many periods).")
DEBLOAT_THRESHOLD = Option(
    "taskmanager.network.memory.buffer-debloat.threshold-percentages", int, default=25,
    validator=non_negative,
    doc="A new buffer size is announced only when it differs by more than this many percent.")
MIN_SEGMENT_SIZE = Option(
    "taskmanager.memory.min-segment-size", ByteSize, default="256b", validator=positive,
    doc="Smallest buffer size debloating may choose.")
SHUFFLE_SERVICE_ADDRESS = Option(
    "shuffle-service.address", str, default=None,
    doc="HOST:PORT of the external shuffle service (`weir shuffle-service`), used by "
        "weir.shuffle.external.factory.ExternalShuffleServiceFactory.")

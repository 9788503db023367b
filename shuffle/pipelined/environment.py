"""ShuffleEnvironment of the pipelined shuffle: a partition manager and a data server."""

from __future__ import annotations

import ipaddress
import logging
import sys
from typing import Any

from weir.core import options
from weir.core.addresses import bind_target, join_host_port
from weir.core.ids import JobId, PartitionId
from weir.core.secrets import auth_token
from weir.core.tls import TlsFiles
from weir.proto import dataplane_pb2, jobgraph_pb2
from weir.shuffle import options as shuffle_options
from weir.shuffle.api import (
    InputGate,
    ResultPartitionWriter,
    ShuffleEnvironment,
    ShuffleEnvironmentContext,
    TaskShuffleContext,
)
from weir.shuffle.pipelined.client import ConnectionManager, FloatingBufferPool, RemoteInputChannel
from weir.shuffle.pipelined.debloat import BufferDebloater
from weir.shuffle.pipelined.gate import LocalInputChannel, PipelinedInputGate
from weir.shuffle.pipelined.partition import PartitionManager, PipelinedResultPartition
from weir.shuffle.pipelined.server import DataServer

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class PipelinedShuffleEnvironment(ShuffleEnvironment):
    def __init__(self, context: ShuffleEnvironmentContext) -> None:
        conf = context.configuration
        self._context = context
        self._capacity = conf.get(shuffle_options.SUBPARTITION_QUEUE)
        self._exclusive = conf.get(shuffle_options.BUFFERS_PER_CHANNEL)
        self._floating = conf.get(shuffle_options.FLOATING_BUFFERS_PER_GATE)
        self._segment_size = conf.get(options.SEGMENT_SIZE)
        self._backoff = (conf.get(shuffle_options.REQUEST_BACKOFF_INITIAL),
                         conf.get(shuffle_options.REQUEST_BACKOFF_MAX))
        self._port = conf.get(shuffle_options.DATA_PORT)
        self._token = auth_token(conf)
        self._tls = TlsFiles.from_conf(conf)
        self.partitions = PartitionManager()
        self.connections = ConnectionManager(
            self._segment_size, self._token,
            self._tls.client_context() if self._tls else None)
        self._server: DataServer | None = None
        self._address = ""

    def start(self) -> str:
        bind_host = self._context.bind_host or self._context.host
        self._server = DataServer(bind_target(bind_host), self._port, self.partitions,
                                  self._segment_size, self._token,
                                  self._tls.server_context() if self._tls else None)
        self._server.start()
        if not self._token and not is_loopback(bind_host):
            log.warning("the data port %s has no security.auth.token: anyone who can reach "
                        "it can read the partitions it serves", self._server.address)
        # Consumers dial the advertised host, never the (possibly wildcard) bound one.
        self._address = join_host_port(self._context.host, self._server.port)
        return self._address

    @property
    def data_address(self) -> str:
        assert self._server is not None, "the data address is known once started"
        return self._address

    def create_result_partition_writer(
            self, task: TaskShuffleContext,
            deployment: jobgraph_pb2.ResultPartitionDeployment) -> ResultPartitionWriter:
        # A blocking partition is produced before its consumers run: it must never hold its
        # producer back (its size is bounded by the bounded job's output).
        capacity = sys.maxsize if deployment.blocking else self._capacity
        partition = PipelinedResultPartition(
            PartitionId(deployment.partition_id), task.job_id, deployment.num_subpartitions,
            capacity, self._segment_size, task.wakeup)
        self.partitions.register(partition)
        return partition

    def create_input_gate(self, task: TaskShuffleContext,
                          deployment: jobgraph_pb2.InputGateDeployment) -> InputGate:
        pool = FloatingBufferPool(self._floating)
        channels: list[LocalInputChannel | RemoteInputChannel] = []
        for channel in deployment.channels:
            descriptor = dataplane_pb2.PipelinedShuffleDescriptor.FromString(
                channel.shuffle_descriptor)
            partition_id = PartitionId(descriptor.partition_id)
            if self.is_local_channel(channel):
                channels.append(LocalInputChannel(
                    self.partitions, partition_id, channel.subpartition,
                    task.wakeup, *self._backoff))
            else:
                channels.append(RemoteInputChannel(
                    self.connections, descriptor.producer_data_address,
                    partition_id, channel.subpartition, task.task_name,
                    self._exclusive, pool, *self._backoff, wakeup=task.wakeup,
                    producer=descriptor.producer_resource_id))
        debloater = None
        conf = self._context.configuration
        if conf.get(shuffle_options.DEBLOAT_ENABLED):
            remote = sum(isinstance(c, RemoteInputChannel) for c in channels)
            debloater = BufferDebloater(
                target=conf.get(shuffle_options.DEBLOAT_TARGET),
                period=conf.get(shuffle_options.DEBLOAT_PERIOD),
                samples=conf.get(shuffle_options.DEBLOAT_SAMPLES),
                threshold=conf.get(shuffle_options.DEBLOAT_THRESHOLD) / 100,
                min_size=conf.get(shuffle_options.MIN_SEGMENT_SIZE),
                max_size=self._segment_size,
                buffers_in_flight=remote * self._exclusive + self._floating)
        return PipelinedInputGate(channels, pool, self._exclusive, debloater,
                                  batch_bytes=self._segment_size)

    def is_local_channel(self, channel: jobgraph_pb2.InputChannelDeployment) -> bool:
        descriptor = dataplane_pb2.PipelinedShuffleDescriptor.FromString(
            channel.shuffle_descriptor)
        return bool(descriptor.producer_resource_id == self._context.resource_id)

    def release_partitions_of_job(self, job_id: JobId) -> None:
        self.partitions.release_job(job_id)

    def metrics(self) -> dict[str, Any]:
        return {"partitions": len(self.partitions)}

    def unhealthy_reason(self) -> str | None:
        return None if self._server is None else self._server.unhealthy_reason

    def close(self) -> None:
        self.connections.close()
        if self._server is not None:
            self._server.close()

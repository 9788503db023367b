"""ShuffleMaster of the pipelined shuffle: descriptors point at the producer's data server."""

from __future__ import annotations

from weir.core.ids import PartitionId, ResourceId
from weir.proto import dataplane_pb2
from weir.shuffle.api import PartitionDescriptor, ProducerDescriptor, ShuffleMaster


class PipelinedShuffleMaster(ShuffleMaster):
    """Tracks which TaskExecutor produces which partition, so losses are known."""

    def __init__(self) -> None:
        self._producer_of: dict[PartitionId, ResourceId] = {}

    def register_partition_with_producer(self, partition: PartitionDescriptor,
                                         producer: ProducerDescriptor) -> bytes:
        self._producer_of[partition.partition_id] = producer.resource_id
        return dataplane_pb2.PipelinedShuffleDescriptor(
            partition_id=partition.partition_id,
            producer_resource_id=producer.resource_id,
            producer_data_address=producer.data_address).SerializeToString()

    def release_partition_externally(self, descriptor: bytes) -> None:
        parsed = dataplane_pb2.PipelinedShuffleDescriptor.FromString(descriptor)
        self._producer_of.pop(PartitionId(parsed.partition_id), None)

    def is_partition_available(self, partition_id: PartitionId) -> bool:
        return partition_id in self._producer_of

    def on_producer_lost(self, resource_id: ResourceId) -> list[PartitionId]:
        lost = [p for p, r in self._producer_of.items() if r == resource_id]
        for partition_id in lost:
            del self._producer_of[partition_id]
        return lost

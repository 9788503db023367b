"""JobMaster side of the external shuffle: descriptors point at the shuffle service.

Partitions live in the service, not in TaskExecutors: losing a producer's TaskExecutor loses
none of its finished output, so :meth:`ExternalShuffleMaster.on_producer_lost` returns [].
The master releases partitions at the service when the JobMaster says they are no longer
needed; releasing the last partition it registered for a job releases the whole job there,
which also sweeps writes that no descriptor names any more (aborted attempts).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import grpc

from weir.core.ids import JobId, PartitionId, ResourceId
from weir.core.rpc import create_channel, keep_until_done
from weir.core.tls import TlsFiles
from weir.proto import shuffle_service_pb2 as pb
from weir.proto import shuffle_service_pb2_grpc
from weir.shuffle.api import PartitionDescriptor, ProducerDescriptor, ShuffleMaster
from weir.shuffle.external.environment import RELEASE_TIMEOUT_S

log = logging.getLogger(__name__)

#: How long ``close`` waits for releases still in flight.
CLOSE_WAIT_S = 5.0


class ExternalShuffleMaster(ShuffleMaster):
    """Hands out :class:`ExternalShuffleDescriptor` s and releases partitions at the service.

    Called on the JobMaster's main thread; never blocks it (releases are asynchronous; a
    failed release is logged with the partitions it concerned). ``close`` waits up to
    CLOSE_WAIT_S for releases in flight, then closes the connection.
    """

    reconsumable = True  # the service keeps a partition until it is released

    def __init__(self, service_address: str, token: str | None = None,
                 tls: TlsFiles | None = None) -> None:
        self.service_address = service_address
        self._token = token
        self._tls = tls
        self._jobs: dict[JobId, set[PartitionId]] = {}
        self._channels: dict[str, tuple[grpc.Channel,
                                        shuffle_service_pb2_grpc.ShuffleServiceStub]] = {}
        self._in_flight = 0
        self._done = threading.Condition()

    def register_partition_with_producer(self, partition: PartitionDescriptor,
                                         producer: ProducerDescriptor) -> bytes:
        self._jobs.setdefault(partition.job_id, set()).add(partition.partition_id)
        return pb.ExternalShuffleDescriptor(
            service_address=self.service_address, job_id=partition.job_id,
            partition_id=partition.partition_id,
            num_subpartitions=partition.num_subpartitions).SerializeToString()

    def release_partition_externally(self, descriptor: bytes) -> None:
        parsed = pb.ExternalShuffleDescriptor.FromString(descriptor)
        job_id = JobId(parsed.job_id)
        job = self._jobs.get(job_id)
        if job is not None:
            job.discard(PartitionId(parsed.partition_id))
            if not job:
                del self._jobs[job_id]
                self._release(parsed.service_address,
                              pb.ReleasePartitionsRequest(job_id=parsed.job_id, all_of_job=True))
                return
        self._release(parsed.service_address, pb.ReleasePartitionsRequest(
            job_id=parsed.job_id, partition_ids=[parsed.partition_id]))

    def _release(self, address: str, request: pb.ReleasePartitionsRequest) -> None:
        entry = self._channels.get(address)
        if entry is None:
            channel = create_channel(address, self._token, tls=self._tls)
            entry = self._channels[address] = (
                channel, shuffle_service_pb2_grpc.ShuffleServiceStub(channel))
        future = entry[1].ReleasePartitions.future(request, timeout=RELEASE_TIMEOUT_S)
        with self._done:
            self._in_flight += 1

        def done(f: Any) -> None:  # on a gRPC thread
            if f.cancelled() or f.exception() is not None:
                what = "every partition" if request.all_of_job else \
                    f"partitions {list(request.partition_ids)}"
                cause = "cancelled" if f.cancelled() else \
                    f"{f.exception().code().name}: {f.exception().details()}"
                log.warning("could not release %s of job %s at the shuffle service at %s "
                            "(%s); they stay on its disk until released", what,
                            request.job_id, address, cause)
            with self._done:
                self._in_flight -= 1
                self._done.notify_all()

        keep_until_done(future, done)

    def wait_for_releases(self, timeout: float) -> bool:
        """Wait until every release sent so far completed; False on timeout. Any thread."""
        with self._done:
            return self._done.wait_for(lambda: self._in_flight == 0, timeout)

    def is_partition_available(self, partition_id: PartitionId) -> bool:
        return any(partition_id in ids for ids in self._jobs.values())

    def on_producer_lost(self, resource_id: ResourceId) -> list[PartitionId]:
        return []  # the service holds the data: nothing is lost with a TaskExecutor

    def close(self) -> None:
        self.wait_for_releases(CLOSE_WAIT_S)
        for channel, _ in self._channels.values():
            channel.close()
        self._channels.clear()

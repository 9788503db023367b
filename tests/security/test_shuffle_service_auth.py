"""The external shuffle service: every method refuses a caller without the token, and a
service started without one says loudly that it is open."""

from __future__ import annotations

import logging
from collections.abc import Callable

import grpc
import pytest

from weir.core.rpc import create_channel
from weir.proto import shuffle_service_pb2 as pb
from weir.proto import shuffle_service_pb2_grpc
from weir.shuffle.external.service import ShuffleServiceDaemon

JOB = "0123456789abcdef0123456789abcdef"


def calls(stub: shuffle_service_pb2_grpc.ShuffleServiceStub) -> dict[str, Callable[[], object]]:
    return {
        "WritePartition": lambda: stub.WritePartition(iter([pb.WritePartitionRequest(
            job_id=JOB, partition_id="p", num_subpartitions=1, data=b"x", commit=True,
            total_chunks=1, total_bytes=1)]), timeout=10),
        "ReadSubpartition": lambda: list(stub.ReadSubpartition(pb.ReadSubpartitionRequest(
            job_id=JOB, partition_id="p"), timeout=10)),
        "ReleasePartitions": lambda: stub.ReleasePartitions(pb.ReleasePartitionsRequest(
            job_id=JOB, all_of_job=True), timeout=10),
        "ListPartitions": lambda: stub.ListPartitions(pb.ListPartitionsRequest(), timeout=10),
    }


@pytest.mark.parametrize("token", [None, "a guess"])
def test_every_method_refuses_a_caller_without_the_token(tmp_path, token):
    with ShuffleServiceDaemon(str(tmp_path / "data"), token="s3cret") as service:
        channel = create_channel(service.address, token)
        try:
            for name, call in calls(shuffle_service_pb2_grpc.ShuffleServiceStub(channel)).items():
                with pytest.raises(grpc.RpcError) as refused:
                    call()
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED, name
            assert service.store is not None and service.store.list(None) == []
        finally:
            channel.close()


def test_a_service_without_a_token_warns_at_start(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="weir.shuffle.external.service"), \
            ShuffleServiceDaemon(str(tmp_path / "data")) as service:
        pass
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(service.address in w and "no security.auth.token" in w for w in warnings)


def test_a_tls_service_serves_holders_of_the_cluster_certificate_only(tmp_path):
    from weir.core.tls import generate_cluster_pki

    pki = generate_cluster_pki(tmp_path / "tls", ["127.0.0.1"])
    stranger = generate_cluster_pki(tmp_path / "stranger", ["127.0.0.1"])
    with ShuffleServiceDaemon(str(tmp_path / "data"), token="s3cret", tls=pki) as service:
        for tls, works in ((pki, True), (stranger, False), (None, False)):
            channel = create_channel(service.address, "s3cret", tls=tls)
            try:
                stub = shuffle_service_pb2_grpc.ShuffleServiceStub(channel)
                if works:
                    calls(stub)["WritePartition"]()
                    assert [p.partition_id for p in stub.ListPartitions(
                        pb.ListPartitionsRequest(), timeout=10).partitions] == ["p"]
                else:
                    with pytest.raises(grpc.RpcError) as refused:
                        calls(stub)["ListPartitions"]()
                    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
            finally:
                channel.close()

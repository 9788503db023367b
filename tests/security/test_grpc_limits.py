"""gRPC message limits: an unauthenticated call is refused before its body is read, and a
method that only takes small messages refuses a large one without parsing it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from tests.support.cluster import LocalCluster
from weir.core.rpc import SMALL_MESSAGE_BYTES, create_channel, create_server
from weir.proto import dispatcher_pb2, dispatcher_pb2_grpc

TOKEN = "tok-limits-5d1e"
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("limits") / "cluster")
    cluster.start(1, 1, f"security.auth.token={TOKEN}")
    yield cluster
    cluster.stop()


def memory_mib(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def reset_peak(pid: int) -> None:
    """Start VmHWM over at the current RSS (Linux >= 4.0), so the peak is this call's."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        pass  # the peak then includes start-up, which only makes the check stricter


def raw_call(channel: grpc.Channel, method: str, body: bytes, timeout: float = 60) -> grpc.RpcError:
    """Send ``body`` as the request of ``method`` (bytes as they are) and return its error."""
    call = channel.unary_unary(method, request_serializer=lambda b: b,
                               response_deserializer=lambda b: b)
    with pytest.raises(grpc.RpcError) as raised:
        call(body, timeout=timeout)
    return raised.value


def unknown_field(size: int) -> bytes:
    """A valid encoding of any message: field 15 (unknown to it) holding ``size`` bytes."""
    length, varint = size, bytearray()
    while True:
        byte, length = length & 0x7F, length >> 7
        varint.append(byte | (0x80 if length else 0))
        if not length:
            break
    return bytes([15 << 3 | 2]) + bytes(varint) + b"\0" * size


def test_an_unauthenticated_200_mib_request_is_refused_before_it_is_read(guarded):
    pid = guarded.jobmaster_pid()
    body = unknown_field(200 * MiB)
    channel = grpc.insecure_channel(guarded.address,
                                    options=[("grpc.max_send_message_length", 256 * MiB)])
    try:
        # Both services of the JobMaster's server: the clients' and the TaskExecutors'.
        for method in ("Dispatcher/SubmitJob", "Dispatcher/ListJobs",
                       "JobMasterGateway/PushCollectBatch"):
            reset_peak(pid)
            before = memory_mib(pid)
            started = time.monotonic()
            refused = raw_call(channel, f"/weir.{method}", body)
            elapsed = time.monotonic() - started
            after = memory_mib(pid)
            growth = after["VmHWM"] - before["VmRSS"]
            assert refused.code() == grpc.StatusCode.UNAUTHENTICATED, refused
            assert "security.auth.token" in refused.details()
            # Reading and unpacking the body took 2 s and 600 MiB of peak RSS before.
            assert elapsed < 1.5, f"{method}: refused after {elapsed:.2f} s"
            assert growth < 32, f"{method}: the JobMaster's peak RSS grew by {growth:.0f} MiB"
    finally:
        channel.close()
    listing = guarded.weir("list", "-D", f"security.auth.token={TOKEN}")
    assert listing.returncode == 0, listing.stderr


def test_a_large_message_to_a_small_message_method_is_refused(guarded):
    channel = create_channel(guarded.address, TOKEN)
    try:
        refused = raw_call(channel, "/weir.Dispatcher/ListJobs",
                           unknown_field(SMALL_MESSAGE_BYTES + MiB))
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused
        details = refused.details()
        assert "/weir.Dispatcher/ListJobs" in details and "4.0 MiB" in details, details
        assert "\n" not in details
        # A heartbeat stream is held to the same limit, message by message.
        heartbeat = channel.stream_stream("/weir.JobMasterGateway/Heartbeat",
                                          request_serializer=lambda b: b,
                                          response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as raised:
            list(heartbeat(iter([unknown_field(SMALL_MESSAGE_BYTES + MiB)]), timeout=30))
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, raised.value
    finally:
        channel.close()
    # Still serving: the client commands work, and small calls of every kind go through.
    listing = guarded.weir("list", "-D", f"security.auth.token={TOKEN}")
    assert listing.returncode == 0, listing.stderr
    channel = create_channel(guarded.address, TOKEN)
    try:
        stub = dispatcher_pb2_grpc.DispatcherStub(channel)
        overview = stub.GetClusterOverview(dispatcher_pb2.ClusterOverviewRequest(), timeout=10)
        assert overview.slots_total == 1
    finally:
        channel.close()


def serve(max_receive_bytes: int | None = None) -> tuple[grpc.Server, str]:
    """A Dispatcher service without behaviour: every call that gets through is UNIMPLEMENTED."""
    server, port = create_server(
        "127.0.0.1", 0, None, lambda s: dispatcher_pb2_grpc.add_DispatcherServicer_to_server(
            dispatcher_pb2_grpc.DispatcherServicer(), s),
        max_receive_bytes=max_receive_bytes)
    return server, f"127.0.0.1:{port}"


def test_a_server_reads_no_message_above_its_receive_limit():
    server, address = serve(max_receive_bytes=MiB)
    channel = create_channel(address)
    try:
        refused = raw_call(channel, "/weir.Dispatcher/SubmitJob", unknown_field(2 * MiB))
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused
        below = raw_call(channel, "/weir.Dispatcher/SubmitJob", unknown_field(MiB // 2))
        assert below.code() == grpc.StatusCode.UNIMPLEMENTED, below
    finally:
        channel.close()
        server.stop(None).wait()


def test_a_channel_refuses_to_send_above_its_send_limit():
    server, address = serve()
    channel = create_channel(address, max_send_bytes=MiB)
    try:
        refused = raw_call(channel, "/weir.Dispatcher/SubmitJob", unknown_field(2 * MiB))
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused
        assert "Sent message larger than max" in refused.details()
    finally:
        channel.close()
        server.stop(None).wait()

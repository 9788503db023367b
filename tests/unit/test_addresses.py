"""Bind addresses and advertised addresses: the choice of what a daemon advertises (pure
functions, no sockets), the options' checks, and the pieces that do touch sockets: the
interface toward the JobMaster, the reachability check of a registration, the data server
bound to a wildcard, and a consumer's failure at an unreachable producer."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import poll
from weir.core.addresses import (
    HostChoice,
    host_problem,
    is_wildcard,
    jobmaster_host,
    join_host_port,
    local_address_toward,
    metrics_host,
    metrics_url,
    split_host_port,
    taskexecutor_hosts,
)
from weir.core.config import Configuration
from weir.core.errors import ConfigError, PartitionNotFoundError
from weir.core.ids import ResourceId
from weir.core.rpc import check_reachable, create_server
from weir.core.tls import generate_cluster_pki
from weir.jobmaster import options as jm_options
from weir.shuffle.api import ShuffleEnvironmentContext
from weir.shuffle.pipelined.client import ConnectionManager, FloatingBufferPool, RemoteInputChannel
from weir.shuffle.pipelined.environment import PipelinedShuffleEnvironment
from weir.shuffle.pipelined.partition import PartitionManager
from weir.shuffle.pipelined.server import DataServer
from weir.taskexecutor import options as te_options
from weir.taskexecutor.daemon import TaskExecutor

SEGMENT = 32 * 1024


def never() -> str:
    """A ``local_address`` that must not be asked."""
    raise AssertionError("the interface toward the JobMaster was looked up")


# -- the choice (pure) -------------------------------------------------------------------------


def test_a_taskexecutor_with_nothing_configured_binds_and_advertises_loopback():
    assert taskexecutor_hosts(None, None, never) == HostChoice("127.0.0.1", "127.0.0.1",
                                                                "the default")


def test_taskmanager_host_is_advertised_and_bound_unless_a_bind_host_is_set():
    assert taskexecutor_hosts("10.0.0.9", None, never) == HostChoice(
        "10.0.0.9", "10.0.0.9", "taskmanager.host")
    assert taskexecutor_hosts("10.0.0.9", "0.0.0.0", never) == HostChoice(
        "0.0.0.0", "10.0.0.9", "taskmanager.host")
    assert taskexecutor_hosts("tm-3.weir.svc", "::", never).advertised == "tm-3.weir.svc"


@pytest.mark.parametrize("wildcard", ["0.0.0.0", "::", "[::]", "*"])
def test_a_wildcard_bind_without_a_host_advertises_the_interface_toward_the_jobmaster(
        wildcard: str):
    choice = taskexecutor_hosts(None, wildcard, lambda: "10.1.2.3")
    assert choice == HostChoice(wildcard, "10.1.2.3", "the interface that reaches the JobMaster")
    assert not is_wildcard(choice.advertised)


def test_a_specific_bind_host_without_a_host_is_advertised_as_it_is():
    assert taskexecutor_hosts(None, "10.0.0.8", never) == HostChoice(
        "10.0.0.8", "10.0.0.8", "taskmanager.bind-host")


def test_the_jobmaster_advertises_its_rpc_address_its_bind_host_or_its_host_name():
    assert jobmaster_host("jm.weir.svc", "0.0.0.0", never) == HostChoice(
        "0.0.0.0", "jm.weir.svc", "jobmaster.rpc.address")
    assert jobmaster_host(None, "0.0.0.0", lambda: "jm-0.example") == HostChoice(
        "0.0.0.0", "jm-0.example", "the host name")
    assert jobmaster_host(None, "127.0.0.1", never) == HostChoice(
        "127.0.0.1", "127.0.0.1", "jobmaster.rpc.bind-host")


def test_the_metrics_url_names_the_advertised_host_where_the_endpoint_is_reached_there():
    wildcard = HostChoice("0.0.0.0", "10.0.0.9", "taskmanager.host")
    assert metrics_host("0.0.0.0", wildcard) == "10.0.0.9"
    assert metrics_host("127.0.0.1", wildcard) == "127.0.0.1"   # bound to loopback only
    same = HostChoice("10.0.0.9", "tm-1.example", "taskmanager.host")
    assert metrics_host("10.0.0.9", same) == "tm-1.example"
    assert metrics_url("10.0.0.9", 9249) == "http://10.0.0.9:9249/metrics"


def test_addresses_join_and_split_with_ipv6_in_brackets():
    assert join_host_port("::1", 1) == "[::1]:1"
    assert join_host_port("localhost", 2) == "localhost:2"
    assert split_host_port("[::1]:1") == ("::1", 1)
    assert split_host_port(join_host_port("10.0.0.1", 3)) == ("10.0.0.1", 3)
    for bad in ("10.0.0.1", "host:", ":80", "host:http"):
        with pytest.raises(ValueError, match="is not HOST:PORT"):
            split_host_port(bad)


# -- the options ---------------------------------------------------------------------------


@pytest.mark.parametrize("option", [te_options.HOST, te_options.BIND_HOST,
                                    jm_options.RPC_ADDRESS, jm_options.RPC_BIND_HOST])
def test_a_host_option_with_a_port_or_a_scheme_is_one_clear_error(option):
    for value in ("10.0.0.1:6123", "http://jm", "two words"):
        with pytest.raises(ConfigError) as error:
            Configuration.from_pairs({option.key: value}).get(option)
        assert str(error.value) == (f"invalid value for '{option.key}': {value!r} (a host "
                                    "name or IP address without a port)")
    assert host_problem("::1") is None and host_problem("tm-1.weir.svc") is None


def test_the_host_options_have_flink_names_and_environment_variables():
    assert te_options.HOST.env_var == "WEIR_TASKMANAGER_HOST"
    assert te_options.BIND_HOST.env_var == "WEIR_TASKMANAGER_BIND_HOST"
    assert jm_options.RPC_ADDRESS.env_var == "WEIR_JOBMASTER_RPC_ADDRESS"
    assert te_options.HOST.default is None and te_options.BIND_HOST.default is None


# -- the parts that use sockets ------------------------------------------------------------


def test_the_interface_toward_a_loopback_jobmaster_is_a_loopback_address():
    assert local_address_toward("127.0.0.5:6123").startswith("127.")


def test_a_wildcard_taskexecutor_whose_jobmaster_does_not_resolve_is_one_config_error():
    te = TaskExecutor("no-such-host.invalid:6123",
                      Configuration.from_pairs({"taskmanager.bind-host": "0.0.0.0"}))
    with pytest.raises(ConfigError, match=r"no interface toward the JobMaster at "
                       r"no-such-host\.invalid:6123 \(--jobmaster\).*set taskmanager\.host"):
        te._choose_hosts()


@pytest.fixture
def grpc_port() -> Iterator[int]:
    server, port = create_server("127.0.0.1", 0, None, lambda s: None)
    yield port
    server.stop(None).wait()


def test_the_reachability_check_names_the_cause(grpc_port: int):
    assert check_reachable(f"127.0.0.1:{grpc_port}", 5.0) is None
    assert check_reachable(f"localhost:{grpc_port}", 5.0) is None
    # The server binds 127.0.0.1 only: the same port elsewhere on loopback refuses.
    assert check_reachable(f"127.0.0.2:{grpc_port}", 5.0) == "Connection refused"
    assert check_reachable("no-such-host.invalid:1", 5.0) == \
        "the host name does not resolve (Name or service not known)"


def test_the_reachability_check_tells_a_listener_that_is_no_grpc_server():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        accepted: list[socket.socket] = []
        stop = threading.Event()

        def accept() -> None:  # accepts and stays silent, as a non-HTTP/2 service would
            listener.settimeout(0.05)
            while not stop.is_set():
                try:
                    accepted.append(listener.accept()[0])
                except TimeoutError:
                    continue

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            cause = check_reachable(f"127.0.0.1:{listener.getsockname()[1]}", 1.0)
        finally:
            stop.set()
            thread.join(5)
            for connection in accepted:
                connection.close()
    assert cause is not None and cause.startswith("a connection opens, but "), cause


def test_with_tls_the_reachability_check_wants_a_certificate_naming_the_advertised_host(
        tmp_path: Path):
    pki = generate_cluster_pki(tmp_path / "tls", ["127.0.0.1", "localhost"])
    server, port = create_server("0.0.0.0", 0, "t", lambda s: None, tls=pki)
    try:
        assert check_reachable(f"127.0.0.1:{port}", 5.0, "t", pki) is None
        assert check_reachable(f"localhost:{port}", 5.0, "t", pki) is None
        cause = check_reachable(f"127.0.0.2:{port}", 5.0, "t", pki)   # not in the certificate
    finally:
        server.stop(None).wait()
    assert cause is not None and cause.startswith("a connection opens, but gRPC fails there")
    assert cause.endswith("with TLS, the certificate must name that host)")


def test_a_data_server_bound_to_a_wildcard_advertises_the_host_and_serves_there():
    env = PipelinedShuffleEnvironment(ShuffleEnvironmentContext(
        Configuration(), ResourceId("te-1"), "127.0.0.2", "0.0.0.0"))
    try:
        address = env.start()
        host, port = split_host_port(address)
        assert host == "127.0.0.2" and env.data_address == address
        with socket.create_connection(("127.0.0.2", port), timeout=5):
            pass  # bound to every interface: reached at the advertised one
    finally:
        env.close()


def test_a_consumer_that_cannot_reach_a_producer_names_it_the_address_and_the_option():
    partitions = PartitionManager()
    server = DataServer("127.0.0.1", 0, partitions, SEGMENT)
    server.start()
    connections = ConnectionManager(SEGMENT)
    unreachable = f"127.0.0.2:{server.port}"   # what a producer bound to 127.0.0.1 misadvertises
    try:
        channel = RemoteInputChannel(connections, unreachable, "p1", 0, "consumer", 2,
                                     FloatingBufferPool(0), 0.01, 0.04, wakeup=lambda: None,
                                     producer="te-producer")
        channel.request()
        failure = poll(lambda: channel.failure, 10, what="the channel to fail")
    finally:
        connections.close()
        server.close()
    assert isinstance(failure, PartitionNotFoundError)
    assert (f"TaskExecutor te-producer advertises the data address {unreachable} "
            "(taskmanager.host), which cannot be reached from here: Connection refused; set "
            "taskmanager.host to an address other hosts can reach") in str(failure)

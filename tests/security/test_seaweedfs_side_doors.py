"""The embedded SeaweedFS has one way in: the S3 port, with its keys.

``weed mini`` runs a master, a volume server, a filer, an S3 gateway and an admin server, each
on an HTTP port, a gRPC port and some Unix sockets. Whatever it listens on, found from the OS
(so a port a new weed version adds is probed too), must refuse to read, write or delete a
bucket's objects for a caller without credentials. Allowed without credentials: answers that
carry no object data (health, metrics, volume ids and sizes, error messages).

Each probe runs as the same user as the server (the tests cannot switch users); what stops it
is the missing credential, not file permissions.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import ipaddress
import json
import os
import re
import secrets
import socket
import ssl
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from botocore.exceptions import ClientError

from tests.support.cluster import poll
from tests.support.seaweedfs import SeaweedS3
from weir.checkpoint.seaweedfs import GRPC_OFFSET, SECURITY_FILE, TLS_CERT_FILE, TLS_KEY_FILE

BUCKET = "side-doors"
TIMEOUT_S = 3.0
#: What the probes try to write.
PLANTED = b"planted-without-credentials"
LOOKUP = "/filer_pb.SeaweedFiler/LookupDirectoryEntry"
READ_ALL_NEEDLES = "/volume_server_pb.VolumeServer/ReadAllNeedles"

#: method, path, body, headers
Request = tuple[str, str, bytes | None, dict[str, str]]
#: gRPC method, serialized request, whether the answer is a stream
Call = tuple[str, bytes, bool]


@dataclass(frozen=True)
class Endpoint:
    """A listening socket of the server: a TCP port on an IP address, or a Unix socket.

    ``path`` is where the server sees its Unix socket; ``root`` the server's root directory
    as seen from here (``/proc/<pid>/root``), through which the path is reached: the server
    has a /tmp of its own.
    """

    host: str = ""
    port: int = 0
    path: str = ""
    root: str = ""

    def __str__(self) -> str:
        return f"unix:{self.path}" if self.path else f"{self.host}:{self.port}"

    @property
    def reachable_path(self) -> str:
        return self.path if self.path.startswith("\0") else self.root + self.path

    def connect(self) -> socket.socket:
        if self.path:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(TIMEOUT_S)
            sock.connect(self.reachable_path)
            return sock
        return socket.create_connection((self.host, self.port), timeout=TIMEOUT_S)

    @property
    def grpc_target(self) -> str:
        if self.path.startswith("\0"):
            return f"unix-abstract:{self.path[1:]}"
        if self.path:
            return f"unix:{self.reachable_path}"
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


class _EndpointHTTPConnection(http.client.HTTPConnection):
    """Plain HTTP/1.1 to any endpoint, Unix sockets included."""

    def __init__(self, endpoint: Endpoint) -> None:
        super().__init__("localhost", timeout=TIMEOUT_S)
        self.endpoint = endpoint

    def connect(self) -> None:
        self.sock = self.endpoint.connect()


def _socket_inodes(pid: int) -> set[int]:
    inodes: set[int] = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue  # closed since the listing
        if match := re.fullmatch(r"socket:\[(\d+)\]", target):
            inodes.add(int(match.group(1)))
    return inodes


def _tcp_address(hex_address: str) -> str:
    # /proc/net/tcp* print addresses as 32-bit words in host (little-endian) order.
    raw = bytes.fromhex(hex_address)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    address = ipaddress.ip_address(raw)
    if address.is_unspecified:
        return "::1" if address.version == 6 else "127.0.0.1"
    return str(address)


def listening_endpoints(pid: int) -> list[Endpoint]:
    """Every TCP and Unix stream socket ``pid`` listens on, from /proc (Linux)."""
    inodes = _socket_inodes(pid)
    endpoints: list[Endpoint] = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and int(fields[9]) in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                endpoints.append(Endpoint(host=_tcp_address(address), port=int(port, 16)))
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        # Flags 00010000: accepting connections; type 0001: SOCK_STREAM.
        if (len(fields) == 8 and int(fields[6]) in inodes and fields[4] == "0001"
                and int(fields[3], 16) & 0x10000):
            path = fields[7]
            if path.startswith("@"):
                endpoints.append(Endpoint(path="\0" + path[1:]))
            else:
                endpoints.append(Endpoint(path=path, root=f"/proc/{pid}/root"))
    return endpoints


def find_needle(store: Path, payload: bytes) -> tuple[int, str] | None:
    """(volume id, file id) of the needle holding ``payload``, read from the volume files.

    A needle is cookie (4 bytes), id (8), size (4), data size (4), data. Read from disk, so
    the probes have the file id whether or not a port would give it away.
    """
    for dat in store.glob("*.dat"):
        data = dat.read_bytes()
        at = data.find(payload)
        if at >= 20:
            volume = int(dat.stem.rsplit("_", 1)[-1])
            cookie = data[at - 20:at - 16].hex()
            key = int.from_bytes(data[at - 16:at - 8], "big")
            return volume, f"{volume},{key:02x}{cookie}"
    return None


@dataclass
class Target:
    """One object stored through S3, and where it lives."""

    key: str
    payload: bytes
    volume: int
    fid: str

    @property
    def prefix(self) -> str:
        return self.key.rsplit("/", 1)[0] + "/"

    @property
    def planted_key(self) -> str:
        return self.prefix + "planted"


@pytest.fixture(scope="module")
def server() -> Iterator[SeaweedS3]:
    with SeaweedS3() as started:
        started.create_bucket(BUCKET)
        yield started


@pytest.fixture
def target(server: SeaweedS3) -> Target:
    key = f"checkpoints/{secrets.token_hex(4)}/_metadata"
    # Random: no server can echo it from a request, so seeing it in an answer means the
    # object was read.
    payload = b"checkpoint-" + secrets.token_bytes(48)
    server.client().put_object(Bucket=BUCKET, Key=key, Body=payload,
                               ContentType="application/octet-stream")
    volume, fid = poll(lambda: find_needle(server.store_dir, payload), timeout=10,
                       what="the object's needle in a volume file")
    return Target(key, payload, volume, fid)


def tampering(server: SeaweedS3, target: Target) -> list[str]:
    """What the probes changed, as S3 (with the keys) sees it: nothing, if all was refused."""
    client = server.client()
    found: list[str] = []
    try:
        if client.get_object(Bucket=BUCKET, Key=target.key)["Body"].read() != target.payload:
            found.append("the object was changed without credentials")
    except ClientError as err:
        found.append(f"the object was deleted without credentials ({err})")
    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=target.prefix).get("Contents", [])
    found += [f"{o['Key']} was written without credentials" for o in listed
              if o["Key"] != target.key]
    return found


def _http(endpoint: Endpoint, method: str, path: str, body: bytes | None = None,
          headers: dict[str, str] | None = None
          ) -> tuple[int, dict[str, str], bytes] | None:
    """Status, headers and body of one request; None if the endpoint does not speak
    HTTP/1.1 (a TLS port, say)."""
    connection = _EndpointHTTPConnection(endpoint)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read(1 << 20)
    except (OSError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def _multipart(name: str, content: bytes) -> tuple[bytes, dict[str, str]]:
    boundary = secrets.token_hex(8)
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; "
            f"filename=\"{name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            ).encode() + content + f"\r\n--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}"}


def http_requests(target: Target) -> list[list[Request]]:
    """Requests reading, then writing, then deleting ``target``: phases, so that a delete
    that gets through cannot hide a read that would have."""
    object_paths = (f"/buckets/{BUCKET}/{target.key}",  # filer
                    f"/{BUCKET}/{target.key}",           # S3, unsigned
                    f"/{target.fid}")                     # volume server (master: redirect)
    planted = target.planted_key
    form, form_headers = _multipart("planted", PLANTED)
    return [
        [*(("GET", path, None, {}) for path in object_paths),
         # The master mints a read JWT for a file id, and a fid plus write JWT on assign.
         ("GET", f"/dir/lookup?fileId={target.fid}&read=yes", None, {})],
        [("GET", "/dir/assign", None, {}),
         ("PUT", f"/buckets/{BUCKET}/{planted}", PLANTED, {}),
         ("POST", f"/buckets/{BUCKET}/{planted}", form, form_headers),
         ("PUT", f"/{BUCKET}/{planted}", PLANTED, {})],
        [("DELETE", path, None, {}) for path in object_paths],
    ]


def http_doors(endpoint: Endpoint, requests: list[Request], target: Target) -> list[str]:
    """Send ``requests`` without credentials; the answers that open a door to ``target``."""
    doors: list[str] = []
    for method, path, body, headers in requests:
        answer = _http(endpoint, method, path, body, headers)
        if answer is None:
            continue
        status, response_headers, response_body = answer
        what = f"{endpoint} {method} {path} -> {status}"
        if target.payload in response_body:
            doors.append(f"{what} returned the object's bytes")
        authorization = {k.lower(): v for k, v in response_headers.items()}.get(
            "authorization", "")
        if authorization.lower().startswith("bearer "):
            doors.append(f"{what} handed out a JWT")
        try:
            document = json.loads(response_body)
        except ValueError:
            document = None
        if 200 <= status < 300 and isinstance(document, dict) and document.get("fid"):
            doors.append(f"{what} handed out a writable file id {document['fid']}")
    return doors


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, value: bytes | str | int) -> bytes:
    """One protobuf field (the tests have no SeaweedFS stubs; its messages are simple)."""
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def grpc_calls(target: Target) -> list[list[Call]]:
    """(method, request, server-streaming) reading, then writing, then deleting ``target``."""
    directory, name = f"/buckets/{BUCKET}/{target.key}".rsplit("/", 1)
    planted = target.planted_key.rsplit("/", 1)[1]
    attributes = _field(1, len(PLANTED)) + _field(2, int(time.time())) + _field(3, 0o644)
    entry = _field(1, planted) + _field(4, attributes) + _field(9, PLANTED)
    return [
        [(LOOKUP, _field(1, directory) + _field(2, name), False),
         (READ_ALL_NEEDLES, _field(1, target.volume), True)],
        [("/filer_pb.SeaweedFiler/CreateEntry", _field(1, directory) + _field(2, entry), False),
         # A file id and the JWT to write it.
         ("/master_pb.Seaweed/Assign", _field(1, 1), False)],
        [("/filer_pb.SeaweedFiler/DeleteEntry",
          _field(1, directory) + _field(2, name) + _field(4, 1), False),
         ("/volume_server_pb.VolumeServer/BatchDelete", _field(1, target.fid) + _field(2, 1),
          False)],
    ]


def _call(channel: grpc.Channel, method: str, request: bytes, streaming: bool) -> bytes:
    """The call's answer (a stream's messages joined); raises grpc.RpcError if refused."""
    def identity(raw: bytes) -> bytes:
        return raw

    if streaming:
        stream = channel.unary_stream(method, request_serializer=identity,
                                      response_deserializer=identity)
        return b"".join(stream(request, timeout=TIMEOUT_S))
    unary = channel.unary_unary(method, request_serializer=identity,
                                response_deserializer=identity)
    answer: bytes = unary(request, timeout=TIMEOUT_S)
    return answer


def grpc_doors(endpoint: Endpoint, calls: list[Call]) -> list[str]:
    """Make ``calls`` in plaintext gRPC; the ones served."""
    doors: list[str] = []
    with grpc.insecure_channel(endpoint.grpc_target) as channel:
        for method, request, streaming in calls:
            try:
                _call(channel, method, request, streaming)
            except grpc.RpcError:
                continue
            doors.append(f"{endpoint} served gRPC {method} without credentials")
    return doors


def serves_tls_without_client_certificate(endpoint: Endpoint) -> bool:
    """Whether a TLS client with no certificate gets as far as the server's HTTP/2 settings.

    With TLS 1.3 a server that requires a client certificate lets the handshake finish and
    sends its refusal (an alert) instead of its first frame.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # an attacker trusts whatever certificate it sees
    context.set_alpn_protocols(["h2"])
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
    try:
        with endpoint.connect() as raw, context.wrap_socket(raw) as tls:
            tls.sendall(preface)
            frame = tls.recv(9)
    except (OSError, ssl.SSLError):
        return False
    return len(frame) == 9 and frame[3] == 4  # a SETTINGS frame: the server talks to us


def all_endpoints(server: SeaweedS3) -> list[Endpoint]:
    """Every listening socket of the server, once it includes every port the server was
    given (under load a component may start listening a moment after the S3 API answers)."""
    assert server.pid is not None
    pid = server.pid
    known = set(server.ports.values())
    return poll(lambda: (endpoints := listening_endpoints(pid)) and
                known <= {e.port for e in endpoints if e.port} and endpoints,
                30, interval=0.2, what=f"the server to listen on every known port {known}")


def test_no_port_or_socket_serves_objects_over_http_without_credentials(
        server: SeaweedS3, target: Target) -> None:
    endpoints = all_endpoints(server)

    doors = [door for phase in http_requests(target) for endpoint in endpoints
             for door in http_doors(endpoint, phase, target)]

    doors += tampering(server, target)
    assert not doors, "doors:\n" + "\n".join(doors)


def test_no_port_or_socket_serves_grpc_without_a_client_certificate(
        server: SeaweedS3, target: Target) -> None:
    endpoints = all_endpoints(server)

    doors = [door for phase in grpc_calls(target) for endpoint in endpoints
             for door in grpc_doors(endpoint, phase)]
    doors += [f"{endpoint} speaks TLS to a client without a certificate"
              for endpoint in endpoints if serves_tls_without_client_certificate(endpoint)]

    doors += tampering(server, target)
    assert not doors, "doors:\n" + "\n".join(doors)


def _read_jwt(secret: str, fid: str) -> str:
    """A JWT for reading ``fid`` from the volume server, as weed's master would sign it."""
    def encode(raw: bytes) -> bytes:
        return base64.urlsafe_b64encode(raw).rstrip(b"=")

    claims: dict[str, Any] = {"fid": fid, "exp": int(time.time()) + 60}
    signed = (encode(json.dumps({"alg": "HS256", "typ": "JWT"}).encode()) + b"."
              + encode(json.dumps(claims).encode()))
    signature = encode(hmac.new(secret.encode(), signed, hashlib.sha256).digest())
    return (signed + b"." + signature).decode()


def test_the_same_probes_succeed_with_the_servers_own_secrets(
        server: SeaweedS3, target: Target) -> None:
    """The refusals above come from the missing credentials, not from malformed probes."""
    volume = Endpoint(host="127.0.0.1", port=server.ports["volume"])
    security = tomllib.loads((server.data_dir / SECURITY_FILE).read_text())
    token = _read_jwt(security["jwt"]["signing"]["read"]["key"], target.fid)
    answer = _http(volume, "GET", f"/{target.fid}",
                   headers={"Authorization": f"Bearer {token}"})
    assert answer is not None and answer[2] == target.payload

    certificate = (server.data_dir / TLS_CERT_FILE).read_bytes()
    credentials = grpc.ssl_channel_credentials(
        root_certificates=certificate, certificate_chain=certificate,
        private_key=(server.data_dir / TLS_KEY_FILE).read_bytes())
    reads = grpc_calls(target)[0]
    for (method, request, streaming), component, expected in zip(
            reads, ("filer", "volume"), (target.fid.encode(), target.payload), strict=True):
        grpc_port = server.ports[component] + GRPC_OFFSET
        with grpc.secure_channel(f"127.0.0.1:{grpc_port}", credentials) as channel:
            assert expected in _call(channel, method, request, streaming), method

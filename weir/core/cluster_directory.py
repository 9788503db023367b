"""The directory of a local cluster, and the info files through which its processes find
each other.

``weir cluster start --dir DIR`` and the daemons it launches publish who runs where as small
JSON files in ``DIR``; ``weir cluster status|stop``, ``weir run --dir``, the supervisor, the
tests and the benchmarks read them back. This module is the one place that knows their names
and fields:

* ``jobmaster.json`` (:class:`JobMasterInfo`) and ``taskexecutor-N.json``
  (:class:`TaskExecutorInfo`): written by each daemon, atomically, once it listens (the
  ``--info-file`` of ``weir jobmaster``/``weir taskexecutor``; ``weir shuffle-service``
  writes a :class:`ShuffleServiceInfo` the same way). A supervised daemon that is started
  again writes its file again, with its new pid.
* ``cluster.json`` (:class:`ClusterInfo`): what ``start`` launched, written once everything
  runs; ``stop`` removes every info file.
* ``s3.json`` (:class:`S3Info`): the embedded S3 server of ``start --with-s3``.

Readers never fail on a file that is missing or half-written (a daemon being restarted, a
cluster being stopped): they answer None. Fields a reader does not know are ignored, so an
older reader copes with a newer writer.

Example:
    >>> import tempfile
    >>> directory = ClusterDirectory(tempfile.mkdtemp())
    >>> directory.jobmaster() is None
    True
    >>> JobMasterInfo("127.0.0.1:6123", 4242, "http://127.0.0.1:9249/metrics").publish(
    ...     directory.info_file(JOBMASTER))
    >>> directory.jobmaster().address, directory.jobmaster().pid
    ('127.0.0.1:6123', 4242)
    >>> directory.daemon_pid("jobmaster")
    4242
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from weir.core.processes import process_alive

#: Daemon names: the JobMaster's, and the prefix of the TaskExecutors' (``taskexecutor-0``).
JOBMASTER = "jobmaster"
TASKEXECUTOR_PREFIX = "taskexecutor-"
CLUSTER_FILE = "cluster.json"
S3_FILE = "s3.json"
LOG_DIR = "log"
#: Where Spark sources of jobs submitted with ``--dir`` stage their input by default.
STAGING_DIR = "staging"

_TASKEXECUTOR_FILE = re.compile(rf"^{TASKEXECUTOR_PREFIX}(\d+)\.json$")


def publish(path: Path | str, info: Mapping[str, Any]) -> None:
    """Write ``info`` as JSON to ``path`` atomically (a reader sees the old file or the new
    one, never half of one), creating the parent directory. Raises OSError."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(json.dumps(dict(info), indent=2))
    os.replace(tmp, target)


def read_info_file(path: Path | str) -> dict[str, Any] | None:
    """The JSON object in ``path``; None while it is missing, unreadable or half-written.

    Example:
        >>> read_info_file("/nonexistent/jobmaster.json") is None
        True
    """
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    known = cls.__dataclass_fields__  # type: ignore[attr-defined]
    return {k: v for k, v in data.items() if k in known}


@dataclass(frozen=True)
class JobMasterInfo:
    """``jobmaster.json``: where the JobMaster serves (gRPC address, Prometheus URL)."""

    address: str
    pid: int
    metrics_url: str
    role: str = "jobmaster"
    rest_url: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobMasterInfo:
        """Raises KeyError, TypeError or ValueError for a file without these fields."""
        fields = _fields(cls, data)
        return cls(**{**fields, "pid": int(fields["pid"]), "address": str(fields["address"])})

    @classmethod
    def read(cls, path: Path | str) -> JobMasterInfo | None:
        """The info file at ``path``, or None while it is missing or half-written."""
        return _parse(cls, read_info_file(path))

    def publish(self, path: Path | str) -> None:
        publish(path, vars(self))


@dataclass(frozen=True)
class TaskExecutorInfo:
    """``taskexecutor-N.json``: a TaskExecutor's resource id, gRPC and data addresses."""

    resource_id: str
    address: str
    data_address: str
    pid: int
    metrics_url: str
    slots: int
    role: str = "taskexecutor"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskExecutorInfo:
        """Raises KeyError, TypeError or ValueError for a file without these fields."""
        fields = _fields(cls, data)
        return cls(**{**fields, "pid": int(fields["pid"]), "slots": int(fields["slots"]),
                      "resource_id": str(fields["resource_id"])})

    @property
    def data_host_port(self) -> tuple[str, int]:
        """(host, port) of the data plane (shuffle) server.

        Example:
            >>> TaskExecutorInfo("te-0", "127.0.0.1:1", "127.0.0.1:7000", 1, "", 2
            ...                  ).data_host_port
            ('127.0.0.1', 7000)
        """
        host, _, port = self.data_address.rpartition(":")
        return host, int(port)

    @classmethod
    def read(cls, path: Path | str) -> TaskExecutorInfo | None:
        """The info file at ``path``, or None while it is missing or half-written."""
        return _parse(cls, read_info_file(path))

    def publish(self, path: Path | str) -> None:
        publish(path, vars(self))


@dataclass(frozen=True)
class ShuffleServiceInfo:
    """The info file of ``weir shuffle-service --info-file``: its address and data dir."""

    address: str
    pid: int
    dir: str
    role: str = "shuffle-service"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ShuffleServiceInfo:
        fields = _fields(cls, data)
        return cls(**{**fields, "pid": int(fields["pid"])})

    @classmethod
    def read(cls, path: Path | str) -> ShuffleServiceInfo | None:
        """The info file at ``path``, or None while it is missing or half-written."""
        return _parse(cls, read_info_file(path))

    def publish(self, path: Path | str) -> None:
        publish(path, vars(self))


@dataclass(frozen=True)
class ClusterInfo:
    """``cluster.json``: the processes ``weir cluster start`` launched (the daemons and the
    supervisor), when, and the high-availability storage directory (None: off)."""

    pids: tuple[int, ...]
    started: float
    supervisor: int | None = None
    high_availability: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClusterInfo:
        supervisor = data.get("supervisor")
        return cls(tuple(int(p) for p in data.get("pids", ())), float(data.get("started", 0)),
                   int(supervisor) if supervisor else None, data.get("high_availability"))

    def to_json(self) -> dict[str, Any]:
        return {"pids": list(self.pids), "started": self.started,
                "supervisor": self.supervisor, "high_availability": self.high_availability}


@dataclass(frozen=True)
class S3Info:
    """``s3.json``: the embedded S3 server (SeaweedFS) of ``weir cluster start --with-s3``:
    its process, endpoint and ports, data directory and log, the bucket and checkpoint
    location it was started for, and the file holding its credentials (never the secret)."""

    pid: int
    endpoint: str
    data_dir: str
    ports: dict[str, int] = field(default_factory=dict)
    log: str = ""
    bucket: str = ""
    checkpoints: str = ""
    credentials_file: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> S3Info:
        fields = _fields(cls, data)
        return cls(**{**fields, "pid": int(fields.get("pid") or 0),
                      "ports": {str(k): int(v) for k, v in fields.get("ports", {}).items()}})

    def to_json(self) -> dict[str, Any]:
        """The dict form (what :func:`weir.checkpoint.seaweedfs.stop_server` takes)."""
        return {**vars(self), "ports": dict(self.ports)}


_Info = TypeVar("_Info", JobMasterInfo, TaskExecutorInfo, ShuffleServiceInfo, ClusterInfo,
                S3Info)


def _parse(cls: type[_Info], data: Mapping[str, Any] | None) -> _Info | None:
    """``cls`` from ``data``; None for no data, or data without the fields ``cls`` needs."""
    if data is None:
        return None
    try:
        return cls.from_json(data)
    except (KeyError, TypeError, ValueError):
        return None


class ClusterDirectory:
    """Typed access to the files of a local cluster's directory. Reads the files anew on
    every call (processes come and go); never raises for a missing or half-written file.

    Example:
        >>> ClusterDirectory("/tmp/c").info_file("taskexecutor-1").name
        'taskexecutor-1.json'
        >>> ClusterDirectory("/tmp/c").log_file("jobmaster").name
        'jobmaster.log'
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"ClusterDirectory({str(self.path)!r})"

    # -- paths --------------------------------------------------------------------------------

    def info_file(self, name: str) -> Path:
        """The info file of the daemon ``name`` (``jobmaster``, ``taskexecutor-N``)."""
        return self.path / f"{name}.json"

    def log_file(self, name: str) -> Path:
        """The log of the daemon (or other process: ``s3``, ``supervisor``) ``name``."""
        return self.path / LOG_DIR / f"{name}.log"

    @property
    def cluster_file(self) -> Path:
        return self.path / CLUSTER_FILE

    @property
    def s3_file(self) -> Path:
        return self.path / S3_FILE

    @property
    def staging_dir(self) -> Path:
        return self.path / STAGING_DIR

    def info_files(self) -> list[Path]:
        """Every JSON file in the directory (what ``stop`` removes)."""
        return sorted(self.path.glob("*.json"))

    def taskexecutor_files(self) -> list[Path]:
        """The TaskExecutors' info files, by index (``taskexecutor-2`` before ``-10``)."""
        found = [(int(m.group(1)), p) for p in self.path.glob(f"{TASKEXECUTOR_PREFIX}*.json")
                 if (m := _TASKEXECUTOR_FILE.match(p.name))]
        return [p for _, p in sorted(found)]

    # -- what the files say ---------------------------------------------------------------------

    def jobmaster(self) -> JobMasterInfo | None:
        """``jobmaster.json``, or None while there is none (or it is half-written)."""
        return JobMasterInfo.read(self.info_file(JOBMASTER))

    def taskexecutor(self, index: int) -> TaskExecutorInfo | None:
        """``taskexecutor-<index>.json``, or None while there is none."""
        return TaskExecutorInfo.read(self.info_file(f"{TASKEXECUTOR_PREFIX}{index}"))

    def taskexecutors(self) -> dict[str, TaskExecutorInfo]:
        """Daemon name (``taskexecutor-N``) -> info, for every readable TaskExecutor file,
        in index order. The processes may be dead: see :meth:`live_taskexecutors`."""
        found: dict[str, TaskExecutorInfo] = {}
        for path in self.taskexecutor_files():
            info = TaskExecutorInfo.read(path)
            if info is not None:
                found[path.stem] = info
        return found

    def live_taskexecutors(self) -> dict[str, TaskExecutorInfo]:
        """Resource id -> info of every TaskExecutor whose file names a live process."""
        return {info.resource_id: info for info in self.taskexecutors().values()
                if process_alive(info.pid)}

    def taskexecutor_by_resource_id(self, resource_id: str) -> TaskExecutorInfo | None:
        """The TaskExecutor file naming ``resource_id`` (alive or not), if any."""
        return next((info for info in self.taskexecutors().values()
                     if info.resource_id == resource_id), None)

    def cluster(self) -> ClusterInfo | None:
        """``cluster.json``, or None before ``start`` finished (or after ``stop``)."""
        return _parse(ClusterInfo, read_info_file(self.cluster_file))

    def s3(self) -> S3Info | None:
        """``s3.json``, or None without an embedded S3 server."""
        return _parse(S3Info, read_info_file(self.s3_file))

    def daemon_pid(self, name: str) -> int | None:
        """The pid in the info file of daemon ``name`` (``jobmaster``, ``taskexecutor-N``),
        or None while there is none."""
        data = read_info_file(self.info_file(name))
        try:
            return int(data["pid"]) if data is not None else None
        except (KeyError, TypeError, ValueError):
            return None

    def jobmaster_address(self) -> str | None:
        """The JobMaster's address if its file names a live process, else None."""
        info = self.jobmaster()
        return info.address if info is not None and process_alive(info.pid) else None

    def write_cluster(self, info: ClusterInfo) -> None:
        publish(self.cluster_file, info.to_json())

    def write_s3(self, info: S3Info) -> None:
        publish(self.s3_file, info.to_json())

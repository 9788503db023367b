"""How a job program reaches a cluster: pipeline executors and job clients (Flink's
``PipelineExecutor`` and ``JobClient``).

The API (``StreamExecutionEnvironment``) builds a JobGraph and hands it to a
:class:`PipelineExecutor`; the executor — a local mini cluster, or a running JobMaster —
submits it and returns a :class:`JobClient`. Executors live in the client floor
(``weir.client.executors``); the API finds them by name, as Flink's
``PipelineExecutorServiceLoader`` finds executors by ``execution.target``, so it never
imports the floor above it.

Example:
    >>> type(load_executor("remote")).__name__
    'RemoteExecutor'
"""

from __future__ import annotations

import enum
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from weir.core.config import Configuration
from weir.core.errors import InternalError
from weir.proto import jobgraph_pb2

#: Executor names and the classes that implement them.
EXECUTORS = {
    "local": "weir.client.executors.LocalExecutor",
    "remote": "weir.client.executors.RemoteExecutor",
}


@dataclass
class ExecutionContext:
    """Set by ``weir run``: where programs submit their jobs and how."""

    address: str
    token: str | None
    configuration: Configuration
    detached: bool = False
    show_progress: bool = False
    #: The local cluster's directory, when the client found the JobMaster through it.
    cluster_dir: str | None = None
    submitted: list[str] = field(default_factory=list)
    #: ``weir update``: the program replaces this running job instead of being submitted
    #: (its sources are not prepared: the running ones are kept).
    update_job_id: str | None = None
    allow_non_restored_state: bool = False
    #: What the update did (a ``JobChange`` message).
    change: Any = None


class JobStatus(enum.StrEnum):
    """A job's status, as PyFlink names it; equal to the status names weir reports, so
    ``client.get_job_status() == JobStatus.FINISHED`` holds.

    Example:
        >>> JobStatus("FINISHED").is_globally_terminal_state(), JobStatus.RUNNING == "RUNNING"
        (True, True)
    """

    INITIALIZING = "INITIALIZING"
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FAILING = "FAILING"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"
    FINISHED = "FINISHED"
    RESTARTING = "RESTARTING"
    SUSPENDED = "SUSPENDED"
    RECONCILING = "RECONCILING"

    def is_globally_terminal_state(self) -> bool:
        """The job ended for good (finished, failed or cancelled)."""
        return self in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED)

    def is_terminal_state(self) -> bool:
        """The job ended here (suspended counts: another JobMaster may resume it)."""
        return self.is_globally_terminal_state() or self is JobStatus.SUSPENDED


class JobClient(ABC):
    """Handle of a submitted job: status, cancellation, waiting and collected results."""

    job_id: str

    @abstractmethod
    def get_job_status(self) -> str:
        """The job's status name (``RUNNING``, ``FINISHED``, ...)."""

    @abstractmethod
    def cancel(self) -> None:
        """Ask the JobMaster to cancel the job; returns at once."""

    @abstractmethod
    def wait(self, timeout: float | None = None) -> Any:
        """Block until the job ends; raises ``JobExecutionError`` unless it FINISHED."""

    @abstractmethod
    def collect(self, limit: int | None = None) -> Iterator[Any]:
        """Records of the job's collect sink as they arrive; ends when the job finished."""

    @abstractmethod
    def close(self) -> None:
        """Cancel the job if it still runs (an abandoned collect), then release resources."""


class PipelineExecutor(ABC):
    """Runs JobGraphs somewhere."""

    @abstractmethod
    def execute(self, graph: jobgraph_pb2.JobGraph, configuration: Configuration,
                context: ExecutionContext | None,
                on_done: list[Callable[[], None]]) -> JobClient:
        """Submit ``graph``; ``on_done`` runs once when the returned client is done."""


def load_executor(name: str) -> PipelineExecutor:
    """The executor registered under ``name`` (see :data:`EXECUTORS`)."""
    path = EXECUTORS.get(name)
    if path is None:
        msg = f"unknown executor {name!r}; known: {', '.join(EXECUTORS)}"
        raise InternalError(msg)
    module, _, cls = path.rpartition(".")
    return getattr(importlib.import_module(module), cls)()  # type: ignore[no-any-return]

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
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from weir.core.config import Configuration
from weir.core.errors import InternalError
from weir.proto import jobgraph_pb2

T = TypeVar("T")

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


_context: ExecutionContext | None = None


def set_execution_context(context: ExecutionContext | None) -> None:
    """Make ``context`` the cluster this process's environments submit to (None: each
    job runs in process); ``weir run`` sets it before it runs the job program."""
    global _context
    _context = context


def get_execution_context() -> ExecutionContext | None:
    """The context ``weir run`` set, if any (what ``get_execution_environment()`` uses)."""
    return _context


class JobStatus(enum.StrEnum):
    """A job's status, as PyFlink names it; equal to the status names weir reports, so
    ``client.get_job_status().result() == "FINISHED"`` holds.

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


class CompletableFuture(Generic[T]):
    """PyFlink's ``CompletableFuture``, as :class:`JobClient` returns it: ``result()``
    computes the value in the calling thread (once; later calls return it again), so no
    thread waits in the background.

    Example:
        >>> future = CompletableFuture(lambda timeout: 42)
        >>> future.done(), future.result(), future.done()
        (False, 42, True)
        >>> CompletableFuture.completed("x").result()
        'x'
    """

    def __init__(self, compute: Callable[[float | None], T],
                 is_done: Callable[[], bool] | None = None) -> None:
        self._compute = compute
        self._is_done = is_done
        #: (True, value) once computed, (False, error) once the computation raised.
        self._outcome: tuple[Literal[True], T] | tuple[Literal[False], Exception] | None = None

    @staticmethod
    def completed(value: T) -> CompletableFuture[T]:
        future: CompletableFuture[T] = CompletableFuture(lambda timeout: value)
        future._outcome = (True, value)
        return future

    def result(self, timeout: float | None = None) -> T:
        """The value, computed now if it was not (``timeout`` seconds at most, where the
        computation waits); raises what the computation raised."""
        if self._outcome is None:
            self._outcome = self._run(timeout)
        outcome = self._outcome
        if outcome[0]:
            return outcome[1]
        raise outcome[1]

    def _run(self, timeout: float | None
             ) -> tuple[Literal[True], T] | tuple[Literal[False], Exception]:
        try:
            return (True, self._compute(timeout))
        except TimeoutError:
            raise  # not an outcome: a later call may wait longer
        except Exception as err:
            return (False, err)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            self.result(timeout)
        except TimeoutError:
            raise
        except Exception as err:
            return err
        return None

    def done(self) -> bool:
        return self._outcome is not None or bool(self._is_done and self._is_done())

    def cancel(self) -> bool:
        """Futures of jobs cannot be cancelled (cancel the job with ``JobClient.cancel``)."""
        return False

    def cancelled(self) -> bool:
        return False


class JobClient(ABC):
    """Handle of a submitted job: status, cancellation, waiting and collected results.

    PyFlink's methods return :class:`CompletableFuture` s as PyFlink's do
    (``client.get_job_status().result()``); :meth:`wait` and :meth:`collect` are weir's.
    """

    job_id: str

    @abstractmethod
    def status_name(self) -> str:
        """The job's status name now (``RUNNING``, ``FINISHED``, ...)."""

    @abstractmethod
    def cancel_job(self) -> None:
        """Ask the JobMaster to cancel the job; returns at once."""

    @abstractmethod
    def savepoint(self, directory: str | None, terminate: bool, drain: bool) -> str:
        """Take a savepoint (``terminate``: stop the job with it); returns its path."""

    def get_job_id(self) -> str:
        return self.job_id

    def get_job_status(self) -> CompletableFuture[JobStatus]:
        """The job's status (PyFlink: a future; ``.result()`` gives the JobStatus)."""
        return CompletableFuture.completed(JobStatus(self.status_name()))

    def cancel(self) -> CompletableFuture[None]:
        """Ask the JobMaster to cancel the job; the future is done once it accepted."""
        self.cancel_job()
        return CompletableFuture.completed(None)

    def trigger_savepoint(self, savepoint_directory: str | None = None
                          ) -> CompletableFuture[str]:
        """A savepoint of the running job; ``.result()`` takes it and gives its path."""
        return CompletableFuture(lambda timeout: self.savepoint(savepoint_directory, False,
                                                                False))

    def stop_with_savepoint(self, advance_to_end_of_event_time: bool = False,
                            savepoint_directory: str | None = None) -> CompletableFuture[str]:
        """Stop the job with a savepoint (``advance_to_end_of_event_time``: drain, firing
        every event-time timer first); ``.result()`` gives the savepoint's path."""
        return CompletableFuture(lambda timeout: self.savepoint(
            savepoint_directory, True, advance_to_end_of_event_time))

    def get_job_execution_result(self) -> CompletableFuture[Any]:
        """``.result()`` waits for the job and gives its JobExecutionResult (raises
        JobExecutionError unless it finished)."""
        started = time.monotonic()

        def finished(timeout: float | None) -> JobExecutionResult:
            self.wait(timeout)
            return JobExecutionResult(self.job_id, time.monotonic() - started)

        return CompletableFuture(finished, lambda: JobStatus(
            self.status_name()).is_globally_terminal_state())

    def get_accumulators(self) -> CompletableFuture[dict[str, Any]]:
        """weir has no accumulators (user metrics take their place): always empty."""
        return CompletableFuture.completed({})

    @abstractmethod
    def wait(self, timeout: float | None = None) -> Any:
        """Block until the job ends; raises ``JobExecutionError`` unless it FINISHED."""

    @abstractmethod
    def collect(self, limit: int | None = None) -> Iterator[Any]:
        """Records of the job's collect sink as they arrive; ends when the job finished."""

    @abstractmethod
    def close(self) -> None:
        """Cancel the job if it still runs (an abandoned collect), then release resources."""


@dataclass
class JobExecutionResult:
    """What ``execute`` returns.

    Example:
        >>> JobExecutionResult("j1", 1.5).get_net_runtime()
        1500
    """

    job_id: str
    net_runtime_s: float | None = None

    def get_job_id(self) -> str:
        return self.job_id

    def get_net_runtime(self) -> int | None:
        """Milliseconds from submission to the end, as PyFlink gives it (None: detached)."""
        return None if self.net_runtime_s is None else round(self.net_runtime_s * 1000)

    def is_job_execution_result(self) -> bool:
        return True

    def get_job_execution_result(self) -> JobExecutionResult:
        return self

    def get_all_accumulator_results(self) -> dict[str, Any]:
        """weir has no accumulators (user metrics take their place): always empty."""
        return {}

    def get_accumulator_result(self, accumulator_name: str) -> Any:
        """The accumulator's value, None when the job produced none of that name: always
        None, as weir has no accumulators (user metrics take their place)."""
        return self.get_all_accumulator_results().get(accumulator_name)


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

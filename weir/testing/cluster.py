"""A local cluster of real daemon processes, for tests and benchmarks.

:class:`LocalCluster` runs ``weir cluster start`` (a JobMaster and N TaskExecutors, each an
OS process, so ``kill -9`` is a real failure) in a directory of its own and ``weir cluster
stop`` when done; everything it knows about the processes it reads from the cluster
directory (:class:`~weir.core.cluster_directory.ClusterDirectory`). :func:`weir_cli` runs
any ``weir`` command as a user would, :func:`poll` waits for a condition with a deadline.

Example:
    >>> with LocalCluster("/tmp/weir-example", taskexecutors=1) as cluster:  # doctest: +SKIP
    ...     env = cluster.environment()
    ...     print(env.from_collection([1, 2, 3]).map(lambda x: x * 2).execute_and_collect())
    [2, 4, 6]
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from weir.core.cluster_directory import ClusterDirectory

if TYPE_CHECKING:
    from weir.client.cluster_client import JobMasterClient
    from weir.core.execution import ExecutionContext
    from weir.datastream.stream_execution_environment import StreamExecutionEnvironment

#: The checkout a test or benchmark runs from: the daemons it starts import this code.
REPO = Path(__file__).resolve().parents[2]

T = TypeVar("T")


def _in_checkout() -> bool:
    return (REPO / "pyproject.toml").exists() and (REPO / "weir" / "testing").is_dir()


def weir_cli(*args: str, timeout: float = 120, env: Mapping[str, str] | None = None,
             cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m weir ARGS`` in a subprocess, as a user would, and return what it did
    (exit code, stdout, stderr) without checking it. Blocks up to ``timeout`` seconds, then
    raises subprocess.TimeoutExpired. Run from a checkout, the subprocess imports that
    checkout's code.

    Example:
        >>> weir_cli("--help").returncode
        0
    """
    environment = {**os.environ, **(env or {})}
    if _in_checkout():
        environment["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "weir", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=cwd or (REPO if _in_checkout()
                                                                  else None),
                          env=environment, check=False)


def poll(predicate: Callable[[], T], timeout: float, interval: float = 0.05,
         what: str = "condition") -> T:
    """Call ``predicate`` every ``interval`` seconds until it returns something truthy, and
    return that. Raises TimeoutError naming ``what`` after ``timeout`` seconds (the
    predicate is called at least once).

    Example:
        >>> calls = []
        >>> poll(lambda: calls.append(1) or len(calls) >= 3 and len(calls), 5, interval=0)
        3
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            msg = f"timed out after {timeout} s waiting for {what}"
            raise TimeoutError(msg)
        time.sleep(interval)


@contextlib.contextmanager
def _signals_deferred() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM for a moment (while the cluster is being stopped); only the
    main thread may change signal handlers, other threads stop without."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


class ClusterError(RuntimeError):
    """A ``weir`` command against the cluster failed; the message holds its output."""


class LocalCluster:
    """``weir cluster start --dir DIR --taskexecutors N --slots S`` and its ``stop``.

    ``options`` are KEY=VALUE configuration pairs (passed as ``-D``), ``flags`` further
    flags of ``cluster start`` (``--with-s3``, ``--tls``, ``--ha``,
    ``--restart-taskexecutors``). Used as a context manager it starts the cluster and always
    stops it again, also on Ctrl-C or SIGTERM (which it turns into KeyboardInterrupt while
    the block runs). Methods are called from the thread that owns the cluster; the
    read-only ones (:attr:`address`, :attr:`files`, :meth:`taskexecutor_pids`) from any.
    """

    def __init__(self, directory: Path | str, taskexecutors: int = 2, slots: int = 2,
                 options: Iterable[str] = (), flags: Iterable[str] = ()) -> None:
        self.dir = Path(directory)
        self.files = ClusterDirectory(self.dir)
        self.taskexecutors = taskexecutors
        self.slots = slots
        self.options = list(options)
        self.flags = list(flags)
        self._started = False
        self._saved_sigterm: Any = None

    def __repr__(self) -> str:
        return f"LocalCluster({str(self.dir)!r})"

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self, taskexecutors: int | None = None, slots: int | None = None,
              *dynamic: str) -> LocalCluster:
        """Start the cluster; returns once every TaskExecutor registered. ``dynamic`` adds
        KEY=VALUE options or ``--flags`` of ``cluster start`` to the constructor's (and
        ``taskexecutors`` and ``slots`` override its). Raises ClusterError with the
        command's output if the cluster does not start (what did start is stopped by
        ``start`` itself)."""
        if taskexecutors is not None:
            self.taskexecutors = taskexecutors
        if slots is not None:
            self.slots = slots
        for item in dynamic:
            added = self.flags if item.startswith("--") else self.options
            if item not in added:
                added.append(item)
        self._started = True  # from here on, stop() must run even if start fails half-way
        result = weir_cli("cluster", "start", "--dir", str(self.dir), "--taskexecutors",
                          str(self.taskexecutors), "--slots", str(self.slots), *self.flags,
                          *(f"-D{o}" for o in self.options))
        if result.returncode != 0:
            msg = f"weir cluster start failed:\n{result.stdout}{result.stderr}"
            raise ClusterError(msg)
        return self

    def stop_leftover(self) -> None:
        """Stop a cluster a killed run left in the directory (does nothing if none)."""
        if self.files.info_file("jobmaster").exists() or self.files.s3_file.exists() or \
                self.files.cluster_file.exists():
            weir_cli("cluster", "stop", "--dir", str(self.dir), timeout=60)

    def stop(self) -> None:
        """``weir cluster stop``: SIGTERM every process, SIGKILL what lingers. Idempotent;
        SIGINT and SIGTERM wait until it is done (when called on the main thread). Prints a
        warning if it fails."""
        if not self._started and not self.files.cluster_file.exists() and \
                not self.files.info_file("jobmaster").exists():
            return
        self._started = False
        with _signals_deferred():
            result = weir_cli("cluster", "stop", "--dir", str(self.dir), timeout=60)
        if result.returncode != 0 and "no cluster is running" not in result.stderr:
            print(f"warning: weir cluster stop: {result.stderr.strip()}", file=sys.stderr)

    def __enter__(self) -> LocalCluster:
        """Start the cluster, after stopping one a killed run left in the directory."""
        self._saved_sigterm = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        try:
            self.stop_leftover()
            return self.start()
        except BaseException:
            self.stop()
            signal.signal(signal.SIGTERM, self._saved_sigterm)
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.stop()
        finally:
            signal.signal(signal.SIGTERM, self._saved_sigterm)
            from weir.core.execution import set_execution_context

            set_execution_context(None)

    # -- what runs where ------------------------------------------------------------------------

    @property
    def address(self) -> str:
        """The JobMaster's address (read from ``jobmaster.json`` each time: a restarted
        JobMaster may be elsewhere). Raises ClusterError while there is no JobMaster file."""
        info = self.files.jobmaster()
        if info is None:
            msg = f"no JobMaster info file in {self.dir}: is the cluster running?"
            raise ClusterError(msg)
        return info.address

    def jobmaster_pid(self) -> int:
        """The JobMaster's pid; raises ClusterError while there is no JobMaster file."""
        pid = self.files.daemon_pid("jobmaster")
        if pid is None:
            msg = f"no JobMaster info file in {self.dir}: is the cluster running?"
            raise ClusterError(msg)
        return pid

    def taskexecutor_pids(self) -> list[int]:
        """The pids in the TaskExecutors' info files, by index (alive or not)."""
        return [info.pid for info in self.files.taskexecutors().values()]

    def taskexecutor_pid(self, resource_id: str) -> int:
        """The pid of the TaskExecutor ``resource_id``; raises ClusterError if none."""
        info = self.files.taskexecutor_by_resource_id(resource_id)
        if info is None:
            msg = f"no TaskExecutor {resource_id} in {self.dir}"
            raise ClusterError(msg)
        return info.pid

    def taskexecutor_metrics_urls(self) -> list[str]:
        return [info.metrics_url for info in self.files.taskexecutors().values()]

    def kill_taskexecutor(self, index: int = 0, sig: int = signal.SIGKILL) -> int:
        """Send ``sig`` to TaskExecutor ``index``; returns its pid."""
        pid = self.taskexecutor_pids()[index]
        os.kill(pid, sig)
        return pid

    # -- commands -------------------------------------------------------------------------------

    def weir(self, *args: str, timeout: float = 120, check: bool = False,
             env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """``weir COMMAND --dir DIR ARGS...`` against this cluster. With ``check``, raises
        ClusterError (holding the output) when it exits with an error."""
        result = weir_cli(*args[:1], "--dir", str(self.dir), *args[1:], timeout=timeout,
                          env=env)
        if check and result.returncode != 0:
            msg = f"weir {' '.join(args)} failed:\n{result.stdout}{result.stderr}"
            raise ClusterError(msg)
        return result

    def status(self) -> dict[str, Any]:
        """``weir cluster status --json``: pids, addresses, metrics URLs, registrations.
        Raises ClusterError if the command fails."""
        result = weir_cli("cluster", "status", "--dir", str(self.dir), "--json", timeout=60)
        if result.returncode != 0:
            msg = f"weir cluster status failed:\n{result.stdout}{result.stderr}"
            raise ClusterError(msg)
        return json.loads(result.stdout)  # type: ignore[no-any-return]

    def cancel(self, job_id: str) -> None:
        """``weir cancel JOB_ID`` (returns once the JobMaster took the request)."""
        self.weir("cancel", job_id, timeout=60, check=True)

    def client(self, timeout: float = 10) -> JobMasterClient:
        """A gRPC client of the JobMaster (the caller closes it)."""
        from weir.client.cluster_client import JobMasterClient

        return JobMasterClient(self.address, timeout=timeout)

    def execution_context(self, config: Mapping[str, Any] | None = None,
                          token: str | None = None) -> ExecutionContext:
        """What ``weir run --dir DIR`` gives a job program: this cluster's address and
        directory, and the cluster's options plus ``config`` as its configuration (the
        cluster's options reach the client too, e.g. ``security.ssl.*`` for TLS)."""
        from weir.core.config import Configuration
        from weir.core.execution import ExecutionContext

        pairs = dict(o.split("=", 1) for o in self.options)
        pairs.update({k: str(v) for k, v in (config or {}).items()})
        return ExecutionContext(address=self.address, token=token,
                                configuration=Configuration.from_pairs(pairs),
                                cluster_dir=str(self.dir))

    def environment(self, config: Mapping[str, Any] | None = None
                    ) -> StreamExecutionEnvironment:
        """A StreamExecutionEnvironment whose jobs run on this cluster (it sets the
        process's execution context, which ``__exit__`` clears), configured with
        ``config``."""
        from weir.core.execution import set_execution_context
        from weir.datastream.stream_execution_environment import StreamExecutionEnvironment

        set_execution_context(self.execution_context())
        env = StreamExecutionEnvironment.get_execution_environment()
        if config:
            env.configure(dict(config))
        return env

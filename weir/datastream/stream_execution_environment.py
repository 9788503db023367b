"""``StreamExecutionEnvironment`` (PyFlink's ``pyflink.datastream.stream_execution_environment``):
where a job program builds its graph and runs it.

Run by ``weir run job.py``, the environment submits to that cluster's JobMaster. Run as a
plain ``python job.py``, it starts an in-process mini cluster (a JobMaster and one
TaskExecutor with as many slots as the job needs) for the duration of the job.

Example:
    >>> from weir import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> env.set_parallelism(2).get_parallelism()
    2
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from weir.checkpoint import options as checkpoint_options
from weir.checkpoint.storage import check_storage
from weir.common.execution_config import ExecutionConfig, warn_no_serializers
from weir.common.restart_strategy import RestartStrategyConfiguration
from weir.common.watermark_strategy import WatermarkStrategy
from weir.core import options
from weir.core.config import Configuration
from weir.core.errors import InvalidJobError, UserError
from weir.core.execution import (
    ExecutionContext,
    JobClient,
    JobExecutionResult,
    get_execution_context,
    load_executor,
)
from weir.core.ids import new_job_id
from weir.core.source import Source
from weir.core.types import TypeInformation
from weir.datastream.checkpoint_config import CheckpointConfig
from weir.datastream.checkpointing_mode import CheckpointingMode
from weir.datastream.connectors.base import PreparedSource
from weir.datastream.connectors.collection import CollectionSource
from weir.datastream.connectors.file_system import FileSource, StreamFormat
from weir.datastream.connectors.number_seq import SequenceSource
from weir.datastream.connectors.spark import claim_staging
from weir.datastream.data_stream import DataStream
from weir.datastream.execution_mode import RuntimeExecutionMode
from weir.datastream.graph import Transformation, build_job_graph, execution_plan
from weir.datastream.python_files import ship_python_file
from weir.datastream.slot_sharing_group import SlotSharingGroup, warn_no_effect
from weir.datastream.state_backend import StateBackend, state_backend_named
from weir.datastream.time_characteristic import TimeCharacteristic
from weir.proto import jobgraph_pb2
from weir.state import options as state_options
from weir.unsupported import DEPS, JAVA, refuse

if TYPE_CHECKING:  # pyspark is imported lazily, on the client only
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["StreamExecutionEnvironment"]

#: PyFlink's methods weir has no such thing for -> why.
_UNSUPPORTED_METHODS = {
    "create_input": JAVA,
    "add_python_archive": DEPS, "set_python_requirements": DEPS,
    "register_cached_file": "the distributed cache does not exist in weir: read shared "
                            "files from a path every TaskExecutor sees",
    "from_data_stream": "the Table API does not exist in weir",
}


def _same(record: Any) -> Any:
    """The record unchanged: ``from_source(..., type_info)`` re-types it."""
    return record


def _pairs(configuration: Configuration | Mapping[str, Any]) -> dict[str, Any]:
    """Option key -> value of a Configuration (PyFlink passes one) or a plain mapping. A
    Configuration's keys of no weir option (PyFlink's Python worker settings, say) are
    left out with a warning naming them; in a plain mapping they are errors."""
    if isinstance(configuration, Configuration):
        others = configuration.other_keys()
        if others:
            warnings.warn(f"weir has no option {', '.join(map(repr, sorted(others)))}: "
                          f"ignored (see the README's configuration reference)",
                          UserWarning, stacklevel=3)
        return configuration.options_dict()
    if isinstance(configuration, Mapping):
        return dict(configuration)
    msg = f"expected a Configuration or a dict of option keys, got {type(configuration).__name__}"
    raise TypeError(msg)


@contextlib.contextmanager
def _serializer_setting(method: str) -> Iterator[None]:
    """Record a serializer setting in the ExecutionConfig, warning once, as ``method``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield
    warn_no_serializers(method, stacklevel=5)


def _no_jvm(method: str, paths: tuple[str, ...]) -> None:
    warnings.warn(f"{method}({', '.join(map(repr, paths))}) has no effect: weir runs no "
                  f"JVM, so jars are not used", UserWarning, stacklevel=3)


class StreamExecutionEnvironment:
    """Builds a job graph and executes it on a cluster."""

    #: PyFlink's methods this class refuses, with why (read by ``weir.docgen``).
    __unsupported__ = _UNSUPPORTED_METHODS

    def __init__(self, configuration: Configuration | Mapping[str, Any] | None = None,
                 context: ExecutionContext | None = None) -> None:
        self._context = context
        base = context.configuration if context else Configuration()
        self._config = base.merged(_pairs(configuration)) if configuration else base
        self._parallelism = self._config.get(options.PARALLELISM)
        if context is None and not self._config.contains(options.PARALLELISM):
            # In process, as PyFlink's local environment: a subtask per CPU core.
            self._parallelism = os.cpu_count() or 1
        self._max_parallelism = self._config.get(options.MAX_PARALLELISM)
        self._sinks: list[Transformation] = []
        # One of each per environment: they keep the settings weir accepts without options.
        self._execution_config = ExecutionConfig(self)
        self._checkpoint_config = CheckpointConfig(self._config)

    @staticmethod
    def get_execution_environment(
            configuration: Configuration | Mapping[str, Any] | None = None
    ) -> StreamExecutionEnvironment:
        """The environment for this program: the cluster of ``weir run``, else in-process.
        ``configuration`` (a Configuration or a dict of option keys) goes on top of the
        cluster's."""
        return StreamExecutionEnvironment(configuration, get_execution_context())

    # -- settings ---------------------------------------------------------------------------

    def set_parallelism(self, parallelism: int) -> StreamExecutionEnvironment:
        if parallelism < 1:
            msg = f"parallelism must be at least 1, got {parallelism}"
            raise ValueError(msg)
        self._parallelism = parallelism
        return self

    def get_parallelism(self) -> int:
        return self._parallelism

    def set_max_parallelism(self, max_parallelism: int) -> StreamExecutionEnvironment:
        if not 1 <= max_parallelism <= 32768:
            msg = f"max parallelism must be between 1 and 32768, got {max_parallelism}"
            raise ValueError(msg)
        self._max_parallelism = max_parallelism
        return self

    def get_max_parallelism(self) -> int:
        return self._max_parallelism

    def set_runtime_mode(self, execution_mode: RuntimeExecutionMode | str
                         ) -> StreamExecutionEnvironment:
        """STREAMING, BATCH or AUTOMATIC (BATCH when every source is bounded)."""
        mode = execution_mode.name if isinstance(execution_mode, RuntimeExecutionMode) \
            else execution_mode
        self._config.set_raw(options.RUNTIME_MODE.key, str(mode).upper())
        return self

    def get_config(self) -> ExecutionConfig:
        """PyFlink's ExecutionConfig (auto-watermark interval, parallelism)."""
        return self._execution_config

    def set_stream_time_characteristic(self, characteristic: TimeCharacteristic
                                       ) -> StreamExecutionEnvironment:
        """Deprecated, as in Flink since 1.12: accepted and ignored (event time applies
        wherever watermarks are assigned)."""
        warnings.warn("set_stream_time_characteristic is deprecated and has no effect: "
                      "event time applies where timestamps and watermarks are assigned",
                      DeprecationWarning, stacklevel=2)
        self._config.set(options.TIME_CHARACTERISTIC, characteristic.name)
        return self

    def add_python_file(self, file_path: str) -> None:
        """Ship Python source with the job, as PyFlink does: a ``.py`` module, a package
        directory, or a directory of modules. The job's functions may import it although
        no TaskExecutor has it installed: it travels with them, by value (see
        :mod:`weir.datastream.python_files`)."""
        ship_python_file(file_path)

    def set_python_executable(self, python_exec: str) -> None:
        """Accepted and ignored, with a warning: a TaskExecutor runs user functions in the
        Python it was started with (``weir taskexecutor``)."""
        warnings.warn(f"set_python_executable({python_exec!r}) has no effect: TaskExecutors "
                      f"run user functions in the Python they were started with",
                      UserWarning, stacklevel=2)

    def register_slot_sharing_group(self, slot_sharing_group: SlotSharingGroup
                                    ) -> StreamExecutionEnvironment:
        """Accepted, without effect (see :mod:`weir.datastream.slot_sharing_group`)."""
        warn_no_effect(f"register_slot_sharing_group({slot_sharing_group.get_name()!r})")
        return self

    def add_default_kryo_serializer(self, type_class_name: Any,
                                    serializer_class_name: Any) -> None:
        """Accepted, without effect (records travel as Arrow columns or pickles)."""
        with _serializer_setting("add_default_kryo_serializer"):
            self.get_config().add_default_kryo_serializer(type_class_name,
                                                          serializer_class_name)

    def register_type_with_kryo_serializer(self, type_class_name: Any,
                                           serializer_class_name: Any) -> None:
        """Accepted, without effect (records travel as Arrow columns or pickles)."""
        with _serializer_setting("register_type_with_kryo_serializer"):
            self.get_config().register_type_with_kryo_serializer(type_class_name,
                                                                 serializer_class_name)

    def register_type(self, type_class_name: Any) -> None:
        """Accepted, without effect (records travel as Arrow columns or pickles)."""
        with _serializer_setting("register_type"):
            self.get_config().register_pojo_type(type_class_name)

    def add_jars(self, *jars_path: str) -> None:
        """Accepted and ignored, with a warning: weir runs no JVM, so there is nothing to
        put jars on. A Java connector the jars were for fails on its own, at import."""
        _no_jvm("add_jars", jars_path)

    def add_classpaths(self, *classpaths: str) -> None:
        """Accepted and ignored, with a warning (see :meth:`add_jars`)."""
        _no_jvm("add_classpaths", classpaths)

    def enable_changelog_state_backend(self, enabled: bool) -> StreamExecutionEnvironment:
        """Turn the changelog state backend on or off (``state.changelog.enabled``): every
        keyed state change is also written to a log uploaded continuously, so a checkpoint
        uploads little, whatever the state backend.

        Example:
            >>> env = StreamExecutionEnvironment.get_execution_environment()
            >>> env.enable_changelog_state_backend(True).is_changelog_state_backend_enabled()
            True
        """
        self._config.set(state_options.CHANGELOG_ENABLED, bool(enabled))
        return self

    def is_changelog_state_backend_enabled(self) -> bool | None:
        """Whether the job turned the changelog state backend on or off; None (PyFlink's
        answer) when it did not choose (``state.changelog.enabled``)."""
        if not self._config.contains(state_options.CHANGELOG_ENABLED):
            return None
        return bool(self._config.get(state_options.CHANGELOG_ENABLED))

    def get_stream_time_characteristic(self) -> TimeCharacteristic:
        return TimeCharacteristic[self._config.get(options.TIME_CHARACTERISTIC)]

    def set_buffer_timeout(self, timeout_ms: int) -> StreamExecutionEnvironment:
        self._config.set_raw(options.BUFFER_TIMEOUT.key, f"{timeout_ms} ms")
        return self

    def get_buffer_timeout(self) -> int:
        return round(float(self._config.get(options.BUFFER_TIMEOUT)) * 1000)

    def disable_operator_chaining(self) -> StreamExecutionEnvironment:
        """Run every operator as a task of its own (no chaining,
        ``pipeline.operator-chaining.enabled``)."""
        self._config.set(options.OPERATOR_CHAINING, False)
        return self

    def is_chaining_enabled(self) -> bool:
        return self._config.get(options.OPERATOR_CHAINING)

    def set_state_backend(self, state_backend: StateBackend) -> StreamExecutionEnvironment:
        """HashMapStateBackend() or EmbeddedRocksDBStateBackend(...) (``state.backend.*``)."""
        if not isinstance(state_backend, StateBackend):
            msg = ("set_state_backend takes weir.HashMapStateBackend() or "
                   f"weir.EmbeddedRocksDBStateBackend(), got {type(state_backend).__name__}")
            raise InvalidJobError(msg)
        self.configure(state_backend.options())
        self._state_backend = state_backend
        return self

    def get_state_backend(self) -> StateBackend | None:
        """The state backend set, or the one configured (``state.backend.type``, or Flink's
        ``state.backend``: ``jobmanager`` is a MemoryStateBackend); None when neither."""
        configured = self._config.get_string(state_options.BACKEND_TYPE.key, "")
        backend: StateBackend | None = getattr(self, "_state_backend", None)
        if not configured or (backend is not None and backend.type_name
                              == self._config.get(state_options.BACKEND_TYPE)):
            return backend
        return state_backend_named(configured)

    def set_restart_strategy(self, restart_strategy_configuration: RestartStrategyConfiguration
                             ) -> StreamExecutionEnvironment:
        """A RestartStrategies.* configuration (``restart-strategy.*``)."""
        self.configure(restart_strategy_configuration.options())
        self._restart_strategy = restart_strategy_configuration
        return self

    def get_restart_strategy(self) -> RestartStrategyConfiguration | None:
        configuration: RestartStrategyConfiguration | None = getattr(
            self, "_restart_strategy", None)
        return configuration

    def set_default_savepoint_directory(self, directory: str) -> StreamExecutionEnvironment:
        """Where savepoints go by default (``execution.checkpointing.savepoint-dir``)."""
        self._config.set_raw("execution.checkpointing.savepoint-dir", directory)
        return self

    def get_default_savepoint_directory(self) -> str | None:
        return self._config.to_dict().get("execution.checkpointing.savepoint-dir")

    def set_default_local_parallelism(self, parallelism: int) -> StreamExecutionEnvironment:
        """The parallelism of jobs run in process (``python job.py``): as set_parallelism."""
        return self.set_parallelism(parallelism)

    def get_default_local_parallelism(self) -> int:
        return self.get_parallelism()

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self.get_checkpoint_config().is_unaligned_checkpoints_enabled()

    def get_execution_plan(self) -> str:
        """The job's operators as JSON, in Flink's execution-plan format: ``nodes`` with
        ``id``, ``type``, ``pact``, ``contents``, ``parallelism`` and ``predecessors``
        (``id``, ``ship_strategy``: FORWARD, REBALANCE, SHUFFLE, RESCALE, HASH or
        BROADCAST); weir adds each operator's ``uid`` and ``task``, the chain it runs in."""
        graph = self.get_job_graph()
        return json.dumps(execution_plan(graph, self._sinks), indent=2)

    def close(self) -> None:
        """Nothing to release: each execution's resources end with it."""

    def __getattr__(self, name: str) -> NoReturn:
        refuse(type(self).__name__, name, self.__unsupported__)

    # -- checkpoints ---------------------------------------------------------------------

    def enable_checkpointing(self, interval: int,
                             mode: CheckpointingMode | None = None) -> StreamExecutionEnvironment:
        """Checkpoint every ``interval`` milliseconds (``mode``: EXACTLY_ONCE by default).
        Checkpoints go to ``state.checkpoints.dir`` (a local cluster sets one)."""
        config = self.get_checkpoint_config()
        config.set_checkpoint_interval(interval)
        if mode is not None:
            config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_config(self) -> CheckpointConfig:
        """Checkpoint settings of this environment's jobs (PyFlink's ``CheckpointConfig``)."""
        return self._checkpoint_config

    def get_checkpoint_interval(self) -> int:
        """Milliseconds between checkpoints; -1 when checkpointing is off."""
        return self.get_checkpoint_config().get_checkpoint_interval()

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self.get_checkpoint_config().get_checkpointing_mode()

    def configure(self, configuration: Configuration | Mapping[str, Any]
                  ) -> StreamExecutionEnvironment:
        """Set options for jobs of this environment: a Configuration (PyFlink's argument)
        or a dict such as ``{"pipeline.batch-size": 8192}``."""
        for key, value in _pairs(configuration).items():
            self._config.set_raw(key, value)
        return self

    def get_configuration(self) -> Configuration:
        return self._config

    # -- sources ----------------------------------------------------------------------------

    def from_source(self, source: Source | PreparedSource | str,
                    watermark_strategy: WatermarkStrategy | str | None = None,
                    source_name: str | None = None, type_info: TypeInformation | None = None,
                    *, format: str = "parquet",
                    monitor_interval: float | None = None) -> DataStream:
        """Read a FLIP-27 Source, or files under a path (Parquet, CSV or JSON lines).

        As in PyFlink, ``from_source(source, watermark_strategy, source_name)`` stamps the
        records and generates watermarks right at the source; the name alone may also be
        given second. ``type_info`` declares the records' type (a ``Types.ROW_NAMED`` makes
        them Rows with those fields). ``monitor_interval`` (seconds) keeps watching a
        directory for new files. A relative path means this process's working directory; at
        submission a bounded path must match at least one file and a watched directory must
        exist.
        """
        if isinstance(watermark_strategy, str):
            watermark_strategy, source_name = None, watermark_strategy
        if isinstance(source, str):
            source = FileSource(source, format=format, monitor_interval=monitor_interval)
        name = source_name or f"Source: {getattr(source, 'name', type(source).__name__)}"
        t = Transformation(name=name, kind="source", source=source)
        stream = DataStream(self, t)
        if type_info is not None:
            stream = stream.map(_same, output_type=type_info).name(f"{name}: {type_info}")
        if watermark_strategy is not None:
            stream = stream.assign_timestamps_and_watermarks(watermark_strategy)
        return stream

    def add_source(self, source_func: Source | PreparedSource, source_name: str = "Custom Source",
                   type_info: TypeInformation | None = None) -> DataStream:
        """PyFlink's ``add_source``, for a weir Source (FLIP-27 style)."""
        if not isinstance(source_func, Source | PreparedSource):
            msg = (f"add_source takes a weir Source, got {type(source_func).__name__}: "
                   "PyFlink's Java source functions (FlinkKafkaConsumer and the like) do not "
                   "exist in weir; read files with from_source(path), Spark with "
                   "from_spark(...), or implement weir.Source")
            raise InvalidJobError(msg)
        return self.from_source(source_func, source_name=source_name, type_info=type_info)

    def read_text_file(self, file_path: str, charset_name: str = "UTF-8") -> DataStream:
        """The lines of a text file (or of every file under a directory, hidden ones
        skipped), as strings; a large file is read in parallel (byte ranges aligned to line
        ends)."""
        text = StreamFormat.text_line_format(charset_name)
        return self.from_source(FileSource(file_path, format=text.format))

    def from_collection(self, collection: Iterable[Any],
                        type_info: TypeInformation | None = None) -> DataStream:
        """The items of a collection, in order (parallelism 1)."""
        return self.from_source(CollectionSource(list(collection), type_info),
                                source_name="Source: Collection")

    def from_sequence(self, start: int, end: int) -> DataStream:
        """The numbers ``start..end`` inclusive, read in parallel."""
        return self.from_source(SequenceSource(start, end), source_name="Source: Sequence")

    def from_spark(self, query: Callable[[SparkSession], DataFrame], *, streaming: bool = False,
                   staging: str | None = None, name: str | None = None) -> DataStream:
        """Records prepared by PySpark: ``query(spark) -> DataFrame``.

        Batch: Spark runs the query once, on the client, and writes Parquet splits to the
        staging location; the job reads them. Streaming: ``query`` returns a streaming
        DataFrame; every micro-batch becomes a split while the job runs.
        """
        from weir.datastream.connectors.spark import SparkSource

        source = SparkSource(query, streaming=streaming, staging=staging)
        label = getattr(query, "__name__", "query")
        return self.from_source(source, source_name=name or f"Source: Spark ({label})")

    # -- execution --------------------------------------------------------------------------

    def _add_sink(self, t: Transformation) -> None:
        self._sinks.append(t)

    def _transformations(self) -> list[Transformation]:
        """Every transformation the sinks read from, each once."""
        seen: dict[int, Transformation] = {}
        stack = list(self._sinks)
        while stack:
            t = stack.pop()
            if t.id not in seen:
                seen[t.id] = t
                stack.extend(t.inputs)
        return list(seen.values())

    def _prepare_sources(self) -> list[Callable[[], None]]:
        cleanups: list[Callable[[], None]] = []
        for t in self._transformations():
            if t.kind == "source" and isinstance(t.source, PreparedSource):
                try:
                    t.source, cleanup = t.source.prepare(self._config)
                except BaseException:
                    for done in cleanups:
                        done()
                    raise
                cleanups.append(cleanup)
        return cleanups

    def get_job_graph(self, job_name: str | None = None) -> jobgraph_pb2.JobGraph:
        """The JobGraph of what was built so far (sources are not prepared)."""
        config = self._config.options_dict()
        program = getattr(sys.modules.get("__main__"), "__file__", None)
        if program and options.PROGRAM_FILE.key not in config:
            config[options.PROGRAM_FILE.key] = os.path.abspath(program)
        mode = self._config.get(options.RUNTIME_MODE)
        if mode == "AUTOMATIC":
            bounded = all(getattr(t.source, "bounded", True) for t in self._transformations()
                          if t.kind == "source")
            mode = config[options.RUNTIME_MODE.key] = "BATCH" if bounded else "STREAMING"
        if mode == "BATCH":
            self._check_bounded()
        return build_job_graph(
            self._sinks, job_id=new_job_id(), job_name=job_name or "weir job",
            default_parallelism=self._parallelism,
            default_max_parallelism=self._max_parallelism, config=config,
            chaining=self.is_chaining_enabled())

    def _check_source_paths(self) -> None:
        """Refuse file sources whose paths match nothing here, before anything is
        submitted: a job that reads nothing would otherwise finish with 0 rows."""
        for t in self._transformations():
            if t.kind == "source" and isinstance(t.source, FileSource):
                t.source.check_paths(self._config)

    def _check_checkpoint_storage(self) -> None:
        """With checkpointing on, refuse a ``state.checkpoints.dir`` the job could never
        write (relative path, unreachable S3 endpoint, refused credentials, no bucket)
        before submitting: the job would start, then fail at its first checkpoint."""
        if not checkpoint_options.checkpointing_enabled(self._config):
            return
        directory = self._config.get(checkpoint_options.CHECKPOINTS_DIR)
        if not directory:
            return  # the cluster's own setting applies, which this process cannot know
        try:
            check_storage(directory, self._config)
        except UserError as err:
            msg = f"state.checkpoints.dir {directory} cannot be used: {err}"
            raise type(err)(msg) from err

    def _check_bounded(self) -> None:
        for t in self._transformations():
            if t.kind == "source" and not getattr(t.source, "bounded", True):
                msg = (f"source '{t.name}' is unbounded, but execution.runtime-mode is BATCH: "
                       "use a bounded source or the STREAMING mode")
                raise InvalidJobError(msg)

    def execute_async(self, job_name: str | None = None) -> JobClient:
        """Submit the job and return at once with a JobClient."""
        if not self._sinks:
            msg = ("the job defines no sink: add one (print(), sink_to(...), or "
                   "execute_and_collect()) before calling execute()")
            raise InvalidJobError(msg)
        # Cheap checks first: preparing a source may run a whole Spark job.
        self._check_source_paths()
        self._check_checkpoint_storage()
        # An update keeps the running job's sources: preparing them again (a Spark job)
        # is what a hot update saves.
        updating = self._context is not None and self._context.update_job_id
        cleanups = [] if updating else self._prepare_sources()
        try:
            graph = self.get_job_graph(job_name)
            # Staged Spark data is the JobMaster's to delete once it has the job.
            staging = claim_staging(graph, (t.source for t in self._transformations()),
                                    self._config)
            self._sinks = []
            executor = load_executor("local" if self._context is None else "remote")
            job = executor.execute(graph, self._config, self._context,
                                   list(reversed(cleanups)))
            staging.submitted()
            return job
        except BaseException:
            for cleanup in reversed(cleanups):
                cleanup()
            raise

    def execute(self, job_name: str | None = None) -> JobExecutionResult:
        """Run the job; returns when it finished (at once with ``weir run --detached``)."""
        started = time.monotonic()
        job = self.execute_async(job_name)
        if self._context is not None and self._context.detached:
            return JobExecutionResult(job.job_id)
        job.wait()
        return JobExecutionResult(job.job_id, time.monotonic() - started)

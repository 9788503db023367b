"""An in-process cluster (a JobMaster and TaskExecutors as objects, talking real gRPC on
loopback), used when a job program runs without ``weir run``, and by fast tests.

Example:
    >>> from weir.client.minicluster import MiniCluster
    >>> cluster = MiniCluster(num_slots=2)
    >>> cluster.num_slots
    2
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from weir.checkpoint import options as checkpoint_options
from weir.core.config import Configuration
from weir.core.errors import InternalError

if TYPE_CHECKING:
    from weir.jobmaster.daemon import JobMaster
    from weir.taskexecutor.daemon import TaskExecutor


class MiniCluster:
    """JobMaster + ``num_task_executors`` TaskExecutors in this process."""

    def __init__(self, num_slots: int = 1, num_task_executors: int = 1,
                 configuration: Configuration | None = None) -> None:
        self.num_slots = num_slots
        self.num_task_executors = num_task_executors
        base = configuration.options_dict() if configuration else {}
        overrides = {"jobmaster.rpc.port": "0", "metrics.reporter.prom.port": "0",
                     "rest.port": "0",
                     "taskmanager.rpc.port": "0", "taskmanager.data.port": "0"}
        self.configuration = Configuration.from_pairs({**base, **overrides})
        self.jobmaster: JobMaster | None = None
        self.task_executors: list[TaskExecutor] = []
        self._working_dir: str | None = None

    @property
    def address(self) -> str:
        assert self.jobmaster is not None
        return self.jobmaster.address

    def start(self, timeout: float = 30.0) -> MiniCluster:
        from weir.jobmaster.daemon import JobMaster
        from weir.taskexecutor.daemon import TaskExecutor

        # The working directories live as long as this cluster (nothing restarts in it).
        self._working_dir = tempfile.mkdtemp(prefix="weir-mini-")
        if not self.configuration.get(checkpoint_options.CHECKPOINTS_DIR):
            # Flink's local environment keeps checkpoints in the JobManager's memory when
            # no storage is set; here they go where the cluster's other files go.
            self.configuration = self.configuration.merged({
                checkpoint_options.CHECKPOINTS_DIR.key:
                    Path(self._working_dir, "checkpoints").as_uri()})
        try:
            jobmaster = self.jobmaster = JobMaster(self.configuration)
            jobmaster.start()
            for i in range(self.num_task_executors):
                conf = self.configuration.merged({
                    "taskmanager.resource-id": f"mini-te-{i}",
                    "process.taskmanager.working-dir": f"{self._working_dir}/te-{i}"})
                te = TaskExecutor(jobmaster.address, conf, num_slots=self.num_slots)
                te.start()
                self.task_executors.append(te)
            for te in self.task_executors:
                if not te.wait_registered(timeout):
                    msg = f"mini cluster TaskExecutor {te.resource_id} did not register"
                    raise InternalError(msg)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.jobmaster is not None and self.task_executors:
            self.jobmaster.expect_taskexecutors_to_stop()
        for te in self.task_executors:
            te.stop()
        self.task_executors.clear()
        if self.jobmaster is not None:
            self.jobmaster.stop()
            self.jobmaster = None
        if self._working_dir is not None:
            shutil.rmtree(self._working_dir, ignore_errors=True)
            self._working_dir = None

    def __enter__(self) -> MiniCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

"""The executors ``StreamExecutionEnvironment.execute`` runs jobs with.

``remote`` submits to the JobMaster that ``weir run`` found (the execution context);
``local`` starts an in-process mini cluster sized for the job and stops it when the job is
done.
"""

from __future__ import annotations

from collections.abc import Callable

from weir.client.cluster_client import ClusterJobClient, JobMasterClient
from weir.client.minicluster import MiniCluster
from weir.core import options
from weir.core.config import Configuration
from weir.core.errors import InternalError
from weir.core.execution import ExecutionContext, JobClient, PipelineExecutor
from weir.core.ids import JobId
from weir.core.secrets import auth_token
from weir.core.tls import TlsFiles
from weir.proto import jobgraph_pb2


class RemoteExecutor(PipelineExecutor):
    """Submits to the JobMaster of the execution context."""

    def execute(self, graph: jobgraph_pb2.JobGraph, configuration: Configuration,
                context: ExecutionContext | None,
                on_done: list[Callable[[], None]]) -> JobClient:
        if context is None:
            msg = "the remote executor needs an execution context (weir run sets one)"
            raise InternalError(msg)
        client = JobMasterClient(context.address,
                                 context.token or auth_token(configuration),
                                 configuration.get(options.CLIENT_TIMEOUT),
                                 tls=TlsFiles.from_conf(context.configuration))
        if context.update_job_id:
            job_id = JobId(context.update_job_id)
            context.change = client.update_job(job_id, graph,
                                               context.allow_non_restored_state)
        else:
            job_id = client.submit_job(graph)
        context.submitted.append(job_id)
        return ClusterJobClient(client, job_id, on_done=on_done,
                                show_progress=context.show_progress)


class LocalExecutor(PipelineExecutor):
    """Runs the job on a mini cluster in this process, with as many slots as it needs."""

    def execute(self, graph: jobgraph_pb2.JobGraph, configuration: Configuration,
                context: ExecutionContext | None,
                on_done: list[Callable[[], None]]) -> JobClient:
        slots = max(v.parallelism for v in graph.vertices)
        cluster = MiniCluster(num_slots=slots, configuration=configuration)
        cluster.start()
        try:
            client = JobMasterClient(cluster.address, auth_token(configuration),
                                     configuration.get(options.CLIENT_TIMEOUT),
                                     tls=TlsFiles.from_conf(configuration))
            job_id = client.submit_job(graph)
        except BaseException:
            cluster.stop()
            raise
        return ClusterJobClient(client, job_id, on_done=[cluster.stop, *on_done])

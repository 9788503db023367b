"""The control plane's services: the JobMaster serves the JobMasterGateway (TaskExecutors)
and the Dispatcher (clients); its operations raise domain errors, which become status
codes in one place; the TaskExecutor's servicer does the same for its own. The operations
are called directly and a recording context stands in for gRPC's; the only sockets are an
empty gRPC server for a registering TaskExecutor's address, which registration dials."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from weir.checkpoint.barrier import CheckpointBarrier
from weir.core.config import Configuration
from weir.core.errors import (
    ConfigError,
    InternalError,
    InvalidJobError,
    JobNotFoundError,
    StorageError,
    UserError,
    WeirError,
)
from weir.core.rpc import SMALL_MESSAGE_BYTES, create_server
from weir.jobmaster import dispatcher_servicer, gateway_servicer
from weir.jobmaster.daemon import JobMaster, request_limits
from weir.jobmaster.errors import (
    JobChangeFailedError,
    JobExistsError,
    JobNotStoredError,
    OperationTimeoutError,
    SavepointFailedError,
    SavepointNotDisposedError,
    SnapshotUnreadableError,
    SplitEnumeratorError,
    TaskExecutorNotRegisteredError,
)
from weir.jobmaster.job_change import JobChangeRefusedError
from weir.jobmaster.job_recovery import UnrecoverableJobError
from weir.jobmaster.jobgraph_validation import JobGraphValidationError
from weir.jobmaster.resource_manager import DuplicateTaskExecutorError
from weir.jobmaster.savepoints import SnapshotMismatchError
from weir.jobmaster.status_codes import STATUS_CODES, domain_errors, status_code
from weir.proto import (
    checkpoint_pb2,
    dispatcher_pb2,
    jobgraph_pb2,
    jobmaster_pb2,
    taskexecutor_pb2,
)
from weir.taskexecutor.daemon import (
    SlotNotFoundError,
    TaskExecutor,
    TaskExecutorServicer,
    TaskNotFoundError,
)

GATEWAY_RPCS = {"RegisterTaskExecutor", "Heartbeat", "UpdateTaskExecutionState",
                "RequestSplits", "PushCollectBatch", "AcknowledgeCheckpoint",
                "DeclineCheckpoint", "ReportEndOfData", "DisconnectTaskExecutor"}
DISPATCHER_RPCS = {"SubmitJob", "ListJobs", "GetJobDetails", "CancelJob",
                   "FetchCollectResults", "GetClusterOverview", "GetCheckpoints",
                   "TriggerSavepoint", "DisposeSavepoint", "RescaleJob", "UpdateJob"}


class AbortedError(Exception):
    """What the recording context raises on abort, as gRPC's does."""


class RecordingContext:
    """Stands in for grpc.ServicerContext: records the status a handler ended with."""

    def __init__(self) -> None:
        self.code: grpc.StatusCode | None = None
        self.details = ""

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.code, self.details = code, details
        raise AbortedError(details)


# -- the services ----------------------------------------------------------------------------


def test_each_audience_has_its_own_service():
    gateway = jobmaster_pb2.DESCRIPTOR.services_by_name["JobMasterGateway"]
    dispatcher = dispatcher_pb2.DESCRIPTOR.services_by_name["Dispatcher"]
    assert {m.name for m in gateway.methods} == GATEWAY_RPCS
    assert {m.name for m in dispatcher.methods} == DISPATCHER_RPCS
    assert set(jobmaster_pb2.DESCRIPTOR.services_by_name) == {"JobMasterGateway"}
    assert set(dispatcher_pb2.DESCRIPTOR.services_by_name) == {"Dispatcher"}
    # Each servicer implements every RPC of its service.
    for servicer, rpcs in ((gateway_servicer.JobMasterGatewayServicer, GATEWAY_RPCS),
                           (dispatcher_servicer.DispatcherServicer, DISPATCHER_RPCS)):
        assert all(name in vars(servicer) for name in rpcs), servicer


def test_only_bulk_rpcs_keep_the_servers_receive_limit():
    limits = request_limits()
    paths = {f"/weir.JobMasterGateway/{m}" for m in GATEWAY_RPCS} | \
        {f"/weir.Dispatcher/{m}" for m in DISPATCHER_RPCS}
    unbounded = {"/weir.Dispatcher/SubmitJob", "/weir.Dispatcher/UpdateJob",
                 "/weir.JobMasterGateway/PushCollectBatch"}
    assert set(limits) == paths - unbounded
    assert limits["/weir.JobMasterGateway/AcknowledgeCheckpoint"] == \
        gateway_servicer.ACKNOWLEDGE_MESSAGE_BYTES
    assert {limit for path, limit in limits.items()
            if not path.endswith("/AcknowledgeCheckpoint")} == {SMALL_MESSAGE_BYTES}


# -- domain errors and their status codes ----------------------------------------------------


@pytest.mark.parametrize(("error", "code"), [
    (JobNotFoundError, grpc.StatusCode.NOT_FOUND),
    (JobExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (DuplicateTaskExecutorError, grpc.StatusCode.ALREADY_EXISTS),
    (InvalidJobError, grpc.StatusCode.INVALID_ARGUMENT),
    (JobGraphValidationError, grpc.StatusCode.INVALID_ARGUMENT),
    (ConfigError, grpc.StatusCode.INVALID_ARGUMENT),
    (JobChangeRefusedError, grpc.StatusCode.INVALID_ARGUMENT),
    (TaskExecutorNotRegisteredError, grpc.StatusCode.FAILED_PRECONDITION),
    (SplitEnumeratorError, grpc.StatusCode.FAILED_PRECONDITION),
    (JobNotStoredError, grpc.StatusCode.FAILED_PRECONDITION),
    (SnapshotMismatchError, grpc.StatusCode.FAILED_PRECONDITION),
    (SnapshotUnreadableError, grpc.StatusCode.FAILED_PRECONDITION),
    (SavepointFailedError, grpc.StatusCode.FAILED_PRECONDITION),
    (JobChangeFailedError, grpc.StatusCode.FAILED_PRECONDITION),
    (SavepointNotDisposedError, grpc.StatusCode.FAILED_PRECONDITION),
    (OperationTimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED),
    (InternalError, grpc.StatusCode.INTERNAL),
])
def test_each_domain_error_answers_with_its_status(error: type[Exception],
                                                   code: grpc.StatusCode):
    assert status_code(error("why")) == code
    context = RecordingContext()
    with pytest.raises(AbortedError), domain_errors(context):  # type: ignore[arg-type]
        raise error("the cause, and the fix")
    assert (context.code, context.details) == (code, "the cause, and the fix")


@pytest.mark.parametrize("error", [UserError("x"), StorageError("x"), ValueError("x")])
def test_an_unlisted_error_is_not_translated(error: Exception):
    assert status_code(error) is None
    context = RecordingContext()
    with pytest.raises(type(error)), domain_errors(context):  # type: ignore[arg-type]
        raise error
    assert context.code is None


def test_every_listed_error_is_a_weir_error_and_the_jobmasters_own_are_all_listed():
    assert all(issubclass(cls, WeirError) for cls in STATUS_CODES)
    for cls in (DuplicateTaskExecutorError, UnrecoverableJobError, JobExistsError,
                JobNotStoredError):
        assert issubclass(cls, WeirError)
    import weir.jobmaster.errors as errors

    own = [v for v in vars(errors).values()
           if isinstance(v, type) and issubclass(v, WeirError) and v.__module__ == errors.__name__]
    assert own and all(cls in STATUS_CODES for cls in own)


# -- the JobMaster's operations raise them (its main thread, no server) ---------------------


@pytest.fixture
def jobmaster() -> Iterator[JobMaster]:
    jm = JobMaster(Configuration.from_pairs({"jobmaster.rpc.port": "0", "rest.port": "0"}))
    jm.main.start()
    yield jm
    jm.stop()


def test_operations_on_an_unknown_job_raise_job_not_found(jobmaster: JobMaster):
    for operation in (lambda: jobmaster.job_details("nope"),
                      lambda: jobmaster.cancel_job("nope"),
                      lambda: jobmaster.checkpoint_history("nope"),
                      lambda: jobmaster.fetch_collect("nope", 1, 0.0),
                      lambda: jobmaster.rescale_job("nope", 2, {}),
                      lambda: jobmaster.trigger_savepoint(
                          jobmaster_pb2.SavepointRequest(job_id="nope")),
                      lambda: jobmaster.request_splits(
                          jobmaster_pb2.SplitRequest(job_id="nope"))):
        with pytest.raises(JobNotFoundError, match="no job with id 'nope'"):
            operation()
    with pytest.raises(JobNotFoundError, match="no job nope"):
        jobmaster.push_collect(jobmaster_pb2.CollectBatch(job_id="nope"))


def test_a_malformed_graph_is_an_invalid_job(jobmaster: JobMaster):
    with pytest.raises(InvalidJobError):
        jobmaster.submit_job(jobgraph_pb2.JobGraph(job_id="j", name="empty"))
    assert jobmaster.list_jobs() == []


@pytest.fixture
def te_address() -> Iterator[str]:
    """The address of a gRPC server that serves nothing: enough for registration's check
    that the JobMaster reaches a TaskExecutor's advertised address."""
    server, port = create_server("127.0.0.1", 0, None, lambda s: None)
    yield f"127.0.0.1:{port}"
    server.stop(None).wait()


def test_a_heartbeat_of_an_unknown_registration_is_refused(jobmaster: JobMaster,
                                                           te_address: str):
    first = jobmaster_pb2.TaskExecutorHeartbeat(resource_id="te-1", registration_id="r")
    with pytest.raises(TaskExecutorNotRegisteredError, match=r"te-1.*'r'.*register"):
        jobmaster.attach_heartbeats(first)
    record = jobmaster.register_task_executor(jobmaster_pb2.RegisterTaskExecutorRequest(
        resource_id="te-1", rpc_address=te_address, num_slots=1, instance_id="a"))
    first.registration_id = record.registration_id
    assert jobmaster.attach_heartbeats(first) > 0
    assert jobmaster.heartbeat("te-1", first) == []
    with pytest.raises(DuplicateTaskExecutorError):
        jobmaster.register_task_executor(jobmaster_pb2.RegisterTaskExecutorRequest(
            resource_id="te-1", rpc_address=te_address, num_slots=1, instance_id="b"))


def test_an_unreachable_advertised_address_is_refused(jobmaster: JobMaster, te_address: str):
    """The JobMaster dials what a TaskExecutor advertises before it offers its slots; a
    refusal is a ConfigError (INVALID_ARGUMENT: the TaskExecutor exits) naming the
    TaskExecutor, the address, the option and the cause."""
    server_port = int(te_address.rpartition(":")[2])
    unreachable = f"127.0.0.2:{server_port}"  # the server binds 127.0.0.1 only
    with pytest.raises(ConfigError) as refused:
        jobmaster.register_task_executor(jobmaster_pb2.RegisterTaskExecutorRequest(
            resource_id="te-9", rpc_address=unreachable, num_slots=1, instance_id="a"))
    assert str(refused.value) == (
        f"TaskExecutor te-9 advertises {unreachable} (taskmanager.host), which the JobMaster "
        f"at {jobmaster.address} cannot reach: Connection refused; set taskmanager.host to "
        "an address other hosts can reach")
    assert status_code(refused.value) == grpc.StatusCode.INVALID_ARGUMENT
    assert jobmaster.cluster_overview().task_executors == []


def test_disposing_of_what_is_no_savepoint_names_the_path(jobmaster: JobMaster, tmp_path):
    with pytest.raises(SavepointNotDisposedError, match="nothing-here"):
        jobmaster.dispose_savepoint(f"file://{tmp_path}/nothing-here")


# -- the TaskExecutor ------------------------------------------------------------------------


@pytest.fixture
def task_executor() -> Iterator[TaskExecutor]:
    # Not started: its operations need no server, and no thread runs.
    yield TaskExecutor("127.0.0.1:1", Configuration(), num_slots=2)


def test_the_taskexecutors_operations_raise_domain_errors(task_executor: TaskExecutor):
    with pytest.raises(TaskNotFoundError, match="no task a-1 on"):
        task_executor.trigger_checkpoint(
            "a-1", CheckpointBarrier(1, 0, checkpoint_pb2.CheckpointOptions()))
    tdd = jobgraph_pb2.TaskDeploymentDescriptor(attempt_id="a-1",
                                                allocation_id=f"{task_executor.resource_id}:7")
    with pytest.raises(SlotNotFoundError, match="has no slot 7"):
        task_executor.submit_task(tdd)
    assert task_executor.tasks() == []


def test_the_taskexecutors_servicer_answers_them_with_status_codes(
        task_executor: TaskExecutor):
    servicer = TaskExecutorServicer(task_executor)
    context: Any = RecordingContext()
    with pytest.raises(AbortedError):
        servicer.TriggerCheckpoint(taskexecutor_pb2.TriggerCheckpointRequest(
            attempt_id="a-1", checkpoint_id=1), context)
    assert context.code == grpc.StatusCode.NOT_FOUND
    context = RecordingContext()
    with pytest.raises(AbortedError):
        servicer.SubmitTask(jobgraph_pb2.TaskDeploymentDescriptor(
            attempt_id="a-1", allocation_id="elsewhere:9"), context)
    assert context.code == grpc.StatusCode.FAILED_PRECONDITION
    assert context.details == f"{task_executor.resource_id} has no slot 9"

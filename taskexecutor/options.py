"""TaskExecutor options."""

from __future__ import annotations

from weir.core.addresses import host_problem
from weir.core.config import Option, Seconds, non_negative, positive

NUM_TASK_SLOTS = Option(
    "taskmanager.numberOfTaskSlots", int, default=1, validator=positive,
    doc="Slots a TaskExecutor offers: each runs one parallel pipeline of a job.")
HOST = Option(
    "taskmanager.host", str, default=None, validator=host_problem,
    doc="Host name or IP address the JobMaster and other TaskExecutors reach this "
        "TaskExecutor at: advertised for its gRPC server, its data server and its metrics "
        "endpoint, and bound too unless taskmanager.bind-host is set. Unset: the bind host "
        "is advertised, or, when that is a wildcard (0.0.0.0, ::), the address of the "
        "interface that reaches the JobMaster.")
BIND_HOST = Option(
    "taskmanager.bind-host", str, default=None, validator=host_problem,
    doc="Address the TaskExecutor's gRPC and data servers bind to: 0.0.0.0 (or ::) for "
        "every interface (default: taskmanager.host when set, else 127.0.0.1).")
RPC_PORT = Option(
    "taskmanager.rpc.port", int, default=0, validator=non_negative,
    doc="Port of the TaskExecutor's gRPC server (0 picks a free port).")
RESOURCE_ID = Option(
    "taskmanager.resource-id", str, default=None,
    doc="Stable id of the TaskExecutor (default: host-port-random).")
REGISTRATION_TIMEOUT = Option(
    "taskmanager.registration.timeout", Seconds, default="5 min", validator=positive,
    doc="A TaskExecutor that cannot register with the JobMaster for this long exits.")
WORKING_DIR = Option(
    "process.taskmanager.working-dir", str, default=None,
    doc="The TaskExecutor's working directory (task-local state copies, RocksDB "
        "instances). Kept across restarts: a TaskExecutor started again with the same "
        "taskmanager.resource-id and directory finds its local state; another process "
        "may not use it meanwhile. The default, <system temp dir>/weir-tm-<resource id>, "
        "is removed at a stop, or after a crash when the next TaskExecutor starts on the "
        "host, when the resource id is random.")

"""JobMaster options."""

from __future__ import annotations

from weir.core.config import Duration, Option, non_negative, positive

RPC_BIND_HOST = Option(
    "jobmaster.rpc.bind-host", str, default="127.0.0.1",
    doc="Address the JobMaster's gRPC server binds to.")
RPC_PORT = Option(
    "jobmaster.rpc.port", int, default=6123, validator=non_negative,
    doc="Port of the JobMaster's gRPC server (0 picks a free port).")
SLOT_REQUEST_TIMEOUT = Option(
    "slot.request.timeout", Duration, default="5 min", validator=positive,
    doc="How long a job waits for enough free slots before it fails.")
EVENLY_SPREAD_OUT_SLOTS = Option(
    "cluster.evenly-spread-out-slots", bool, default=True,
    doc="Spread a job's slots over all TaskExecutors instead of filling one first.")
COLLECT_BUFFER_BATCHES = Option(
    "jobmaster.collect.buffer-batches", int, default=64, validator=positive,
    doc="Record batches of execute_and_collect() results the JobMaster buffers per job "
        "before sinks are held back.")
JOBS_RETAINED = Option(
    "jobstore.max-capacity", int, default=100, validator=positive,
    doc="Finished jobs kept for `weir list` and `weir status`.")

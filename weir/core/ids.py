"""Typed ids (never bare strings or ints in signatures): JobId, CheckpointId, ResourceId, ...

Each is a ``NewType``: free at run time (the value is the str or int itself), distinct for
the type checker. Wrap a value where it enters as a plain str or int (a proto message, a
path, a command line): ``JobId(request.job_id)``.

Example:
    >>> from weir.core.ids import JobId
    >>> len(JobId.generate())
    32
"""

from __future__ import annotations

import re
import secrets
from typing import NewType

JobId = NewType("JobId", str)
ExecutionAttemptId = NewType("ExecutionAttemptId", str)
ResourceId = NewType("ResourceId", str)
AllocationId = NewType("AllocationId", str)
PartitionId = NewType("PartitionId", str)
#: A checkpoint's number within its job: 1, 2, ... in the order they were triggered.
CheckpointId = NewType("CheckpointId", int)

_HEX32 = re.compile(r"[0-9a-f]{32}")


def new_job_id() -> JobId:
    """A fresh job id (``JobId.generate`` is the same function)."""
    return JobId(secrets.token_hex(16))


def is_valid_job_id(text: str) -> bool:
    """Whether ``text`` has the form of a job id: 32 lower-case hex digits (job ids become
    paths, so nothing else may pass for one). ``JobId.is_valid`` is the same function."""
    return bool(_HEX32.fullmatch(text))


# NewType objects accept attributes: keep the helpers next to the type they belong to.
JobId.generate = new_job_id  # type: ignore[attr-defined]
JobId.is_valid = is_valid_job_id  # type: ignore[attr-defined]


def new_attempt_id() -> ExecutionAttemptId:
    return ExecutionAttemptId(secrets.token_hex(16))


def new_allocation_id() -> AllocationId:
    return AllocationId(secrets.token_hex(8))

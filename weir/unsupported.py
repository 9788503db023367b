"""PyFlink API that has no meaning in weir, or that weir does not support yet: calling it
fails at once, while the job is built, with one line naming the feature and what to do,
instead of an AttributeError.

Example:
    >>> from weir import StreamExecutionEnvironment
    >>> env = StreamExecutionEnvironment.get_execution_environment()
    >>> try:
    ...     env.register_cached_file("/data/model.bin", "model")
    ... except InvalidJobError as err:
    ...     print(str(err).split(":")[0])
    register_cached_file is not supported by weir
"""

from __future__ import annotations

from typing import Any

from weir.core.errors import InvalidJobError

_JAVA = "weir runs no JVM: Java connectors and jars do not exist in weir"
_DEPS = ("install the packages the job's functions import on every TaskExecutor; "
         "env.add_python_file ships .py files and directories with the job")
_TABLE = "the Table API does not exist in weir"

#: PyFlink name -> why weir has no such thing.
ENVIRONMENT = {
    "create_input": _JAVA,
    "add_python_archive": _DEPS, "set_python_requirements": _DEPS,
    "register_cached_file": "the distributed cache does not exist in weir: read shared "
                            "files from a path every TaskExecutor sees",
    "from_data_stream": _TABLE,
    "enable_changelog_state_backend": "the changelog state backend does not exist in "
                                      "weir; checkpoints are incremental (RocksDB)",
}
DATA_STREAM = {
    "set_uid_hash": "set uids with uid()",
    "partition_custom": "custom partitioners are not supported yet: key_by the partition "
                        "you want instead",
    "cache": "cached intermediate results are not supported",
    "set_buffer_timeout": "the buffer timeout is per job: env.set_buffer_timeout(ms)",
}

_DATASET = "it belongs to the removed DataSet API"
EXECUTION_CONFIG = {
    "set_execution_mode": _DATASET, "get_execution_mode": _DATASET,
    "set_default_input_dependency_constraint": _DATASET,
    "get_default_input_dependency_constraint": _DATASET,
}
WATERMARK_STRATEGY: dict[str, str] = {}

#: The sink's share of DATA_STREAM: what ``sink_to``/``add_sink``/``print`` return.
DATA_STREAM_SINK = {name: DATA_STREAM[name] for name in ("set_uid_hash",)}


def refuse(owner: str, name: str, table: dict[str, str]) -> Any:
    """Raise the error for PyFlink's ``name`` if it is in ``table``, else AttributeError."""
    reason = table.get(name)
    if reason is None:
        msg = f"'{owner}' object has no attribute '{name}'"
        raise AttributeError(msg)
    msg = f"{name} is not supported by weir: {reason}"
    raise InvalidJobError(msg)

"""The DataStream API (PyFlink's ``pyflink.datastream``): the environment and the streams,
functions, windows, checkpointing, state backends and the rest, each defined in its
module below (PyFlink's modules, under the same names) and named here.

The names are loaded on first use (PEP 562): the runtime imports modules of this package
(an operator imports :mod:`weir.datastream.functions`), and must not load the environment
and the streams with them, which import the operators.

Example:
    >>> from weir.datastream import StreamExecutionEnvironment, RuntimeExecutionMode
    >>> RuntimeExecutionMode.BATCH.name
    'BATCH'
"""

from __future__ import annotations

# Imported under private names, which ``from weir.datastream import *`` leaves out.
from typing import TYPE_CHECKING as _TYPE_CHECKING

from weir.unsupported import lazy_names as _lazy_names

#: The modules whose names (their ``__all__``) this package has.
_MODULES = tuple(f"{__name__}.{module}" for module in (
    "stream_execution_environment", "data_stream", "functions", "window",
    "checkpoint_config", "checkpointing_mode", "externalized_checkpoint_retention",
    "checkpoint_storage", "state_backend", "execution_mode", "time_characteristic",
    "time_domain", "timerservice", "output_tag", "slot_sharing_group", "async_data_stream",
    "async_retry_strategies"))

__getattr__, __dir__ = _lazy_names(__name__, _MODULES, submodules=("async_retry_predicates",))

if _TYPE_CHECKING:  # the names, for type checkers
    from weir.datastream import async_retry_predicates as async_retry_predicates
    from weir.datastream.async_data_stream import *  # noqa: F403
    from weir.datastream.async_retry_strategies import *  # noqa: F403
    from weir.datastream.checkpoint_config import *  # noqa: F403
    from weir.datastream.checkpoint_storage import *  # noqa: F403
    from weir.datastream.checkpointing_mode import *  # noqa: F403
    from weir.datastream.data_stream import *  # noqa: F403
    from weir.datastream.execution_mode import *  # noqa: F403
    from weir.datastream.externalized_checkpoint_retention import *  # noqa: F403
    from weir.datastream.functions import *  # noqa: F403
    from weir.datastream.output_tag import *  # noqa: F403
    from weir.datastream.slot_sharing_group import *  # noqa: F403
    from weir.datastream.state_backend import *  # noqa: F403
    from weir.datastream.stream_execution_environment import *  # noqa: F403
    from weir.datastream.time_characteristic import *  # noqa: F403
    from weir.datastream.time_domain import *  # noqa: F403
    from weir.datastream.timerservice import *  # noqa: F403
    from weir.datastream.window import *  # noqa: F403

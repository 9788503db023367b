"""PyFlink's ``pyflink.datastream``: the DataStream API's names, each resolved from
``weir`` on first use (see :mod:`weir.core.pyflink_paths`); the streams themselves are in
:mod:`weir.datastream.data_stream`.

Example:
    >>> from weir.datastream import StreamExecutionEnvironment, RuntimeExecutionMode
    >>> RuntimeExecutionMode.BATCH.name
    'BATCH'
"""

from weir.core.pyflink_paths import MODULES, REASONS, mirror

__all__ = [n for n in MODULES[__name__] if n not in REASONS]
__getattr__, __dir__ = mirror(__name__)

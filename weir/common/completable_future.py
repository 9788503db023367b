"""The futures a job client answers with (PyFlink's
``pyflink.common.completable_future``), defined with the executor contract in
:mod:`weir.core.execution`.

Example:
    >>> CompletableFuture.completed(3).result()
    3
"""

from __future__ import annotations

from weir.core.execution import CompletableFuture

__all__ = ["CompletableFuture"]

"""Common retry predicates for async retry strategies (PyFlink's
``pyflink.datastream.async_retry_predicates``): ``empty_result_predicate``,
``has_exception_predicate`` and ``exception_type_predicate``, and the constants weir had
first.

Example:
    >>> empty_result_predicate([]), empty_result_predicate([1])
    (True, False)
    >>> exception_type_predicate(ValueError("x"), ValueError)
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["EMPTY_RESULT_PREDICATE", "HAS_EXCEPTION_PREDICATE", "empty_result_predicate",
           "exception_type_predicate", "has_exception_predicate"]


def empty_result_predicate(result: Any) -> bool:
    """True for a call that returned no outputs (None or an empty list)."""
    return result is None or len(result) == 0


def has_exception_predicate(error: BaseException | None) -> bool:
    """True for a call that raised."""
    return error is not None


def exception_type_predicate(error: BaseException | None,
                             expected_error_type: type[BaseException]) -> bool:
    """True if the call raised an ``expected_error_type``; bind the type to use it as an
    exception predicate (``functools.partial`` or a lambda)."""
    return isinstance(error, expected_error_type)


def _falsy_result(result: Any) -> bool:
    return not result


def _any_exception(error: BaseException) -> bool:
    return True


#: Retry a call whose result is falsy (no outputs).
EMPTY_RESULT_PREDICATE: Callable[[Any], bool] = _falsy_result
#: Retry a call that raised.
HAS_EXCEPTION_PREDICATE: Callable[[BaseException], bool] = _any_exception

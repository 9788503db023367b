"""Window functions compute a window's result: :class:`AggregateFunction` folds records in
as they arrive, :class:`ProcessWindowFunction` (or :class:`WindowFunction`) sees every
record of the window at once; the ``All`` variants serve ``window_all`` on a stream that
is not keyed. PyFlink has them in ``pyflink.datastream.functions``, where weir has them too.

Example:
    >>> class Count(ProcessWindowFunction):
    ...     def process(self, key, context, elements):
    ...         yield key, context.window().start, len(list(elements))
    >>> as_window_function(Count(), keyed=True).__class__.__name__
    'Count'
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from weir.core.generics import TypeParameters
from weir.datastream.functions import Function, RuntimeContext
from weir.datastream.window.windows import TimeWindow

__all__ = ["AggregateFunction", "AllWindowFunction", "ProcessAllWindowFunction",
           "ProcessWindowFunction", "WindowFunction"]


class AggregateFunction(Function):
    """Incremental aggregation: an accumulator per window and key.

    Example:
        >>> class Average(AggregateFunction):
        ...     def create_accumulator(self): return (0, 0)
        ...     def add(self, value, acc): return acc[0] + value, acc[1] + 1
        ...     def get_result(self, acc): return acc[0] / acc[1]
        ...     def merge(self, a, b): return a[0] + b[0], a[1] + b[1]
        >>> avg = Average()
        >>> avg.get_result(avg.add(3, avg.add(1, avg.create_accumulator())))
        2.0
    """

    @abstractmethod
    def create_accumulator(self) -> Any: ...

    @abstractmethod
    def add(self, value: Any, accumulator: Any) -> Any: ...

    @abstractmethod
    def get_result(self, accumulator: Any) -> Any: ...

    def merge(self, a: Any, b: Any) -> Any:
        """Combine two accumulators (needed by session windows)."""
        msg = f"{type(self).__name__} does not implement merge(), which session windows need"
        raise NotImplementedError(msg)


class WindowContext(ABC, TypeParameters):
    """What a window's ``process`` gets as ``context``, keyed or not: the window, the
    clocks, and keyed state per window (``window_state()``) or across the key's windows
    (``global_state()``)."""

    @abstractmethod
    def window(self) -> TimeWindow: ...

    @abstractmethod
    def current_watermark(self) -> int: ...

    @abstractmethod
    def current_processing_time(self) -> int: ...

    @abstractmethod
    def window_state(self) -> Any: ...

    @abstractmethod
    def global_state(self) -> Any: ...


class ProcessWindowFunction(Function):
    """Evaluates a whole window: ``process(key, context, elements)`` yields the outputs.

    ``context.window()`` is the window; ``context.current_watermark()`` and
    ``context.current_processing_time()`` the clocks; ``context.window_state()`` and
    ``context.global_state()`` give keyed state per window or across the key's windows.
    With ``reduce``/``aggregate``, ``elements`` holds the one pre-aggregated value.
    """

    class Context(WindowContext):
        """What ``process`` gets as ``context`` (for annotations, also as PyFlink's
        ``ProcessWindowFunction.Context[TimeWindow]``: the runtime passes its own
        implementation)."""

    @abstractmethod
    def process(self, key: Any, context: ProcessWindowFunction.Context,
                elements: Iterable[Any]) -> Iterable[Any]: ...

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        """The window is purged: delete per-window state it kept."""


class WindowFunction(Function):
    """Evaluates a whole window: ``apply(key, window, inputs)`` yields the outputs
    (``WindowedStream.apply``)."""

    @abstractmethod
    def apply(self, key: Any, window: TimeWindow, inputs: Iterable[Any]) -> Iterable[Any]: ...


class AllWindowFunction(Function):
    """A window of a non-keyed stream (``window_all(...).apply``):
    ``apply(window, inputs)`` yields the outputs."""

    @abstractmethod
    def apply(self, window: TimeWindow, inputs: Iterable[Any]) -> Iterable[Any]: ...


class ProcessAllWindowFunction(Function):
    """A window of a non-keyed stream: ``process(context, elements)`` yields the outputs;
    ``context.window()`` is the window. With ``reduce``/``aggregate`` of ``window_all``,
    ``elements`` holds the one pre-aggregated value."""

    class Context(WindowContext):
        """What ``process`` gets as ``context`` (for annotations, also as
        ``ProcessAllWindowFunction.Context[TimeWindow]``): ``window()``, the clocks, and
        ``window_state()``/``global_state()`` for state per window or across windows."""

    @abstractmethod
    def process(self, context: ProcessAllWindowFunction.Context,
                elements: Iterable[Any]) -> Iterable[Any]: ...

    def clear(self, context: ProcessAllWindowFunction.Context) -> None:
        """The window is purged: delete per-window state it kept."""


class WindowFunctionAdapter(ProcessWindowFunction):
    """A WindowFunction, AllWindowFunction or ProcessAllWindowFunction run as the
    ProcessWindowFunction the window operator calls (all-window ones see no key)."""

    def __init__(self, function: Any, style: str) -> None:
        # The user's function, of the style's class or any object with its method (checked
        # here, as PyFlink users pass either).
        method = "process" if style == "process_all" else "apply"
        if not callable(getattr(function, method, None)):
            kinds = {"apply": "WindowFunction", "apply_all": "AllWindowFunction",
                     "process_all": "ProcessAllWindowFunction"}
            msg = f"expected a {kinds[style]} (with {method}()), got {type(function).__name__}"
            raise TypeError(msg)
        self.function = function
        self.style = style

    def open(self, runtime_context: RuntimeContext) -> None:
        if isinstance(self.function, Function):
            self.function.open(runtime_context)

    def close(self) -> None:
        if isinstance(self.function, Function):
            self.function.close()

    def process(self, key: Any, context: ProcessWindowFunction.Context,
                elements: Iterable[Any]) -> Iterable[Any]:
        outputs: Iterable[Any]  # what the user's function returns (or yields)
        if self.style == "apply":
            outputs = self.function.apply(key, context.window(), elements)
        elif self.style == "apply_all":
            outputs = self.function.apply(context.window(), elements)
        else:
            outputs = self.function.process(context, elements)
        return outputs

    def clear(self, context: ProcessWindowFunction.Context) -> None:
        # Only ProcessAllWindowFunction has the hook; (All)WindowFunctions keep no state.
        clear = getattr(self.function, "clear", None)
        if self.style == "process_all" and callable(clear):
            clear(context)


def as_window_function(function: Any, keyed: bool) -> Any:
    """The function the window operator calls with a window's pre-aggregated value
    (``reduce``/``aggregate`` with a window function): a ProcessWindowFunction (or plain
    function of ``(key, context, elements)``) as it is; a WindowFunction, or on a
    non-keyed stream an AllWindowFunction/ProcessAllWindowFunction, adapted."""
    if function is None:
        return None
    if keyed:
        if isinstance(function, WindowFunction) or (
                not isinstance(function, ProcessWindowFunction)
                and callable(getattr(function, "apply", None))
                and not callable(getattr(function, "process", None))):
            return WindowFunctionAdapter(function, "apply")
        return function
    if isinstance(function, ProcessAllWindowFunction) or (
            not isinstance(function, AllWindowFunction)
            and callable(getattr(function, "process", None))):
        return WindowFunctionAdapter(function, "process_all")
    if isinstance(function, AllWindowFunction) or callable(getattr(function, "apply", None)):
        return WindowFunctionAdapter(function, "apply_all")
    msg = ("the window function of window_all(...).reduce/aggregate must be an "
           f"AllWindowFunction or a ProcessAllWindowFunction, got {type(function).__name__}")
    raise TypeError(msg)

"""Two-input operators: the function of connected streams (``connect``), keyed or not.

Records of the first input go to the function's ``...1`` method, those of the second to its
``...2`` method. Both inputs are channels of one task, so a checkpoint barrier is aligned
over the channels of both inputs (or overtakes them, unaligned), and a keyed two-input
operator's state (shared by both inputs' records of a key) and timers are in its keyed
snapshot like any keyed operator's.

Example:
    >>> from weir.datastream.functions import CoMapFunction
    >>> class Tag(CoMapFunction):
    ...     def map1(self, value): return ("left", value)
    ...     def map2(self, value): return ("right", value)
    >>> CoOperator("Co-Map", Tag(), "map").style
    'map'
"""

from __future__ import annotations

from typing import Any

from weir.core.records import Elements
from weir.core.types import TypeInformation
from weir.datastream.functions import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
)
from weir.datastream.timerservice import TimerService
from weir.operators.base import open_functions
from weir.operators.keyed import ProcessFunctionOperator
from weir.operators.keys import KeySpec

#: The functions of connected streams, one class per style (checked by their methods).
CoFunction = CoMapFunction | CoFlatMapFunction | CoProcessFunction | KeyedCoProcessFunction

#: Style -> (method for input 1, method for input 2, the function class to name).
_STYLES = {
    "map": ("map1", "map2", "CoMapFunction"),
    "flat_map": ("flat_map1", "flat_map2", "CoFlatMapFunction"),
    "process": ("process_element1", "process_element2",
                "CoProcessFunction or KeyedCoProcessFunction"),
}


class CoOperator(ProcessFunctionOperator):
    """Runs a CoMap, CoFlatMap, CoProcess or KeyedCoProcess function (``style``: map,
    flat_map or process). With ``keys`` (one key per input) it is keyed: keyed state for
    the function and, for process, timers firing ``on_timer``. Outputs take the timestamp
    of the record they came from, as in :class:`KeyedProcessOperator`."""

    def __init__(self, name: str, fn: CoFunction, style: str,
                 keys: tuple[KeySpec, KeySpec] | None = None,
                 output_type: TypeInformation | None = None) -> None:
        super().__init__(name, output_type)
        first, second, kind = _STYLES[style]
        if not (callable(getattr(fn, first, None)) and callable(getattr(fn, second, None))):
            msg = (f"{name} needs a {kind} (methods {first} and {second}), got "
                   f"{type(fn).__name__}")
            raise TypeError(msg)
        self.fn = fn
        self.style = style
        self.keys = keys

    def functions(self) -> list[Any]:
        return [self.fn]

    def open(self) -> None:
        first, second, _ = _STYLES[self.style]
        self._calls = (getattr(self.fn, first), getattr(self.fn, second))
        self._pending = []
        self._pending_ts = []
        backend = None
        self._fn_ctx: CoProcessFunction.Context | KeyedCoProcessFunction.Context
        if self.keys is not None:
            backend = self.open_keyed()
            service = TimerService(self.open_timers("user")) if self.style == "process" \
                else None
            self._fn_ctx = KeyedCoProcessFunction.Context(service)
            self._timer_ctx = KeyedCoProcessFunction.OnTimerContext(service)
            self._contexts = [self._fn_ctx, self._timer_ctx]
            self._on_timer = getattr(self.fn, "on_timer", None)
        else:
            self._fn_ctx = CoProcessFunction.Context(self.clock_service())
            self._contexts = [self._fn_ctx]
        open_functions(self, backend)

    def process(self, elements: Elements, input_index: int = 0) -> None:
        ctx = self._fn_ctx if self.style == "process" else None
        key = self.keys[input_index] if self.keys is not None else None
        self._apply(elements, self._calls[input_index], ctx, key, single=self.style == "map")

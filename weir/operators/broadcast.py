"""The broadcast state pattern: a stream connected with a broadcast stream that carries
broadcast state (``ds.connect(rules.broadcast(descriptor)).process(fn)``).

Input 0 is the stream (keyed or not), input 1 the broadcast stream: every subtask gets
every broadcast record and applies it to its broadcast state, so all subtasks hold the same
state. That state is operator state of mode BROADCAST: subtask 0 alone writes it into a
checkpoint, and on restore, at any parallelism, every subtask gets it (as Flink restores
broadcast state to every subtask). The keyed variant's keyed state and timers are in its
keyed snapshot as usual.

Example:
    >>> from weir.datastream.functions import BroadcastProcessFunction
    >>> from weir.state.descriptors import MapStateDescriptor
    >>> class Pass(BroadcastProcessFunction):
    ...     def process_element(self, value, ctx): yield value
    ...     def process_broadcast_element(self, value, ctx): pass
    >>> BroadcastProcessOperator("Broadcast Process", Pass(), [MapStateDescriptor("r")]).name
    'Broadcast Process'
"""

from __future__ import annotations

from typing import Any

from weir.core.records import Elements
from weir.core.types import TypeInformation
from weir.datastream.functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction
from weir.datastream.timerservice import TimerService
from weir.operators.base import open_functions
from weir.operators.keyed import ProcessFunctionOperator
from weir.operators.keys import KeySpec
from weir.state.descriptors import MapStateDescriptor
from weir.taskexecutor.operator import StateContext


class BroadcastProcessOperator(ProcessFunctionOperator):
    """Runs a BroadcastProcessFunction, or with ``key`` a KeyedBroadcastProcessFunction,
    over the broadcast states of ``descriptors``."""

    def __init__(self, name: str,
                 fn: BroadcastProcessFunction | KeyedBroadcastProcessFunction,
                 descriptors: list[MapStateDescriptor], key: KeySpec | None = None,
                 output_type: TypeInformation | None = None) -> None:
        super().__init__(name, output_type)
        for method in ("process_element", "process_broadcast_element"):
            if not callable(getattr(fn, method, None)):
                kind = "KeyedBroadcastProcessFunction" if key is not None \
                    else "BroadcastProcessFunction"
                msg = f"{name} needs a {kind}, got {type(fn).__name__}"
                raise TypeError(msg)
        self.fn = fn
        self.descriptors = list(descriptors)
        self.key = key

    def functions(self) -> list[Any]:
        return [self.fn]

    def initialize_state(self, context: StateContext) -> None:
        super().initialize_state(context)
        assert self.ctx is not None and self.operator_state is not None
        writer = self.ctx.subtask_index == 0
        self._broadcast = {d.name: self.operator_state.get_broadcast_state(d, writer)
                           for d in self.descriptors}

    def open(self) -> None:
        self._pending = []
        self._pending_ts = []
        backend = None
        self._fn_ctx: (BroadcastProcessFunction.ReadOnlyContext
                       | KeyedBroadcastProcessFunction.ReadOnlyContext)
        self._broadcast_ctx: (BroadcastProcessFunction.Context
                              | KeyedBroadcastProcessFunction.Context)
        if self.key is not None:
            backend = self.open_keyed()
            service = TimerService(self.open_timers("user"))
            self._fn_ctx = KeyedBroadcastProcessFunction.ReadOnlyContext(
                service, self._broadcast)
            self._broadcast_ctx = KeyedBroadcastProcessFunction.Context(
                service, self._broadcast, backend)
            self._timer_ctx = KeyedBroadcastProcessFunction.OnTimerContext(
                service, self._broadcast)
            self._contexts = [self._fn_ctx, self._timer_ctx, self._broadcast_ctx]
            self._on_timer = getattr(self.fn, "on_timer", None)
        else:
            service = self.clock_service()
            self._fn_ctx = BroadcastProcessFunction.ReadOnlyContext(self._broadcast, service)
            self._broadcast_ctx = BroadcastProcessFunction.Context(self._broadcast, service)
            self._contexts = [self._fn_ctx, self._broadcast_ctx]
        open_functions(self, backend)

    def process(self, elements: Elements, input_index: int = 0) -> None:
        if input_index == 1:  # broadcast records have no key
            self._apply(elements, self.fn.process_broadcast_element, self._broadcast_ctx, None)
        else:
            self._apply(elements, self.fn.process_element, self._fn_ctx, self.key)

"""The async I/O operator (Flink's ``AsyncWaitOperator``): each record starts a call of the
AsyncFunction on an event loop of the operator's own thread; the task thread emits the
results as calls complete (ordered: in input order).

Bounded: at most ``capacity`` calls are in flight; the task thread waits for one to
complete before starting another. Completions wake the task through its mailbox. Before a
watermark passes (and at the end of input) every call started earlier completes, so no
result is later than a watermark sent after its record.

Exactly once: the records of the calls in flight at a checkpoint are the operator's
state (list state, dealt out on rescaling); a restored operator calls them again first,
as Flink does. A call that fails, or times out without a ``timeout`` result, fails the
task.

Example:
    >>> from weir.datastream.async_retry_strategies import NO_RETRY
    >>> from weir.datastream.functions import AsyncFunction
    >>> class Double(AsyncFunction):
    ...     async def async_invoke(self, value):
    ...         return [2 * value]
    >>> AsyncWaitOperator("Async Wait", Double(), 1000, 4, True, NO_RETRY).capacity
    4
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections import deque
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from weir.core.errors import MailboxFullError
from weir.core.ids import CheckpointId
from weir.core.records import NO_TIMESTAMP, Elements
from weir.core.types import TypeInformation
from weir.datastream.async_retry_strategies import AsyncRetryStrategy
from weir.datastream.functions import AsyncFunction
from weir.operators.base import close_functions, open_functions
from weir.state.descriptors import ListStateDescriptor
from weir.state.snapshot import SnapshotLocation
from weir.taskexecutor.operator import (
    MAILBOX_SERVICE,
    OperatorSnapshot,
    StateContext,
    StreamOperator,
)

#: Longest the task thread waits at once for a call (it checks again after).
_WAIT_S = 0.05


@dataclass
class _Call:
    value: Any
    timestamp: int
    future: Future[Any] = field(default_factory=Future)


class AsyncWaitOperator(StreamOperator):
    """Runs an AsyncFunction (see the module docstring)."""

    def __init__(self, name: str, fn: AsyncFunction, timeout_ms: int, capacity: int,
                 ordered: bool, retry: AsyncRetryStrategy,
                 output_type: TypeInformation | None = None) -> None:
        super().__init__(name)
        if not inspect.iscoroutinefunction(getattr(fn, "async_invoke", None)):
            msg = (f"{name} needs an AsyncFunction whose async_invoke is a coroutine "
                   f"(async def), got {type(fn).__name__}")
            raise TypeError(msg)
        if timeout_ms <= 0 or capacity < 1:
            msg = f"{name}: the timeout and the capacity must be positive"
            raise ValueError(msg)
        self.fn = fn
        self.timeout_ms = timeout_ms
        self.capacity = capacity
        self.ordered = ordered
        self.retry = retry
        self.output_type = output_type

    def functions(self) -> list[Any]:
        return [self.fn]

    def initialize_state(self, context: StateContext) -> None:
        super().initialize_state(context)
        assert self.operator_state is not None
        self._in_flight = self.operator_state.get_list_state(
            ListStateDescriptor("async-wait-in-flight"))
        self._restored = list(self._in_flight.get())

    def open(self) -> None:
        assert self.ctx is not None
        self._calls: deque[_Call] = deque()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name=f"async-{self.ctx.task_name}")
        self._thread.start()
        self._mailbox = self.ctx.services.get(MAILBOX_SERVICE)
        self._drain_posted = threading.Event()
        open_functions(self)
        for value, timestamp in getattr(self, "_restored", []):
            self._start(value, timestamp)

    # -- calls ------------------------------------------------------------------------------

    def _start(self, value: Any, timestamp: int) -> None:
        while len(self._calls) >= self.capacity:
            self._wait_for_one()
        call = _Call(value, timestamp)
        call.future = asyncio.run_coroutine_threadsafe(self._invoke(value), self._loop)
        call.future.add_done_callback(self._completed)
        self._calls.append(call)

    async def _invoke(self, value: Any) -> Any:
        """One record's call, retried by the strategy; the timeout covers every attempt
        and the back-offs between them, as in Flink. A ``TimeoutError`` raised by the
        function itself is a failure of that attempt (retried if the strategy says so),
        not the operator's timeout."""
        attempts = asyncio.ensure_future(self._attempts(value))
        done, _ = await asyncio.wait({attempts}, timeout=self.timeout_ms / 1000)
        if done:
            return attempts.result()
        attempts.cancel()
        # Whatever the cancelled call still raises has nobody to go to.
        attempts.add_done_callback(lambda t: t.cancelled() or t.exception())
        return self.fn.timeout(value)

    async def _attempts(self, value: Any) -> Any:
        attempt = 1
        while True:
            try:
                result = await self.fn.async_invoke(value)
            except Exception as err:
                if not self.retry.can_retry(attempt) or not self.retry.retries_exception(err):
                    raise
            else:
                if not self.retry.can_retry(attempt) or not self.retry.retries_result(result):
                    return result
            await asyncio.sleep(self.retry.get_backoff_time_millis(attempt) / 1000)
            attempt += 1

    def _completed(self, _: Future[Any]) -> None:
        """A call completed (event loop thread): have the task thread emit results."""
        if self._mailbox is not None and not self._drain_posted.is_set():
            self._drain_posted.set()
            try:
                self._mailbox(self._drain_from_mailbox)
            except MailboxFullError:
                self._drain_posted.clear()  # full: the task drains at its next batch anyway

    def _drain_from_mailbox(self) -> None:
        self._drain_posted.clear()
        self._drain()

    def _wait_for_one(self) -> None:
        """Block the task thread until a call completes (the oldest, when ordered)."""
        pending = [self._calls[0].future] if self.ordered else [c.future for c in self._calls]
        wait(pending, timeout=_WAIT_S, return_when="FIRST_COMPLETED")
        self._drain()

    def _drain(self) -> None:
        """Emit the results of the completed calls (ordered: only a completed prefix)."""
        out: list[Any] = []
        stamps: list[int] = []
        if self.ordered:
            while self._calls and self._calls[0].future.done():
                self._collect(self._calls.popleft(), out, stamps)
        else:
            for call in [c for c in self._calls if c.future.done()]:
                self._calls.remove(call)
                self._collect(call, out, stamps)
        if out:
            assert self.output is not None
            timestamps = np.array(stamps, dtype=np.int64)
            self.output.emit(Elements.from_records(
                out, self.output_type,
                None if (timestamps == NO_TIMESTAMP).all() else timestamps))

    @staticmethod
    def _collect(call: _Call, out: list[Any], stamps: list[int]) -> None:
        result = call.future.result()  # a failed call raises here: the task fails
        results = list(result) if result is not None else []
        out.extend(results)
        stamps.extend([call.timestamp] * len(results))

    def _complete_all(self) -> None:
        while self._calls:
            self._wait_for_one()

    # -- the operator -------------------------------------------------------------------------

    def process(self, elements: Elements, input_index: int = 0) -> None:
        timestamps = elements.timestamps.tolist() if elements.timestamps is not None \
            else [NO_TIMESTAMP] * len(elements)
        for value, timestamp in zip(elements.records(), timestamps, strict=True):
            self._start(value, timestamp)
        self._drain()

    def process_watermark(self, watermark: int) -> None:
        self._complete_all()
        super().process_watermark(watermark)

    def finish(self) -> None:
        self._complete_all()

    def snapshot_state(self, checkpoint_id: CheckpointId, timestamp_ms: int,
                       location: SnapshotLocation) -> OperatorSnapshot:
        self._drain()
        self._in_flight.update([(c.value, c.timestamp) for c in self._calls])
        return super().snapshot_state(checkpoint_id, timestamp_ms, location)

    def close(self) -> None:
        try:
            close_functions(self)
        finally:
            loop = getattr(self, "_loop", None)
            if loop is not None:
                with contextlib.suppress(Exception):
                    asyncio.run_coroutine_threadsafe(_cancel_all(), loop).result(timeout=5)
                loop.call_soon_threadsafe(loop.stop)
                self._thread.join(timeout=5)
                if not self._thread.is_alive():
                    loop.close()


async def _cancel_all() -> None:
    """Cancel the calls still running (the operator closes) and let them unwind."""
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)

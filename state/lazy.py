"""Lazy restore (``state.backend.restore.lazy``): process records before every key group
is loaded; a record waits only for its own key group.

The source is the canonical format, whose index locates each (state, key group) segment,
so one key group can be loaded alone. (Native RocksDB snapshots are whole instances, not
indexed by key group, and are restored eagerly.)

Threads and what each one writes:

* the **loader thread** (one per restore, ``lazy-restore-<first>-<last>``) fetches the
  snapshot files, loads key groups into the backend — only key groups not yet marked
  loaded — and then marks them loaded. It takes the key groups the task asked for first,
  then the rest in order;
* the **task thread** touches a key group only once it is marked loaded: the backend's
  ``set_current_key`` and batched primitives call :meth:`LazyRestore.await_key_group` /
  :meth:`await_key_groups`, which ask the loader for those key groups and wait; whole-state
  operations (snapshots, ``keys()``) call :meth:`await_all`.

The bookkeeping (loaded set, requests, error, closed flag) is guarded by one condition
variable. Every wait has a timeout (``wait_timeout``) and ends in StateError when it
expires; a failure of the loader is raised as StateError on the task thread at its next
state access; ``close()`` (the backend's ``dispose``) stops the loader and joins it.

Example:
    >>> import io
    >>> from weir.checkpoint.storage import StreamStateHandle
    >>> from weir.state.canonical import write_canonical
    >>> from weir.state.descriptors import ValueStateDescriptor
    >>> from weir.state.handles import CanonicalStateHandle
    >>> from weir.state.heap import HeapKeyedStateBackend
    >>> from weir.state.key_groups import KeyGroupRange
    >>> source = HeapKeyedStateBackend(128, KeyGroupRange(0, 127))
    >>> count = source.get_state(ValueStateDescriptor("count"))
    >>> for user in range(50):
    ...     source.set_current_key(user); count.update(user * 10)
    >>> out = io.BytesIO(); _ = write_canonical(source.entries(), out)
    >>> data = out.getvalue()
    >>> handle = CanonicalStateHandle(KeyGroupRange(0, 127), 1,
    ...                               StreamStateHandle("mem://x", len(data), "-"))
    >>> target = HeapKeyedStateBackend(128, KeyGroupRange(0, 127))
    >>> lazy = LazyRestore(target, [handle], lambda h: data).start()
    >>> value = target.get_state(ValueStateDescriptor("count"))
    >>> target.set_current_key(42); value.value()      # waits for key 42's group only
    420
    >>> lazy.wait_until_loaded(); lazy.done
    True
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence

from weir.core.errors import StateError
from weir.state.backend import KeyedStateBackend
from weir.state.canonical import SegmentView, read_index
from weir.state.handles import CanonicalStateHandle

log = logging.getLogger(__name__)

#: Default longest wait of the task thread for a key group (a remote download of the
#: snapshot file may come first).
DEFAULT_WAIT_TIMEOUT = 600.0

#: How long ``close()`` waits for the loader to finish its current key group.
CLOSE_TIMEOUT = 30.0


class LazyRestore:
    """Loads canonical snapshots into a backend on a background thread (see the module
    docstring). ``fetch(handle)`` returns a handle's verified bytes; it runs on the loader
    thread."""

    def __init__(self, backend: KeyedStateBackend, handles: Sequence[CanonicalStateHandle],
                 fetch: Callable[[CanonicalStateHandle], bytes | memoryview],
                 wait_timeout: float = DEFAULT_WAIT_TIMEOUT) -> None:
        self._backend = backend
        owned = backend.key_group_range
        self._owned = owned
        self._handles = [h for h in handles if len(h.overlap(owned))]
        self._fetch = fetch
        self.wait_timeout = wait_timeout
        self._cond = threading.Condition()
        # Key group -> indexes of the handles covering it (normally exactly one).
        self._sources: dict[int, list[int]] = {}
        for index, handle in enumerate(self._handles):
            for key_group in handle.overlap(owned):
                self._sources.setdefault(key_group, []).append(index)
        self._unloaded: set[int] = set(self._sources)
        self._order = sorted(self._sources)
        self._next = 0
        self._requested: deque[int] = deque()
        self._error: BaseException | None = None
        self._closed = False
        self._done = not self._unloaded
        #: Key groups in the order they were loaded (observability and tests).
        self.load_order: list[int] = []
        self.started_at = 0.0
        self.finished_at = 0.0
        self._thread = threading.Thread(
            target=self._run, name=f"lazy-restore-{owned.start}-{owned.end}", daemon=True)

    # -- task thread ------------------------------------------------------------------------

    def start(self) -> LazyRestore:
        """Attach to the backend and start the loader (task thread, before processing)."""
        self.started_at = time.perf_counter()
        if self._done:
            self.finished_at = self.started_at
            return self
        self._backend._restore_gate = self
        self._thread.start()
        return self

    @property
    def done(self) -> bool:
        return self._done

    @property
    def loader_alive(self) -> bool:
        return self._thread.is_alive()

    def requested(self) -> list[int]:
        """Key groups the task asked for that the loader has not picked up yet."""
        with self._cond:
            return list(self._requested)

    def await_key_group(self, key_group: int) -> None:
        """Return once ``key_group`` is loaded (asking the loader for it first)."""
        if self._error is None and key_group not in self._unloaded:
            return  # the common case once warm: no lock
        self._await([key_group])

    def await_key_groups(self, key_groups: Iterable[int]) -> None:
        """Return once every one of ``key_groups`` is loaded."""
        missing = [g for g in key_groups if g in self._unloaded]
        if self._error is None and not missing:
            return
        self._await(missing)

    def await_all(self) -> None:
        """Return once every key group is loaded."""
        self.wait_until_loaded()

    def wait_until_loaded(self, timeout: float | None = None) -> None:
        """Block until the restore completed; StateError on failure, close or timeout."""
        limit = self.wait_timeout if timeout is None else timeout
        with self._cond:
            finished = self._cond.wait_for(
                lambda: self._done or self._error is not None or self._closed, limit)
            self._raise_if_unusable()
            if not finished:
                msg = (f"lazy restore of {self._owned} did not finish within {limit:g} s "
                       f"({len(self._unloaded)} key groups still loading)")
                raise StateError(msg)

    def _await(self, key_groups: list[int]) -> None:
        with self._cond:
            self._raise_if_unusable()
            waiting = [g for g in key_groups if g in self._unloaded]
            if not waiting:
                return
            self._requested.extend(waiting)
            self._cond.notify_all()
            finished = self._cond.wait_for(
                lambda: self._error is not None or self._closed
                or not any(g in self._unloaded for g in waiting), self.wait_timeout)
            self._raise_if_unusable()
            if not finished:
                msg = (f"key groups {sorted(waiting)[:5]} were not restored within "
                       f"{self.wait_timeout:g} s (lazy restore of {self._owned} is too slow "
                       "or stuck: check the checkpoint storage)")
                raise StateError(msg)

    def _raise_if_unusable(self) -> None:
        if self._error is not None:
            msg = f"lazy restore of {self._owned} failed: {self._error}"
            raise StateError(msg) from self._error
        if self._closed and not self._done:
            msg = f"lazy restore of {self._owned} was stopped (the backend was disposed)"
            raise StateError(msg)

    def close(self) -> None:
        """Stop the loader and wait for it (dispose; any thread but the loader's)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(CLOSE_TIMEOUT)
            if self._thread.is_alive():
                log.warning("lazy restore loader of %s did not stop within %g s",
                            self._owned, CLOSE_TIMEOUT)

    # -- loader thread ----------------------------------------------------------------------

    def _next_target(self) -> int | None:
        """The next key group to load: requested ones first (under the lock)."""
        while self._requested:
            key_group = self._requested.popleft()
            if key_group in self._unloaded:
                return key_group
        while self._next < len(self._order):
            key_group = self._order[self._next]
            if key_group in self._unloaded:
                return key_group
            self._next += 1
        return None

    def _run(self) -> None:
        views: dict[int, memoryview] = {}
        # (handle, key group) -> its segments (one per state)
        segments: dict[tuple[int, int], list[SegmentView]] = {}
        try:
            while True:
                with self._cond:
                    if self._closed:
                        return
                    target = self._next_target()
                if target is None:
                    break
                for index in self._sources[target]:
                    if index not in views:
                        views[index] = self._index(index, segments)
                for index in self._sources[target]:
                    for segment in segments.pop((index, target), ()):
                        if self._closed:
                            return
                        self._backend.load_segment(segment)
                with self._cond:
                    self._unloaded.discard(target)
                    self.load_order.append(target)
                    self._cond.notify_all()
            with self._cond:
                self._done = True
                self.finished_at = time.perf_counter()
                self._cond.notify_all()
            if self._backend._restore_gate is self:
                self._backend._restore_gate = None  # no more waiting on the task path
        except BaseException as err:  # surfaced on the task thread
            log.warning("lazy restore of %s failed: %s", self._owned, err)
            with self._cond:
                self._error = err
                self._cond.notify_all()
        finally:
            views.clear()

    def _index(self, index: int, segments: dict[tuple[int, int], list[SegmentView]]
               ) -> memoryview:
        view = memoryview(self._fetch(self._handles[index]))
        for segment in read_index(view).segments(view, self._owned):
            if index in self._sources.get(segment.key_group, ()):
                segments.setdefault((index, segment.key_group), []).append(segment)
        return view

"""The conformance suite of keyed state backends: what every implementation of
:class:`~weir.state.backend.KeyedStateBackend` (``hashmap``, ``rocksdb``, or a new one) must
do, whatever it keeps its state in.

A backend is given as a *maker*: ``maker(max_parallelism, key_groups, clock)`` returns a
fresh, empty backend owning ``key_groups`` (``clock``: seconds, for the time to live; None
for the wall clock). Every check makes the backends it needs and disposes them. Run them all
with :func:`check_state_backend`, or one by one (:data:`STATE_BACKEND_CHECKS`, e.g. to
report each on its own).

What is checked: value, list, map, reducing and aggregating state per key; a state name
keeps its kind; keys outside the owned key groups are refused; a snapshot is frozen while
processing goes on; the time to live and its update and visibility modes; timers (event and
processing time) live in the backend and come back with a restore; canonical snapshots round
trip (to the same backend, and from the reference ``hashmap`` backend byte for byte); a
native snapshot restores through checkpoint storage, and refuses a restored state declared
as another kind; rescaling restores every key exactly once, into the subtask that owns its
key group (the others are clipped away).

Example:
    >>> from weir.state.heap import HeapKeyedStateBackend
    >>> check_state_backend(lambda max_parallelism, key_groups, clock:
    ...                     HeapKeyedStateBackend(max_parallelism, key_groups, clock))
"""

from __future__ import annotations

import contextlib
import io
import random
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

from weir.core.clock import ManualClock
from weir.core.errors import IncompatibleStateError, StateError
from weir.core.ids import CheckpointId, JobId
from weir.core.processing_time import ProcessingTimeService
from weir.core.time import Time
from weir.state.backend import KeyedStateBackend
from weir.state.canonical import read_canonical, write_canonical
from weir.state.descriptors import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    ValueStateDescriptor,
)
from weir.state.heap import HeapKeyedStateBackend
from weir.state.key_groups import KeyGroupRange, assign_to_key_group, key_group_range_for_operator
from weir.state.restore import restore, restore_canonical
from weir.state.serializers import deserialize_value, encode_key
from weir.state.timers import InternalTimerService, Timer
from weir.testing.asserts import raises

MAX_PARALLELISM = 128
ALL = KeyGroupRange(0, MAX_PARALLELISM - 1)


class BackendMaker(Protocol):
    """Makes a fresh, empty backend of the implementation under test."""

    def __call__(self, max_parallelism: int, key_groups: KeyGroupRange,
                 clock: Callable[[], float] | None = None) -> KeyedStateBackend: ...


@contextlib.contextmanager
def _backends(maker: BackendMaker) -> Iterator[Callable[..., KeyedStateBackend]]:
    """``make(key_groups=ALL, clock=None)`` within the block; disposes all it made."""
    made: list[KeyedStateBackend] = []

    def make(key_groups: KeyGroupRange = ALL,
             clock: Callable[[], float] | None = None) -> KeyedStateBackend:
        made.append(maker(MAX_PARALLELISM, key_groups, clock))
        return made[-1]

    try:
        yield make
    finally:
        for backend in made:
            backend.dispose()


def canonical_bytes(backend: KeyedStateBackend) -> bytes:
    """The canonical (backend-independent) snapshot of ``backend``'s state."""
    out = io.BytesIO()
    write_canonical(backend.entries(), out)
    return out.getvalue()


def fill_counts(backend: KeyedStateBackend, keys: list[Any]) -> dict[bytes, int]:
    """Write ``i + 1`` to value state ``count`` of the ``i``-th of ``keys``; returns what a
    restore must find, by encoded key."""
    count = backend.get_state(ValueStateDescriptor("count"))
    expected = {}
    for i, key in enumerate(keys):
        backend.set_current_key(key)
        count.update(i + 1)
        expected[encode_key(key)] = i + 1
    return expected


def fill_randomly(backend: KeyedStateBackend, seed: int, keys: int = 200) -> None:
    """2,000 random writes and deletes of value, list and map state (``v``, ``l``, ``m``)
    under ``keys`` keys of three kinds (ints, strings, tuples): the same ``seed`` makes the
    same state in any backend."""
    rng = random.Random(seed)
    value = backend.get_state(ValueStateDescriptor("v"))
    items = backend.get_state(ListStateDescriptor("l"))
    table = backend.get_state(MapStateDescriptor("m"))
    for _ in range(2000):
        backend.set_current_key(rng.choice([rng.randrange(keys), f"k{rng.randrange(keys)}",
                                            (rng.randrange(9), "t")]))
        op = rng.randrange(6)
        if op == 0:
            value.update(rng.random())
        elif op == 1:
            value.clear()
        elif op == 2:
            items.add(rng.randrange(100))
        elif op == 3:
            table.put(rng.randrange(5), rng.random())
        elif op == 4:
            table.remove(rng.randrange(5))
        else:
            items.clear()


# -- the checks --------------------------------------------------------------------------------


class _Average:
    def create_accumulator(self) -> tuple[int, int]:
        return (0, 0)

    def add(self, value: int, acc: tuple[int, int]) -> tuple[int, int]:
        return (acc[0] + value, acc[1] + 1)

    def get_result(self, acc: tuple[int, int]) -> float:
        return acc[0] / acc[1]


def check_state_kinds(maker: BackendMaker) -> None:
    """Value, list, map, reducing and aggregating state, each key on its own."""
    with _backends(maker) as make:
        backend = make()
        value = backend.get_state(ValueStateDescriptor("v"))
        items = backend.get_state(ListStateDescriptor("l"))
        table = backend.get_state(MapStateDescriptor("m"))
        total = backend.get_state(ReducingStateDescriptor("r", lambda a, b: a + b))
        mean = backend.get_state(AggregatingStateDescriptor("a", _Average()))
        for key in ("x", "y"):
            backend.set_current_key(key)
            assert value.value() is None and items.get() == [] and table.is_empty()
            assert total.get() is None and mean.get() is None
            value.update(key * 2)
            items.add(1)
            items.add_all([2, 3])
            table.put("a", 1)
            table.put_all({"b": 2, "c": 3})
            table.remove("a")
            for n in (1, 2, 6):
                total.add(n)
                mean.add(n)
        backend.set_current_key("x")
        assert value.value() == "xx" and items.get() == [1, 2, 3]
        assert table.items() == [("b", 2), ("c", 3)] and table.get("a") is None
        assert table.contains("b") and not table.contains("a")
        assert total.get() == 9 and mean.get() == 3
        items.update([7])
        value.clear()
        assert items.get() == [7] and value.value() is None
        backend.set_current_key("y")
        assert value.value() == "yy" and items.get() == [1, 2, 3]
        assert sorted(backend.keys("v")) == ["y"]


def check_a_state_name_keeps_its_kind(maker: BackendMaker) -> None:
    """A name registered as one kind of state cannot be used as another."""
    with _backends(maker) as make:
        backend = make()
        backend.get_state(ValueStateDescriptor("s"))
        with raises(StateError, "already registered as value"):
            backend.get_state(ListStateDescriptor("s"))


def check_key_groups(maker: BackendMaker) -> None:
    """A backend takes only keys of the key groups it owns, and holds nothing else."""
    with _backends(maker) as make:
        backend = make(KeyGroupRange(0, 0))
        key = next(k for k in range(1000) if assign_to_key_group(k, MAX_PARALLELISM) != 0)
        with raises(StateError, "does not own"):
            backend.set_current_key(key)
        half = make(KeyGroupRange(0, 63))
        count = half.get_state(ValueStateDescriptor("count"))
        owned = [k for k in range(500) if assign_to_key_group(k, MAX_PARALLELISM) < 64]
        for k in owned:
            half.set_current_key(k)
            count.update(k)
        assert sorted(half.keys("count")) == owned
        assert all(0 <= entry[1] < 64 for entry in half.entries())


def check_snapshot_is_frozen_while_processing_goes_on(maker: BackendMaker) -> None:
    """A snapshot shows the state when it was taken, whatever is written afterwards."""
    with _backends(maker) as make:
        backend = make()
        value = backend.get_state(ValueStateDescriptor("v"))
        items = backend.get_state(ListStateDescriptor("l"))
        table = backend.get_state(MapStateDescriptor("m"))
        backend.set_current_key("k")
        value.update(1)
        items.add("a")
        table.put("x", 1)
        before = canonical_bytes(backend)
        frozen = backend.snapshot()
        value.update(2)
        items.add("b")  # an in-place change of a list shared with the snapshot
        table.put("y", 2)
        backend.set_current_key("other")
        value.update(3)
        out = io.BytesIO()
        write_canonical(frozen.entries(), out)
        frozen.release()
        assert out.getvalue() == before
        backend.set_current_key("k")
        assert (value.value(), items.get(), table.items()) == (2, ["a", "b"],
                                                               [("x", 1), ("y", 2)])


def check_time_to_live(maker: BackendMaker) -> None:
    """Entries expire after their time to live (restarted on write, or on read and write);
    an expired entry is visible once more when so configured, and cleaned up by that read."""
    clock = ManualClock(1_000_000)
    with _backends(maker) as make:
        backend = make(clock=lambda: clock() / 1000)
        on_write = ValueStateDescriptor("w")
        on_write.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(10)).build())
        on_read = ValueStateDescriptor("r")
        on_read.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(10))
                                    .update_ttl_on_read_and_write().build())
        visible = ListStateDescriptor("e")
        visible.enable_time_to_live(StateTtlConfig.new_builder(Time.seconds(10))
                                    .return_expired_if_not_cleaned_up().build())
        w, r, e = (backend.get_state(d) for d in (on_write, on_read, visible))
        backend.set_current_key("k")
        w.update("w")
        r.update("r")
        e.add("e")
        clock.advance(6_000)
        assert w.value() == "w" and r.value() == "r"  # the read restarts r's clock
        clock.advance(6_000)
        assert w.value() is None, "expired 12 s after its write"
        assert r.value() == "r", "read 6 s ago"
        assert e.get() == ["e"], "expired but still visible once, as configured"
        assert e.get() == [], "and cleaned up by that read"
        clock.advance(11_000)
        assert r.value() is None


class _Fired:
    """The timers a timer service fired, with the backend's current key at the time."""

    def __init__(self, backend: KeyedStateBackend) -> None:
        self.backend = backend
        self.event: list[tuple[Any, int, Any]] = []
        self.processing: list[tuple[Any, int, Any]] = []

    def on_event_time(self, timer: Timer) -> None:
        assert self.backend.current_key == timer.key
        self.event.append((timer.key, timer.timestamp, timer.namespace))

    def on_processing_time(self, timer: Timer) -> None:
        assert self.backend.current_key == timer.key
        self.processing.append((timer.key, timer.timestamp, timer.namespace))


def check_timers(maker: BackendMaker) -> None:
    """Timers are keyed state: registered twice they fire once, deleted ones never, and
    they come back with a restore (also into several subtasks, each firing its own keys')
    in timestamp order, with the timer's key as the current key."""
    now = ManualClock(0)
    with _backends(maker) as make:
        backend = make()
        fired = _Fired(backend)
        timers = InternalTimerService("op", backend, ProcessingTimeService(now), fired)
        for key, at in (("ann", 30), ("bob", 10), ("cyd", 20), ("dan", 40)):
            backend.set_current_key(key)
            timers.register_event_time_timer("w", at)
            timers.register_event_time_timer("w", at)      # the same timer: kept once
            timers.register_processing_time_timer(None, at * 10)
        backend.set_current_key("dan")
        timers.delete_event_time_timer("w", 40)
        assert timers.advance_watermark(15) == 1
        assert fired.event == [("bob", 10, "w")]
        snapshot = canonical_bytes(backend)

        restored = make()
        fired_again = _Fired(restored)
        again = InternalTimerService("op", restored, ProcessingTimeService(now), fired_again)
        restore_canonical(restored, [snapshot])
        assert again.restore() == (2, 4)
        assert again.advance_watermark(100) == 2
        assert fired_again.event == [("cyd", 20, "w"), ("ann", 30, "w")]
        now.advance(250)
        assert again.fire_processing_time(now()) == 2
        assert fired_again.processing == [("bob", 100, None), ("cyd", 200, None)]

        halves = [make(key_groups) for key_groups in _subtasks(2)]
        seen = []
        for half in halves:
            recorder = _Fired(half)
            service = InternalTimerService("op", half, ProcessingTimeService(now), recorder)
            restore_canonical(half, [snapshot])
            service.restore()
            service.advance_watermark(100)
            assert all(assign_to_key_group(key, MAX_PARALLELISM) in half.key_group_range
                       for key, _, _ in recorder.event)
            seen += recorder.event
        assert sorted(seen) == [("ann", 30, "w"), ("cyd", 20, "w")]


def check_canonical_snapshots_round_trip(maker: BackendMaker) -> None:
    """A canonical snapshot restores into a fresh backend as the same bytes: one the backend
    wrote itself, and one the reference (hashmap) backend wrote."""
    heap = HeapKeyedStateBackend(MAX_PARALLELISM, ALL)
    fill_randomly(heap, seed=3)
    original = canonical_bytes(heap)
    assert len(list(read_canonical(original, ALL))) > 100
    with _backends(maker) as make:
        target = make()
        restore_canonical(target, [original])
        target.get_state(ValueStateDescriptor("v"))
        assert canonical_bytes(target) == original

        own = make()
        fill_randomly(own, seed=5)
        written = canonical_bytes(own)
        again = make()
        restore_canonical(again, [written])
        assert canonical_bytes(again) == written


def check_snapshot_to_storage_and_restore(maker: BackendMaker) -> None:
    """A snapshot to checkpoint storage records each state's kind and restores (through the
    storage) into a fresh backend; declaring a restored state as another kind fails with a
    message naming the operator and the state, not with garbage reads."""
    from weir.checkpoint.storage import create_storage
    from weir.state.snapshot import SnapshotLocation

    with tempfile.TemporaryDirectory(prefix="weir-check-") as tmp, _backends(maker) as make:
        storage = create_storage(str(Path(tmp) / "checkpoints"))
        old = make()
        old.get_state(ValueStateDescriptor("count"))
        old.set_current_key("k")
        old.get_state(ValueStateDescriptor("count")).update(3)
        handle = old.snapshot_to(CheckpointId(1), SnapshotLocation.for_checkpoint(
            storage, JobId("j"), CheckpointId(1), "op")).run()
        assert getattr(handle, "state_kinds", None) == {"count": "value"}
        same, other = make(), make()
        restore(same, [handle], storage)
        same.set_current_key("k")
        assert same.get_state(ValueStateDescriptor("count")).value() == 3
        restore(other, [handle], storage)
        other.owner = "counts"
        with raises(IncompatibleStateError, r"operator 'counts'.*'count' is value"):
            other.get_state(ListStateDescriptor("count"))


def _subtasks(parallelism: int) -> list[KeyGroupRange]:
    return [key_group_range_for_operator(MAX_PARALLELISM, parallelism, i)
            for i in range(parallelism)]


#: (old, new) parallelism of the rescaling check: split, merge, and both at once.
RESCALINGS = ((1, 8), (3, 2), (2, 3), (8, 1))


def check_rescaling(maker: BackendMaker) -> None:
    """Snapshots of the subtasks at one parallelism restore at another with every key
    exactly once, in the subtask owning its key group: what a subtask does not own is
    clipped away."""
    keys: list[Any] = [f"user-{i}" for i in range(300)] + list(range(300))
    with _backends(maker) as make:
        source = make()
        expected = fill_counts(source, keys)
        whole = canonical_bytes(source)
        for old, new in RESCALINGS:
            snapshots = []
            for key_groups in _subtasks(old):
                part = make(key_groups)
                restore_canonical(part, [whole])
                snapshots.append(canonical_bytes(part))
            seen: dict[bytes, int] = {}
            for key_groups in _subtasks(new):
                target = make(key_groups)
                restore_canonical(target, snapshots)
                for _, key_group, key, _, value in target.entries():
                    assert key_group in key_groups, (old, new, key_group, key_groups)
                    assert key not in seen, "a key restored into two subtasks"
                    seen[key] = deserialize_value(value)
            assert seen == expected, (old, new)


#: Every check of the suite, in the order :func:`check_state_backend` runs them.
STATE_BACKEND_CHECKS: tuple[Callable[[BackendMaker], None], ...] = (
    check_state_kinds,
    check_a_state_name_keeps_its_kind,
    check_key_groups,
    check_snapshot_is_frozen_while_processing_goes_on,
    check_time_to_live,
    check_timers,
    check_canonical_snapshots_round_trip,
    check_snapshot_to_storage_and_restore,
    check_rescaling,
)


def check_state_backend(maker: BackendMaker) -> None:
    """Run every check of the suite against the backends ``maker`` makes; raises
    AssertionError (naming what differs) at the first one that fails."""
    for check in STATE_BACKEND_CHECKS:
        check(maker)

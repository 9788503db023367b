"""Operator (non-keyed) state: handles, the snapshot format, list vs union redistribution,
CheckpointedFunction, and the file sink's part-counter state."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from weir.core.errors import StateError
from weir.state.descriptors import ListStateDescriptor, ValueStateDescriptor
from weir.state.operator_state import (
    FORMAT_VERSION,
    MAGIC,
    CheckpointedFunction,
    DistributionMode,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    OperatorStateBackend,
    decode_snapshot,
    redistribute,
)

LIST = ListStateDescriptor("offsets")
UNION = ListStateDescriptor("seen")


def test_list_state_handle_semantics():
    backend = OperatorStateBackend()
    state = backend.get_list_state(LIST)
    assert state.get() == []
    state.add(1)
    state.add_all([2, 3])
    assert state.get() == [1, 2, 3]
    state.get().append(99)  # get() is a copy
    assert state.get() == [1, 2, 3]
    state.update([7])
    assert state.get() == [7]
    state.update([])
    assert state.get() == []
    state.add_all([4])
    state.clear()
    assert state.get() == []
    with pytest.raises(StateError, match="None"):
        state.add(None)
    with pytest.raises(StateError, match="None"):
        state.add_all([1, None])
    assert state.get() == []
    assert backend.get_list_state(ListStateDescriptor("offsets")) is state


def test_a_name_keeps_its_mode_and_needs_a_list_descriptor():
    backend = OperatorStateBackend()
    backend.get_list_state(LIST)
    with pytest.raises(StateError, match="is list state, not union list state"):
        backend.get_union_list_state(ListStateDescriptor("offsets"))
    with pytest.raises(StateError, match="ListStateDescriptor"):
        backend.get_list_state(ValueStateDescriptor("v"))  # type: ignore[arg-type]


def test_snapshot_format_is_versioned_and_round_trips():
    backend = OperatorStateBackend()
    backend.get_list_state(LIST).add_all([("split-a", 3), {"nested": [1, 2]}])
    backend.get_union_list_state(UNION).add("x")
    backend.get_list_state(ListStateDescriptor("empty"))
    data = backend.snapshot()
    assert data[:len(MAGIC)] == MAGIC and data[len(MAGIC)] == FORMAT_VERSION
    decoded = decode_snapshot(data)
    assert {name: (mode, len(raw)) for name, (mode, raw) in decoded.items()} == {
        "empty": (DistributionMode.SPLIT_DISTRIBUTE, 0),
        "offsets": (DistributionMode.SPLIT_DISTRIBUTE, 2),
        "seen": (DistributionMode.UNION, 1),
    }
    restored = OperatorStateBackend()
    restored.restore([data], 0, 1)
    assert restored.is_restored
    assert restored.get_list_state(LIST).get() == [("split-a", 3), {"nested": [1, 2]}]
    assert restored.get_union_list_state(UNION).get() == ["x"]


def test_an_empty_backend_snapshots_and_restores():
    data = OperatorStateBackend().snapshot()
    restored = OperatorStateBackend()
    restored.restore([data, None], 1, 3)
    assert restored.is_restored
    assert restored.state_names == []
    assert restored.get_list_state(LIST).get() == []


@pytest.mark.parametrize("damage", [
    lambda d: b"NOTWEIR" + d[7:],
    lambda d: d[:len(MAGIC)] + bytes([FORMAT_VERSION + 1]) + d[len(MAGIC) + 1:],
    lambda d: d[:-3],
    lambda d: d + b"\x00",
])
def test_damaged_snapshots_are_refused_with_a_state_error(damage):
    backend = OperatorStateBackend()
    backend.get_list_state(LIST).add_all(["a", "b"])
    with pytest.raises(StateError):
        OperatorStateBackend().restore([damage(backend.snapshot())], 0, 1)


def test_restore_only_once_and_before_registration():
    backend = OperatorStateBackend()
    backend.get_list_state(LIST)
    with pytest.raises(StateError, match="only once"):
        backend.restore([], 0, 1)
    fresh = OperatorStateBackend()
    fresh.restore([], 0, 1)
    with pytest.raises(StateError, match="only once"):
        fresh.restore([], 0, 1)


def test_conflicting_modes_across_old_subtasks_are_refused():
    a, b = OperatorStateBackend(), OperatorStateBackend()
    a.get_list_state(ListStateDescriptor("s")).add(1)
    b.get_union_list_state(ListStateDescriptor("s")).add(2)
    with pytest.raises(StateError, match="'s'"):
        OperatorStateBackend().restore([a.snapshot(), b.snapshot()], 0, 1)


def test_restored_state_asked_for_in_another_mode_is_refused_and_kept():
    old = OperatorStateBackend()
    old.get_union_list_state(UNION).add_all([1, 2])
    restored = OperatorStateBackend()
    restored.restore([old.snapshot()], 0, 1)
    with pytest.raises(StateError, match="union list state, not list state"):
        restored.get_list_state(ListStateDescriptor("seen"))
    assert restored.get_union_list_state(UNION).get() == [1, 2]


def test_restored_states_nobody_asks_for_survive_later_snapshots():
    old = OperatorStateBackend()
    old.get_list_state(ListStateDescriptor("legacy")).add_all(["kept", "too"])
    middle = OperatorStateBackend()
    middle.restore([old.snapshot()], 0, 1)
    middle.get_list_state(LIST).add(5)  # the new version only uses another state
    last = OperatorStateBackend()
    last.restore([middle.snapshot()], 0, 1)
    assert last.get_list_state(ListStateDescriptor("legacy")).get() == ["kept", "too"]
    assert last.get_list_state(LIST).get() == [5]


def test_only_the_own_share_is_unpickled():
    class Bomb:
        def __reduce__(self):
            return (_explode, ())

    old = OperatorStateBackend()
    old.get_list_state(LIST).add_all(["mine", Bomb()])
    restored = OperatorStateBackend()
    restored.restore([old.snapshot()], 0, 2)  # element 1 (the bomb) belongs to subtask 1
    assert restored.get_list_state(LIST).get() == ["mine"]


def _explode():
    raise AssertionError("unpickled an element of another subtask")


def test_unpicklable_elements_name_the_state():
    backend = OperatorStateBackend()
    backend.get_list_state(LIST).add(lambda: 1)
    with pytest.raises(StateError, match="'offsets'"):
        backend.snapshot()


# --- redistribution --------------------------------------------------------------------


def old_backends(contents: list[tuple[list[int], list[int]]]) -> list[bytes]:
    snapshots = []
    for list_elements, union_elements in contents:
        backend = OperatorStateBackend()
        backend.get_list_state(LIST).update(list_elements)
        backend.get_union_list_state(UNION).update(union_elements)
        snapshots.append(backend.snapshot())
    return snapshots


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 8).flatmap(lambda p: st.lists(
           st.tuples(st.lists(st.integers(), max_size=12), st.lists(st.integers(), max_size=4)),
           min_size=p, max_size=p)),
       st.integers(1, 8))
def test_list_state_is_dealt_and_union_state_is_copied(contents, new_parallelism):
    old_parallelism = len(contents)
    snapshots = old_backends(contents)
    shares, unions = [], []
    for index in range(new_parallelism):
        backend = OperatorStateBackend()
        backend.restore(snapshots, index, new_parallelism)
        shares.append(backend.get_list_state(LIST).get())
        unions.append(backend.get_union_list_state(UNION).get())
    old_lists = [c[0] for c in contents]
    everything = [e for elements in old_lists for e in elements]
    # List state: every element exactly once...
    assert Counter(e for share in shares for e in share) == Counter(everything)
    if new_parallelism == old_parallelism:
        # ...kept in place when the parallelism does not change...
        assert shares == old_lists
    else:
        # ...else dealt round-robin: sizes differ by at most one, order kept per subtask.
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        assert shares == [everything[i::new_parallelism] for i in range(new_parallelism)]
    # Union state: every new subtask gets all elements, in old-subtask order.
    all_union = [e for c in contents for e in c[1]]
    assert unions == [all_union] * new_parallelism
    assert redistribute(old_lists, DistributionMode.SPLIT_DISTRIBUTE, new_parallelism) == shares


def test_rescaling_an_empty_subtask_set_gives_empty_states():
    assert redistribute([], DistributionMode.SPLIT_DISTRIBUTE, 3) == [[], [], []]
    assert redistribute([], DistributionMode.UNION, 2) == [[], []]
    with pytest.raises(ValueError, match="subtask index"):
        OperatorStateBackend().restore([], 2, 2)


# --- CheckpointedFunction ---------------------------------------------------------------


class CountingFunction(CheckpointedFunction):
    """Counts records per subtask; the counts survive restarts and rescaling (union)."""

    def __init__(self) -> None:
        self.count = 0
        self.restored_total = 0

    def initialize_state(self, context: FunctionInitializationContext) -> None:
        self.state = context.get_operator_state_store().get_union_list_state(
            ListStateDescriptor("counts"))
        if context.is_restored():
            self.restored_total = sum(self.state.get())

    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        self.state.update([self.restored_total + self.count]
                          if context.get_checkpoint_id() == 1 else [self.count])


def test_checkpointed_function_lifecycle():
    backends = [OperatorStateBackend() for _ in range(3)]
    functions = [CountingFunction() for _ in backends]
    for i, (fn, backend) in enumerate(zip(functions, backends, strict=True)):
        context = FunctionInitializationContext(backend)
        assert not context.is_restored()
        fn.initialize_state(context)
        fn.count = 10 * (i + 1)
        fn.snapshot_state(FunctionSnapshotContext(1, 1_000))
    snapshots = [b.snapshot() for b in backends]
    restored = CountingFunction()
    backend = OperatorStateBackend()
    backend.restore(snapshots, 0, 1)
    context = FunctionInitializationContext(backend)
    assert context.is_restored()
    restored.initialize_state(context)
    assert restored.restored_total == 60
    with pytest.raises(StateError, match="keyed stream"):
        context.get_keyed_state_store()
    assert FunctionInitializationContext(backend, keyed_state_store="store"
                                         ).get_keyed_state_store() == "store"
    assert FunctionSnapshotContext(4, 99).get_checkpoint_timestamp() == 99

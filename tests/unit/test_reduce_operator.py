"""``reduce``: the batched path (a write-back cache of totals) computes what the
per-record path computes, and the backend holds every total by each snapshot."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.support.operators import OperatorHarness
from weir.checkpoint.storage import create_storage
from weir.datastream.functions import ReduceFunction, RuntimeContext
from weir.operators import keyed
from weir.operators.keyed import ReduceOperator
from weir.operators.keys import FunctionKeySpec
from weir.state.backend import MISSING
from weir.state.key_groups import assign_to_key_group
from weir.state.snapshot import SnapshotLocation


def add(a: tuple[Any, int], b: tuple[Any, int]) -> tuple[Any, int]:
    return (a[0], a[1] + b[1])


def add_until_ten(a: tuple[Any, int], b: tuple[Any, int]) -> tuple[Any, int] | None:
    """Returns None (which clears the state) once a total would pass 10."""
    total = a[1] + b[1]
    return None if total > 10 else (a[0], total)


class PerRecord(ReduceFunction):
    """The same function with an ``open``: it may use keyed state, so the operator gives
    it a current key per record (the per-record path)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def open(self, runtime_context: RuntimeContext) -> None:
        self.opened = True

    def reduce(self, value1: Any, value2: Any) -> Any:
        return self.fn(value1, value2)


def run(fn: Any, batches: list[list[Any]], backend: str, directory: Path
        ) -> tuple[ReduceOperator, list[Any]]:
    operator = ReduceOperator("r", FunctionKeySpec(lambda r: r[0]), fn)
    harness = OperatorHarness(operator, config={
        "state.backend.type": backend, "state.backend.rocksdb.localdir": str(directory)})
    for batch in batches:
        harness.process(batch)
    return operator, harness.output.records


def stored(operator: ReduceOperator, key: Any) -> Any:
    assert operator.backend is not None
    value = operator.backend.get_many("reduce", [assign_to_key_group(key, 128)], [key])[0]
    return None if value is MISSING else value


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
@pytest.mark.parametrize("fn", [add, add_until_ten])
def test_batched_reduce_emits_what_the_per_record_path_emits(backend: str, fn: Any,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    monkeypatch.setattr(keyed, "_CACHE_KEYS", 5)  # evict often, with 12 keys
    rng = random.Random(7)
    keys: list[Any] = [f"k{i}" for i in range(8)] + [1, 2, b"x", 10**30]
    # Some batches mix 1 and True (equal in a dict, distinct keys in the backend): those
    # take the per-record path, in between batched ones.
    batches = [[(rng.choice(keys), rng.randint(1, 4)) for _ in range(rng.randint(1, 30))]
               + ([(True, 1)] if b % 4 == 3 else []) for b in range(40)]
    batched, out = run(fn, batches, backend, tmp_path)
    per_record, expected = run(PerRecord(fn), batches, backend, tmp_path)
    assert batched._batched and not per_record._batched
    assert out == expected
    # Independently: a plain fold per key over the records in order.
    totals: dict[Any, Any] = {}
    fold = []
    for record in (r for batch in batches for r in batch):
        key = (type(record[0]), record[0])
        total = totals.get(key)
        total = record if total is None else fn(total, record)
        totals[key] = total
        fold.append(total)
    assert out == fold


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_a_snapshot_holds_every_total_the_cache_changed(backend: str, tmp_path: Path) -> None:
    operator, out = run(add, [[("a", 1), ("b", 2)], [("a", 3)]], backend, tmp_path / "db")
    assert out == [("a", 1), ("b", 2), ("a", 4)]
    assert stored(operator, "a") is None  # still only in the cache
    location = SnapshotLocation.for_checkpoint(create_storage(str(tmp_path)), "job", 1, "r")
    operator.snapshot_state(1, 0, location)
    assert stored(operator, "a") == ("a", 4) and stored(operator, "b") == ("b", 2)


def test_totals_in_the_backend_are_read_once_then_kept() -> None:
    operator = ReduceOperator("r", FunctionKeySpec(lambda r: r[0]), add)
    harness = OperatorHarness(operator)
    assert operator.backend is not None
    operator.backend.put_many("reduce", [assign_to_key_group("a", 128)], ["a"], None,
                              [("a", 100)])  # as a restore leaves it
    harness.process([("a", 1)])
    operator.backend.put_many("reduce", [assign_to_key_group("a", 128)], ["a"], None,
                              [("a", -1)])  # not read again: the cache has the total
    harness.process([("a", 1)])
    assert harness.output.records == [("a", 101), ("a", 102)]

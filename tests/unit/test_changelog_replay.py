"""Applying a restored state change log (state/changelog_replay.py): indexing it by row and
applying the rows in any order, some when touched and the rest in chunks, leaves the same
state as replaying every change in order, over both backends."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.support.state_backends import ALL, KINDS, MAX_PAR, Backends
from weir.checkpoint.changelog_storage import VerifiedPiece, frame_piece
from weir.state.backend import KeyedStateBackend
from weir.state.changelog_replay import (
    APPEND,
    DELETE,
    PUT,
    PendingLog,
    encode_change,
    replay,
    row_id,
)
from weir.state.descriptors import ListStateDescriptor, ValueStateDescriptor
from weir.state.key_groups import assign_to_key_group
from weir.state.serializers import encode_key, serialize_value

KEYS = [f"k{i}" for i in range(12)]
NAMESPACES = [None, "w1"]


def _random_log(rng: random.Random, changes: int) -> list[tuple[int, bytes]]:
    """(key group, payload) of random puts, deletes and appends of a value state and a
    list state, over few rows so that rows change many times."""
    out = []
    for _ in range(changes):
        key, namespace = rng.choice(KEYS), rng.choice(NAMESPACES)
        state = rng.choice(["total", "seen"])
        op = rng.choice([PUT, PUT, DELETE, APPEND, APPEND]) if state == "seen" else \
            rng.choice([PUT, PUT, PUT, DELETE])
        if op == PUT:
            value = serialize_value([rng.randrange(100)] if state == "seen"
                                    else rng.randrange(1000))
        elif op == APPEND:
            value = serialize_value([rng.randrange(100) for _ in range(rng.randrange(1, 3))])
        else:
            value = b""
        out.append((assign_to_key_group(key, MAX_PAR),
                    encode_change(op, state, encode_key(key), encode_key(namespace), value)))
    return out


def _pieces(log: list[tuple[int, bytes]], size: int,
            versions: tuple[int, ...] = (2,)) -> list[VerifiedPiece]:
    """The log in pieces of ``size`` changes; the first pieces in the first ``versions``,
    the rest in the last (a log written before and after an upgrade)."""
    pieces = []
    for number, first in enumerate(range(0, len(log), size)):
        part = log[first:first + size]
        version = versions[min(number, len(versions) - 1)]
        pieces.append(VerifiedPiece.of(frame_piece(
            first, [(first + n, kg, p) for n, (kg, p) in enumerate(part)], version)))
    return pieces


#: Every row the random log may change: (state, row id, key group).
ROWS = [(state, row_id(encode_key(key), encode_key(namespace)), assign_to_key_group(key, MAX_PAR))
        for state in ("total", "seen") for key in KEYS for namespace in NAMESPACES]


def _with_base(backend: KeyedStateBackend) -> KeyedStateBackend:
    """The materialized state the log applies to: a value and a list for half the rows."""
    total = backend.get_state(ValueStateDescriptor("total"))
    seen = backend.get_state(ListStateDescriptor("seen"))
    for i, key in enumerate(KEYS[::2]):
        backend.set_current_key(key)
        for namespace in NAMESPACES:
            total.set_current_namespace(namespace)
            seen.set_current_namespace(namespace)
            total.update(i)
            seen.add_all(["base", i])
    return backend


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("versions", [(2,), (1,), (1, 1, 2)], ids=["v2", "v1", "v1-then-v2"])
def test_rows_applied_in_any_order_equal_the_replay(kind: str, seed: int,
                                                    versions: tuple[int, ...], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import weir.state.changelog_replay as changelog_replay

    monkeypatch.setattr(changelog_replay, "REPLAY_BATCH", 3)  # several batches of puts
    rng = random.Random(seed)
    log = _random_log(rng, 400)
    backends = Backends(tmp_path)
    try:
        replayed = _with_base(backends(kind))
        assert replay(replayed, _pieces(log, 64, versions), (0, MAX_PAR - 1)) == len(log)
        expected = sorted(replayed.entries())

        # All rows in chunks, key groups indexed as the chunks need them.
        chunked = _with_base(backends(kind))
        pending = PendingLog()
        assert pending.add(_pieces(log, 64, versions), (0, MAX_PAR - 1)) == len(log)
        assert pending.rows >= len(log) if versions == (2,) else pending.rows > 0
        chunks = 0
        while pending.rows:
            assert pending.drain(chunked, 5) <= 5
            chunks += 1
        # A row of an old piece may be applied, and then its key group's later changes.
        assert chunks > 1 and 0 < pending.applied <= len(ROWS) * len(set(versions))
        assert sorted(chunked.entries()) == expected

        # Indexed at once, the log names each row it changes once.
        pending = PendingLog()
        pending.add(_pieces(log, 64, versions), (0, MAX_PAR - 1))
        pending.index()
        assert pending.rows == len({(state, row) for state, row, _ in ROWS
                                    if row in pending.tables.get(state, {})}) > 0

        # Some rows taken one by one first (as the task touches them), then the rest.
        touched = _with_base(backends(kind))
        pending = PendingLog()
        pending.add(_pieces(log, 50, versions), (0, MAX_PAR - 1))
        taken = 0
        for state, row, key_group in rng.sample(ROWS, len(ROWS) // 2):
            positions = pending.take(state, row, key_group)
            if positions is not None:
                taken += 1
                pending.apply(touched, positions)
            assert pending.take(state, row, key_group) is None  # once only
        assert taken > 0
        pending.drain(touched)
        assert pending.rows == 0
        assert sorted(touched.entries()) == expected
    finally:
        backends.dispose()


def test_only_the_key_groups_of_the_window_are_indexed() -> None:
    inside, outside = "k1", next(k for k in (f"x{i}" for i in range(1000))
                                 if assign_to_key_group(k, MAX_PAR) == MAX_PAR - 1)
    log = [(assign_to_key_group(key, MAX_PAR),
            encode_change(PUT, "total", encode_key(key), encode_key(None), serialize_value(1)))
           for key in (inside, outside, inside)]
    assert assign_to_key_group(inside, MAX_PAR) < MAX_PAR - 1
    for versions in ((1,), (2,)):
        pending = PendingLog()
        assert pending.add(_pieces(log, 2, versions), (0, MAX_PAR - 2)) == 2
        pending.index()
        assert pending.rows == 1 and pending.changes == 2


def test_a_key_group_is_indexed_when_first_touched() -> None:
    first, second = KEYS[0], next(k for k in KEYS if assign_to_key_group(k, MAX_PAR) !=
                                  assign_to_key_group(KEYS[0], MAX_PAR))
    groups = {key: assign_to_key_group(key, MAX_PAR) for key in (first, second)}
    log = [(groups[key], encode_change(PUT, "total", encode_key(key), encode_key(None),
                                       serialize_value(n)))
           for n, key in enumerate([first, second, first, second, second])]
    pending = PendingLog()
    pending.add(_pieces(log, 3), (0, MAX_PAR - 1))
    assert pending.tables == {} and pending.rows == 5
    assert pending.holds("total", groups[first]) and pending.holds("total", groups[second])
    row = row_id(encode_key(first), encode_key(None))
    assert isinstance(pending.take("total", row, groups[first]), int)  # its last put
    # Only the touched key group was indexed: the other's 3 changes wait.
    assert pending.rows == 3 and not pending.holds("other state", groups[first])
    assert pending.holds("total", groups[second])
    assert pending.take("total", row_id(encode_key(second), encode_key(None)),
                        groups[second]) is not None
    assert pending.rows == 0


def test_a_row_whose_log_starts_with_appends_builds_on_the_materialized_list(
        tmp_path: Path) -> None:
    backends = Backends(tmp_path)
    try:
        backend = backends("rocksdb", ALL)
        seen = backend.get_state(ListStateDescriptor("seen"))
        backend.set_current_key("k1")
        seen.add_all(["a", "b"])
        group = assign_to_key_group("k1", MAX_PAR)
        log = [(group, encode_change(APPEND, "seen", encode_key("k1"), encode_key(None),
                                     serialize_value([n]))) for n in (1, 2, 3)]
        pending = PendingLog()
        pending.add(_pieces(log, 2), (0, MAX_PAR - 1))
        positions: Any = pending.take("seen", row_id(encode_key("k1"), encode_key(None)), group)
        assert isinstance(positions, list) and len(positions) == 3
        pending.apply(backend, positions)
        backend.set_current_key("k1")
        assert seen.get() == ["a", "b", 1, 2, 3]
    finally:
        backends.dispose()


def test_reading_a_whole_state_indexes_that_state_alone(tmp_path: Path) -> None:
    log = [(assign_to_key_group(key, MAX_PAR),
            encode_change(PUT, state, encode_key(key), encode_key(None), serialize_value(1)))
           for key in KEYS for state in ("total", "seen")]
    backends = Backends(tmp_path)
    try:
        pending = PendingLog()
        pending.add(_pieces(log, 10), (0, MAX_PAR - 1))
        # What iterating the keys of "total" does (timers at restore read theirs so).
        assert pending.drain(backends("hashmap"), state="total") == len(KEYS)
        assert pending.rows == len(KEYS) and "seen" not in pending.tables
    finally:
        backends.dispose()

"""Applying a restored state change log (state/changelog_replay.py): indexing it by row and
applying the rows in any order, some when touched and the rest in chunks, leaves the same
state as replaying every change in order, over both backends."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from tests.support.state_backends import ALL, KINDS, MAX_PAR, Backends
from weir.checkpoint.changelog_storage import PIECE_HEADER_SIZE, VerifiedPiece, frame_piece
from weir.state.backend import KeyedStateBackend
from weir.state.changelog_replay import APPEND, DELETE, PUT, PendingLog, encode_change, replay
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


def _pieces(log: list[tuple[int, bytes]], size: int) -> list[VerifiedPiece]:
    pieces = []
    for first in range(0, len(log), size):
        part = log[first:first + size]
        data = frame_piece(first, [(first + n, kg, p) for n, (kg, p) in enumerate(part)])
        pieces.append(VerifiedPiece(data, PIECE_HEADER_SIZE, len(part)))
    return pieces


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
def test_rows_applied_in_any_order_equal_the_replay(kind: str, seed: int, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import weir.state.changelog_replay as changelog_replay

    monkeypatch.setattr(changelog_replay, "REPLAY_BATCH", 3)  # several batches of puts
    rng = random.Random(seed)
    log = _random_log(rng, 400)
    backends = Backends(tmp_path)
    try:
        replayed = _with_base(backends(kind))
        assert replay(replayed, _pieces(log, 64), (0, MAX_PAR - 1)) == len(log)
        expected = sorted(replayed.entries())

        # All rows in chunks.
        chunked = _with_base(backends(kind))
        pending = PendingLog()
        assert pending.add(_pieces(log, 64), (0, MAX_PAR - 1)) == len(log)
        rows = pending.rows
        assert 0 < rows <= len(KEYS) * len(NAMESPACES) * 2
        while pending.rows:
            before = pending.rows
            assert pending.drain(chunked, 5) == min(5, before)
        assert pending.applied == rows
        assert sorted(chunked.entries()) == expected

        # Some rows taken one by one first (as the task touches them), then the rest.
        touched = _with_base(backends(kind))
        pending = PendingLog()
        pending.add(_pieces(log, 50), (0, MAX_PAR - 1))
        for state, table in pending.tables.items():
            for row in rng.sample(sorted(table), len(table) // 2):
                positions = pending.take(state, row)
                assert positions is not None
                pending.apply(touched, positions)
                assert pending.take(state, row) is None  # once only
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
    pending = PendingLog()
    assert pending.add(_pieces(log, 2), (0, MAX_PAR - 2)) == 2
    assert pending.rows == 1 and pending.changes == 2


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
        positions: Any = pending.take("seen", next(iter(pending.tables["seen"])))
        assert isinstance(positions, list) and len(positions) == 3
        pending.apply(backend, positions)
        backend.set_current_key("k1")
        assert seen.get() == ["a", "b", 1, 2, 3]
    finally:
        backends.dispose()

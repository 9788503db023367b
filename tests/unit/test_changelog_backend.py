"""The changelog keyed backend (state/changelog.py) over both delegates: conformance,
checkpoints as materialization + log, materialization bookkeeping, restore (after one and
several materializations, rescaled, NO_CLAIM, into a plain backend), a corrupted log."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.state_backends import ALL, KINDS, MAX_PAR, Backends
from weir.checkpoint.changelog_storage import ChangelogStorage, ChangelogStorageOptions
from weir.checkpoint.shared_registry import SharedStateRegistry
from weir.checkpoint.storage import CheckpointStorageAccess, create_storage
from weir.core.errors import CorruptStateError, MissingStateError, StateError
from weir.core.ids import CheckpointId
from weir.state.backend import KeyedStateBackend
from weir.state.changelog import ChangelogKeyedStateBackend, ChangelogStateHandle
from weir.state.descriptors import ListStateDescriptor, MapStateDescriptor, ValueStateDescriptor
from weir.state.handles import KeyedStateHandle
from weir.state.key_groups import KeyGroupRange, key_group_range_for_operator
from weir.state.restore import restore
from weir.state.snapshot import SnapshotLocation
from weir.testing.state_backend import STATE_BACKEND_CHECKS

JOB = "job"


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Env:
    """Changelog backends over one storage and one log, and checkpoints of them."""

    def __init__(self, root: Path, kind: str) -> None:
        self.storage = create_storage(str(root / "checkpoints"))
        self.log = ChangelogStorage(self.storage, f"{JOB}/changelog",
                                    ChangelogStorageOptions(persist_delay_s=0.0))
        self.plain = Backends(root / "backends")
        self.kind = kind
        self.clock = _Clock()
        self.made: list[KeyedStateBackend] = []
        self.registry = SharedStateRegistry(self.storage)
        self.next_checkpoint = 1

    def backend(self, key_groups: KeyGroupRange = ALL, interval: float = 0.0,
                clock: Callable[[], float] | None = None, kind: str | None = None,
                max_failures: int = 3, local_root: Path | None = None,
                owner: str | None = None) -> ChangelogKeyedStateBackend:
        delegate = self.plain(kind or self.kind, key_groups, clock)
        owner = owner or f"op-{len(self.made)}"
        made = ChangelogKeyedStateBackend(
            delegate, self.log.create_writer(owner), self.storage, JOB, owner,
            materialize_interval=interval, max_failures=max_failures, clock=self.clock,
            local_root=local_root)
        self.made.append(made)
        return made

    def checkpoint(self, backend: KeyedStateBackend, register: bool = True) -> KeyedStateHandle:
        n = CheckpointId(self.next_checkpoint)
        self.next_checkpoint += 1
        handle = backend.snapshot_to(n, SnapshotLocation.for_checkpoint(
            self.storage, JOB, n, "op")).run()
        # What goes through the checkpoint metadata.
        handle = KeyedStateHandle.from_dict(json.loads(json.dumps(handle.to_dict())))
        if register:
            self.registry.register_checkpoint(n, [handle])
        backend.notify_checkpoint_complete(n)
        return handle

    def close(self) -> None:
        for backend in self.made:
            backend.dispose()
        self.plain.dispose()
        self.log.close()


@pytest.fixture(params=KINDS)
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    made = Env(tmp_path, str(request.param))
    yield made
    made.close()


def _await_materialization(backend: ChangelogKeyedStateBackend) -> None:
    running = backend._running
    assert running is not None
    running[2].result(timeout=30)
    backend._collect()


def _values(backend: KeyedStateBackend, keys: list[Any]) -> dict[Any, Any]:
    total = backend.get_state(ValueStateDescriptor("total"))
    out = {}
    for key in keys:
        backend.set_current_key(key)
        out[key] = total.value()
    return out


def _write(backend: KeyedStateBackend, keys: list[Any], add: int) -> None:
    total = backend.get_state(ValueStateDescriptor("total"))
    for key in keys:
        backend.set_current_key(key)
        total.update((total.value() or 0) + add)


KEYS = [f"key-{i}" for i in range(200)]


@pytest.mark.parametrize("check", STATE_BACKEND_CHECKS, ids=lambda c: c.__name__)
def test_conformance(env: Env, check: Callable[[Any], None]) -> None:
    def make(max_parallelism: int, key_groups: KeyGroupRange,
             clock: Callable[[], float] | None = None) -> KeyedStateBackend:
        assert max_parallelism == MAX_PAR
        return env.backend(key_groups, clock=clock)

    check(make)


def test_checkpoints_are_the_log_until_a_materialization(env: Env) -> None:
    backend = env.backend()
    _write(backend, KEYS, 1)
    first = env.checkpoint(backend)
    assert isinstance(first, ChangelogStateHandle)
    assert first.materialized == () and first.log_size > 0
    _write(backend, KEYS[:10], 1)
    second = env.checkpoint(backend)
    assert isinstance(second, ChangelogStateHandle)
    # The second checkpoint uploaded only its own changes, and names the first's log too.
    assert second.checkpointed_size < first.checkpointed_size
    assert set(first.log) < set(second.log)

    backend.materialize()
    _await_materialization(backend)
    _write(backend, KEYS[:5], 1)
    third = env.checkpoint(backend)
    assert isinstance(third, ChangelogStateHandle)
    assert third.materialization_id == 1 and len(third.materialized) == 1
    # Only the changes after the materialization.
    assert not set(third.log) & set(second.log)
    assert third.checkpointed_size > third.log_size  # the materialization, once
    fourth = env.checkpoint(backend)
    assert isinstance(fourth, ChangelogStateHandle)
    assert fourth.materialized == third.materialized and fourth.checkpointed_size == 0

    # Subsuming the older checkpoints frees the log files only they referred to.
    old_files = {s.file.uri for s in second.log}
    for n in (1, 2):
        env.registry.unregister_checkpoint(CheckpointId(n))
    assert not any(env.storage.exists(uri) for uri in old_files)
    assert all(env.storage.exists(f) for f in fourth.shared_state())


def test_periodic_materialization_on_the_injected_clock(env: Env) -> None:
    backend = env.backend(interval=60.0)
    _write(backend, KEYS, 1)
    assert backend._running is None
    env.clock.now = 61.0
    _write(backend, KEYS, 1)  # a write looks at the clock now and then
    assert backend._running is not None
    _await_materialization(backend)
    assert backend.metrics.completed == 1
    # Changes were written after it started: the next due time materializes them...
    env.clock.now = 200.0
    backend._maintain()
    _await_materialization(backend)
    # ...and then nothing changed: the next one starts nothing.
    env.clock.now = 400.0
    backend._maintain()
    assert backend._running is None and backend.metrics.completed == 2


def test_a_materialization_between_two_appends_restores_each_element_once(env: Env) -> None:
    backend = env.backend()
    items = backend.get_state(ListStateDescriptor("items"))
    backend.set_current_key("k")
    items.add(1)                # logged as a put of [1]
    env.checkpoint(backend)     # ends the log's piece
    backend.set_current_key("k")
    items.add(2)                # an append, in the next piece
    backend.materialize()       # holds [1, 2]
    _await_materialization(backend)
    backend.set_current_key("k")
    items.add(3)
    handle = env.checkpoint(backend)
    # The log the checkpoint names starts after the materialization: replaying the append
    # of 2 onto [1, 2] would give [1, 2, 2, 3].
    for target in (env.backend(), env.plain(env.kind)):
        restore(target, [handle], env.storage)
        target.set_current_key("k")
        assert target.get_state(ListStateDescriptor("items")).get() == [1, 2, 3]


@pytest.mark.parametrize("materializations", [0, 1, 3])
def test_restore_after_materializations(env: Env, materializations: int) -> None:
    backend = env.backend()
    expected: dict[Any, Any] = {}
    for round_ in range(materializations + 1):
        _write(backend, KEYS[round_ * 20:], round_ + 1)
        if round_ < materializations:
            backend.materialize()
            _await_materialization(backend)
    # Deletes and in-place mutations are logged too.
    backend.set_current_key(KEYS[0])
    backend.get_state(ValueStateDescriptor("total")).clear()
    items = backend.get_state(ListStateDescriptor("items"))
    tags = backend.get_state(MapStateDescriptor("tags"))
    for key in KEYS[:30]:
        backend.set_current_key(key)
        items.add(1)
        items.add(2)
        tags.put("a", key)
        tags.put("b", 1)
        tags.remove("b")
    expected = _values(backend, KEYS)
    handle = env.checkpoint(backend)
    assert isinstance(handle, ChangelogStateHandle)
    assert handle.materialization_id == materializations

    fresh = env.backend()
    restore(fresh, [handle], env.storage)
    assert _values(fresh, KEYS) == expected
    items = fresh.get_state(ListStateDescriptor("items"))
    tags = fresh.get_state(MapStateDescriptor("tags"))
    fresh.set_current_key(KEYS[3])
    assert items.get() == [1, 2] and tags.items() == [("a", KEYS[3])]
    # A plain backend restores the same (the changelog switched off).
    plain = env.plain(env.kind)
    restore(plain, [handle], env.storage)
    assert _values(plain, KEYS) == expected


def test_rescaling_2_3_2_equals_the_state_without_the_changelog(env: Env) -> None:
    def ranges(parallelism: int) -> list[KeyGroupRange]:
        return [key_group_range_for_operator(MAX_PAR, parallelism, i) for i in range(parallelism)]

    reference = env.plain(env.kind)
    subtasks = [env.backend(r) for r in ranges(2)]

    def write_all(add: int) -> None:
        _write(reference, KEYS, add)
        for backend in subtasks:
            mine = [k for k in KEYS if _owns(backend, k)]
            _write(backend, mine, add)

    write_all(1)
    subtasks[0].materialize()
    _await_materialization(subtasks[0])
    write_all(2)
    for parallelism in (3, 2):
        handles = [env.checkpoint(b) for b in subtasks]
        subtasks = [env.backend(r) for r in ranges(parallelism)]
        for backend in subtasks:
            restore(backend, handles, env.storage)
        write_all(parallelism)
        # Rescaled: the first checkpoint materializes (it names no other subtask's files).
        first = env.checkpoint(subtasks[0], register=False)
        assert isinstance(first, ChangelogStateHandle) and first.materialized
    merged: dict[Any, Any] = {}
    for backend in subtasks:
        merged.update(_values(backend, [k for k in KEYS if _owns(backend, k)]))
    assert merged == _values(reference, KEYS)


def _owns(backend: KeyedStateBackend, key: Any) -> bool:
    from weir.state.key_groups import assign_to_key_group

    return assign_to_key_group(key, MAX_PAR) in backend.key_group_range


def test_claim_builds_on_the_restored_checkpoint_and_no_claim_does_not(env: Env) -> None:
    backend = env.backend()
    _write(backend, KEYS, 1)
    backend.materialize()
    _await_materialization(backend)
    _write(backend, KEYS[:3], 1)
    handle = env.checkpoint(backend)
    assert isinstance(handle, ChangelogStateHandle)

    claimed = env.backend()
    restore(claimed, [handle], env.storage, build_on=True)
    _write(claimed, KEYS[:1], 1)
    after = env.checkpoint(claimed)
    assert isinstance(after, ChangelogStateHandle)
    assert after.materialized == handle.materialized and set(handle.log) < set(after.log)

    unclaimed = env.backend()
    restore(unclaimed, [handle], env.storage, build_on=False)
    expected = _values(unclaimed, KEYS)
    first = env.checkpoint(unclaimed)
    assert isinstance(first, ChangelogStateHandle)
    restored_files = {f.uri for f in handle.shared_state()}
    assert not restored_files & {f.uri for f in first.shared_state()}
    # More checkpoints, then a failure: the restore uses only the new files.
    _write(unclaimed, KEYS[:7], 5)
    expected = _values(unclaimed, KEYS)
    second = env.checkpoint(unclaimed)
    assert not restored_files & {f.uri for f in second.shared_state()}
    again = env.backend()
    restore(again, [second], env.storage)
    assert _values(again, KEYS) == expected


def test_switching_from_a_plain_snapshot_materializes_first(env: Env) -> None:
    plain = env.plain(env.kind)
    _write(plain, KEYS, 4)
    n = CheckpointId(99)
    handle = plain.snapshot_to(n, SnapshotLocation.for_checkpoint(env.storage, JOB, n, "op")).run()
    backend = env.backend()
    restore(backend, [handle], env.storage)
    assert _values(backend, KEYS) == _values(plain, KEYS)
    first = env.checkpoint(backend)
    assert isinstance(first, ChangelogStateHandle) and first.materialized
    assert first.materialization_id > 99


def test_savepoints_are_the_delegates(env: Env, tmp_path: Path) -> None:
    from weir.proto.checkpoint_pb2 import SAVEPOINT_CANONICAL

    backend = env.backend()
    _write(backend, KEYS, 2)
    target = create_storage(str(tmp_path / "savepoint"))
    handle = backend.snapshot_to(CheckpointId(5), SnapshotLocation.for_savepoint(
        target, "op", SAVEPOINT_CANONICAL)).run()
    assert handle.kind == "canonical"
    plain = env.plain("hashmap")
    restore(plain, [handle], target)
    assert _values(plain, KEYS) == _values(backend, KEYS)


def test_a_corrupted_log_names_the_checkpoint_and_the_file(env: Env) -> None:
    backend = env.backend()
    _write(backend, KEYS, 1)
    handle = env.checkpoint(backend)
    assert isinstance(handle, ChangelogStateHandle)
    path = Path(handle.log[0].file.uri.removeprefix("file://"))
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError) as caught:
        restore(env.backend(), [handle], env.storage)
    message = str(caught.value)
    assert f"checkpoint {handle.checkpoint_id}" in message and handle.log[0].file.uri in message


class _FailingStorage:
    """Checkpoint storage whose writes fail (materializations fail)."""

    def __init__(self, inner: CheckpointStorageAccess) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("write", "write_file"):
            def fail(*_: Any, **__: Any) -> Any:
                from weir.core.errors import StorageError

                raise StorageError("storage down")
            return fail
        return getattr(self._inner, name)


def test_too_many_failed_materializations_fail_the_task(env: Env) -> None:
    backend = env.backend(max_failures=1)
    backend._storage = _FailingStorage(env.storage)  # type: ignore[assignment]
    _write(backend, KEYS, 1)
    for _ in range(2):
        backend.materialize()
        running = backend._running
        assert running is not None
        with pytest.raises(Exception, match="storage down"):
            running[2].result(timeout=30)
    # Both failed: the next write or checkpoint fails the task.
    with pytest.raises(StateError, match="max-failures-allowed"):
        backend._maintain()
    assert backend.metrics.failed == 2


def test_task_local_recovery_reads_the_local_copies_of_the_log(tmp_path: Path) -> None:
    from weir.state.local_recovery import RestoreStorage

    made = Env(tmp_path, "hashmap")
    local_root = tmp_path / "local"
    made.log.local_dir = local_root / JOB / "changelog"
    try:
        backend = made.backend()
        _write(backend, KEYS, 3)
        expected = _values(backend, KEYS)
        handle = made.checkpoint(backend)
        assert isinstance(handle, ChangelogStateHandle) and handle.local is not None
        remote = {s.file.uri for s in handle.log}
        assert set(handle.local.files) == {uri.rsplit("/", 1)[-1] for uri in remote}
        for uri in remote:  # the remote log is gone: only the local copy can restore
            Path(uri.removeprefix("file://")).unlink()
        local_storage = RestoreStorage(made.storage, local_root)
        fresh = made.backend()
        result = restore(fresh, [handle], local_storage)
        assert result.local_copies_used == len(remote) and local_storage.local_bytes > 0
        assert _values(fresh, KEYS) == expected
        # Another TaskExecutor's copy is not used: the missing remote file is named.
        with pytest.raises(MissingStateError, match=f"checkpoint {handle.checkpoint_id}"):
            restore(made.backend(), [handle], RestoreStorage(made.storage, tmp_path / "other"))
        # A materialization covers the log: its local copies go once a checkpoint naming
        # the materialization completed.
        backend.materialize()
        _await_materialization(backend)
        assert {p.name for p in made.log.local_dir.iterdir()} == set(handle.local.files)
        made.checkpoint(backend)
        assert not list(made.log.local_dir.iterdir())
    finally:
        made.close()


@pytest.fixture
def local_env(tmp_path: Path) -> Iterator[Env]:
    """A hashmap Env whose log keeps local copies under ``tmp_path / "local"``."""
    made = Env(tmp_path, "hashmap")
    made.log.local_dir = tmp_path / "local" / JOB / "changelog"
    yield made
    made.close()


def _materialized_then_logged(made: Env, local_root: Path
                              ) -> tuple[ChangelogKeyedStateBackend, KeyedStateHandle]:
    """A backend with local copies, materialized once, and a checkpoint naming that
    materialization and a log after it."""
    backend = made.backend(local_root=local_root, owner="op-local")
    _write(backend, KEYS, 3)
    backend.materialize()
    _await_materialization(backend)
    _write(backend, KEYS[:50], 1)
    return backend, made.checkpoint(backend)


def test_the_log_s_local_copies_outlive_a_materialization_until_a_checkpoint_names_it(
        local_env: Env, tmp_path: Path) -> None:
    # The TaskExecutor dies after a materialization completed and before a checkpoint naming
    # it completed: the restore reads the last completed checkpoint, which names the log
    # the materialization covers. Its local copies must still be there.
    from weir.state.local_recovery import RestoreStorage

    made, local_root = local_env, tmp_path / "local"
    backend, first = _materialized_then_logged(made, local_root)
    assert isinstance(first, ChangelogStateHandle)
    _write(backend, KEYS[50:], 2)
    second = made.checkpoint(backend)  # the same base, a longer log
    assert isinstance(second, ChangelogStateHandle) and second.local is not None
    assert second.materialization_id == 1 and len(second.log) > len(first.log) > 0
    expected = _values(backend, KEYS)
    backend.materialize()  # completes; no checkpoint names it yet
    _await_materialization(backend)

    local_storage = RestoreStorage(made.storage, local_root)
    fresh = made.backend(owner="op-local")
    restore(fresh, [second], local_storage)
    assert _values(fresh, KEYS) == expected
    assert local_storage.remote_bytes == 0, "part of the restore was downloaded"
    assert local_storage.local_bytes >= second.state_size

    # A checkpoint naming materialization 2 completes: the copies of the log before
    # it go (nothing a restore would read names them any more); its own stay.
    _write(backend, KEYS[:10], 1)
    third = made.checkpoint(backend)
    assert isinstance(third, ChangelogStateHandle) and third.materialization_id == 2
    assert third.local is not None
    assert made.log.local_dir is not None
    assert {p.name for p in made.log.local_dir.glob("*.log")} == set(third.local.files)


def test_checkpoints_after_a_local_restore_name_the_restored_log_s_local_copies(
        local_env: Env, tmp_path: Path) -> None:
    # A failover on the same TaskExecutor builds on the restored checkpoint: the next
    # checkpoints name its log as well as their own. Without its local copies in them, a
    # second failover before the next materialization would download that log.
    from weir.state.local_recovery import RestoreStorage

    made, local_root = local_env, tmp_path / "local"
    _, first = _materialized_then_logged(made, local_root)
    assert isinstance(first, ChangelogStateHandle) and first.log and first.local

    again = made.backend(local_root=local_root, owner="op-local")
    restore(again, [first], RestoreStorage(made.storage, local_root))
    _write(again, KEYS[50:], 2)
    second = made.checkpoint(again)
    assert isinstance(second, ChangelogStateHandle) and second.local is not None
    assert second.materialization_id == first.materialization_id
    logged = {segment.file.uri.rsplit("/", 1)[-1] for segment in second.log}
    assert set(first.local.files) < logged
    assert logged <= set(second.local.files)
    expected = _values(again, KEYS)

    local_storage = RestoreStorage(made.storage, local_root)
    third = made.backend(owner="op-local")
    restore(third, [second], local_storage)
    assert _values(third, KEYS) == expected
    assert local_storage.remote_bytes == 0, "part of the restore was downloaded"


def test_materializations_keep_local_copies_that_a_restore_reads(env: Env,
                                                                  tmp_path: Path) -> None:
    from weir.state.changelog import materialization_local_dir
    from weir.state.local_recovery import RestoreStorage

    local_root = tmp_path / "local"
    env.log.local_dir = local_root / JOB / "changelog"
    backend = env.backend(local_root=local_root, owner="op-local")
    _write(backend, KEYS, 3)
    backend.materialize()
    _await_materialization(backend)
    _write(backend, KEYS[:20], 1)
    expected = _values(backend, KEYS)
    handle = env.checkpoint(backend)
    assert isinstance(handle, ChangelogStateHandle) and handle.materialized
    assert all(m.local is not None for m in handle.materialized)
    copies = materialization_local_dir(local_root, JOB, "op-local")
    assert [p.name.split("-")[0] for p in copies.iterdir()] == ["m1"]

    # A restore on this TaskExecutor reads the materialization and the log locally.
    local_storage = RestoreStorage(env.storage, local_root)
    fresh = env.backend(owner="op-local")
    restore(fresh, [handle], local_storage)
    assert _values(fresh, KEYS) == expected
    assert local_storage.local_bytes >= handle.materialized_size > 0
    assert local_storage.remote_bytes == 0
    # Elsewhere, everything is downloaded.
    elsewhere = RestoreStorage(env.storage, tmp_path / "other")
    restore(env.backend(owner="op-local"), [handle], elsewhere)
    assert elsewhere.local_bytes == 0 and elsewhere.remote_bytes >= handle.materialized_size

    # A later materialization: the older copy goes once a checkpoint naming the newer one
    # completed, not before.
    _write(backend, KEYS[:5], 1)
    backend.materialize()
    _await_materialization(backend)
    assert sorted(p.name.split("-")[0] for p in copies.iterdir()) == ["m1", "m2"]
    env.checkpoint(backend)
    assert [p.name.split("-")[0] for p in copies.iterdir()] == ["m2"]


def test_a_negative_materialize_interval_says_how_to_disable_it() -> None:
    from weir.core.config import Configuration
    from weir.core.errors import ConfigError
    from weir.state import options

    key = "state.changelog.periodic-materialize.interval"
    assert Configuration.from_pairs({key: "0"}).get(
        options.CHANGELOG_MATERIALIZE_INTERVAL) == 0
    with pytest.raises(ConfigError, match=r"periodic-materialize\.interval.*use 0 to disable"):
        Configuration.from_pairs({key: "-1 s"}).get(options.CHANGELOG_MATERIALIZE_INTERVAL)
    with pytest.raises(ConfigError) as raised:
        Configuration.from_pairs({key: "soon"}).get(options.CHANGELOG_MATERIALIZE_INTERVAL)
    assert "use 0" not in str(raised.value)


@pytest.mark.parametrize("kind", KINDS)
def test_batched_replay_equals_applying_each_change(kind: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from weir.checkpoint.changelog_storage import VerifiedPiece, frame_piece
    from weir.state import changelog_replay as changelog
    from weir.state.changelog_replay import APPEND as _APPEND
    from weir.state.changelog_replay import DELETE as _DELETE
    from weir.state.changelog_replay import PUT as _PUT
    from weir.state.changelog_replay import apply_change, replay
    from weir.state.key_groups import assign_to_key_group
    from weir.state.serializers import encode_key, serialize_value

    def change(op: int, state: str, key: str, value: Any = None) -> tuple[int, bytes]:
        payload = changelog.encode_change(
            op, state, encode_key(key), encode_key(None),
            b"" if value is None else serialize_value(value))
        return assign_to_key_group(key, MAX_PAR), payload

    changes = [change(_PUT, "total", "a", 1), change(_PUT, "total", "b", 2),
               change(_PUT, "total", "a", 3),                 # a later put of a key wins
               change(_APPEND, "seen", "a", ["x"]), change(_PUT, "total", "c", 4),
               change(_APPEND, "seen", "a", ["y", "z"]), change(_DELETE, "total", "b"),
               change(_PUT, "total", "d", 5), change(_PUT, "total", "d", 6),
               change(_PUT, "total", "b", 7), change(_DELETE, "total", "c")]
    plain = Backends(tmp_path)
    try:
        one_by_one, batched = plain(kind, ALL, None), plain(kind, ALL, None)
        for backend in (one_by_one, batched):
            backend.get_state(ValueStateDescriptor("total"))
            backend.get_state(ListStateDescriptor("seen"))
        for key_group, payload in changes:
            apply_change(one_by_one, key_group, payload)
        monkeypatch.setattr(changelog, "REPLAY_BATCH", 2)     # flushes mid-run as well
        # Two pieces, with changes of a key group outside the window between them.
        outside = [(MAX_PAR - 1, changelog.encode_change(_PUT, "total", b"x", b"", b"junk"))]
        parts = (changes[:5] + outside, outside + changes[5:])
        pieces = [VerifiedPiece.of(frame_piece(0, [(n, kg, p) for n, (kg, p) in enumerate(part)]))
                  for part in parts]
        window = (0, MAX_PAR - 2)
        assert all(kg <= window[1] for kg, _ in changes)
        assert replay(batched, pieces, window) == len(changes)
        assert sorted(batched.entries()) == sorted(one_by_one.entries())
        assert _values(batched, ["a", "b", "c", "d"]) == {"a": 3, "b": 7, "c": None, "d": 6}
    finally:
        plain.dispose()


def _logged_after_a_materialization(env: Env) -> tuple[KeyedStateHandle, KeyedStateBackend]:
    """A changelog checkpoint whose log after its materialization holds puts, deletes,
    list appends and map changes, in two namespaces; and a plain backend that received the
    same operations (the expected state, computed without the changelog)."""
    backend, reference = env.backend(), env.plain(env.kind)
    for target in (backend, reference):
        _write(target, KEYS, 1)
    backend.materialize()
    _await_materialization(backend)
    for target in (backend, reference):
        _write(target, KEYS[:150], 2)
        total = target.get_state(ValueStateDescriptor("total"))
        items = target.get_state(ListStateDescriptor("items"))
        tags = target.get_state(MapStateDescriptor("tags"))
        for i, key in enumerate(KEYS[:60]):
            target.set_current_key(key)
            items.set_current_namespace("w" if i % 2 else None)
            items.add(i)
            items.add_all([i + 1, i + 2])
            tags.put("a", key)
            if i % 3 == 0:
                total.clear()
    handle = env.checkpoint(backend)
    assert isinstance(handle, ChangelogStateHandle) and handle.materialized and handle.log
    return handle, reference


def _state(backend: KeyedStateBackend) -> list[Any]:
    return sorted(backend.entries())


def test_the_restored_log_is_applied_row_by_row_as_the_task_touches_state(env: Env) -> None:
    handle, reference = _logged_after_a_materialization(env)
    fresh = env.backend()
    restore(fresh, [handle], env.storage)
    pending = fresh._pending
    assert pending is not None and pending.rows > 150
    assert fresh.metrics.snapshot()["restoredLogRowsPending"] == pending.rows
    assert pending.applied == 0
    # Reads of rows the log changed see the log's values before anything else is applied.
    assert _values(fresh, KEYS[:10]) == _values(reference, KEYS[:10])
    items = fresh.get_state(ListStateDescriptor("items"))
    for target in (fresh, reference):
        target.set_current_key(KEYS[1])
        target.get_state(ListStateDescriptor("items")).set_current_namespace("w")
    assert items.get() == reference.get_state(ListStateDescriptor("items")).get() == [1, 2, 3]
    assert pending.applied == 11  # the rows read, no more
    # Writes: a blind update or clear replaces a pending row, an append builds on it.
    for target in (fresh, reference):
        _write(target, KEYS[20:25], 7)
        total = target.get_state(ValueStateDescriptor("total"))
        for key in KEYS[40:45]:
            target.set_current_key(key)
            total.update(-1)
        target.set_current_key(KEYS[46])
        total.clear()
        target.set_current_key(KEYS[31])
        target.get_state(ListStateDescriptor("items")).add("new")
    assert _state(fresh) == _state(reference)  # iterating the whole state applies the rest
    assert fresh._pending is None and fresh.metrics.restored_log_rows_pending == 0


def test_the_rest_of_the_log_is_applied_a_few_rows_at_a_time(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    from weir.state import changelog

    monkeypatch.setattr(changelog, "DRAIN_ROWS", 40)
    handle, reference = _logged_after_a_materialization(env)
    fresh = env.backend()
    restore(fresh, [handle], env.storage)
    pending = fresh._pending
    assert pending is not None
    applied = [pending.applied]
    while fresh._pending is not None:
        fresh._maintain()  # what every 256th write does
        applied.append(pending.applied)
    steps = [b - a for a, b in itertools.pairwise(applied)]
    assert len(steps) > 2 and set(steps[:-1]) == {40} and 0 < steps[-1] <= 40
    assert fresh.metrics.restored_log_rows_pending == 0
    assert _state(fresh) == _state(reference)


def test_a_task_without_input_applies_the_log_while_idle(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Task._run calls work_while_idle when its input is empty: the log of a job whose
    input stopped is applied at DRAIN_ROWS a call, not only as records and checkpoints
    come."""
    from weir.state import changelog

    monkeypatch.setattr(changelog, "DRAIN_ROWS", 40)
    handle, reference = _logged_after_a_materialization(env)
    fresh = env.backend()
    restore(fresh, [handle], env.storage)
    assert fresh._pending is not None
    fresh._pending.index()  # the exact number of rows
    rows, calls = fresh._pending.rows, 1
    while fresh.work_while_idle():
        calls += 1
    assert calls == -(-rows // 40)  # every call applied DRAIN_ROWS rows, the last the rest
    assert fresh._pending is None and fresh.metrics.restored_log_rows_pending == 0
    assert not fresh.work_while_idle() and not reference.work_while_idle()
    assert _state(fresh) == _state(reference)


@pytest.mark.parametrize("then", ["checkpoint", "materialize", "keys", "batch"])
def test_a_restore_with_rows_still_pending_checkpoints_and_restores_again(
        env: Env, then: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from weir.state import changelog

    monkeypatch.setattr(changelog, "DRAIN_ROWS", 1)
    handle, reference = _logged_after_a_materialization(env)
    fresh = env.backend()
    restore(fresh, [handle], env.storage)
    assert fresh._pending is not None
    if then == "materialize":  # a materialization reads the whole state: all applied first
        fresh.materialize()
        assert fresh._pending is None
        _await_materialization(fresh)
    elif then == "keys":  # timers and windows read every key of a state at restore
        assert sorted(fresh.keys("total")) == sorted(reference.keys("total"))
        assert not fresh._pending.tables.get("total")
        assert any(fresh._pending.holds("items", kg) for kg in range(MAX_PAR))
    elif then == "batch":  # vectorised operators read and write many keys at once
        from weir.state.key_groups import assign_to_key_group

        keys = KEYS[:110]
        groups = [assign_to_key_group(k, MAX_PAR) for k in keys]
        fresh.get_state(ValueStateDescriptor("total"))
        got = fresh.get_many("total", groups[:50], keys[:50])
        assert got == reference.get_many("total", groups[:50], keys[:50])
        for target in (fresh, reference):  # blind writes replace pending rows
            target.put_many("total", groups[50:100], keys[50:100], None, [5] * 50)
            target.delete_many("total", groups[100:], keys[100:])
    for target in (fresh, reference):
        _write(target, KEYS[100:120], 3)
    # A checkpoint with rows still pending (or not) names the restored log and the new.
    second = env.checkpoint(fresh)
    assert isinstance(second, ChangelogStateHandle)
    again = env.backend()
    restore(again, [second], env.storage)
    assert _state(again) == _state(fresh) == _state(reference)


def test_a_savepoint_with_rows_pending_holds_them(env: Env, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from weir.proto.checkpoint_pb2 import SAVEPOINT_CANONICAL
    from weir.state import changelog

    monkeypatch.setattr(changelog, "DRAIN_ROWS", 1)

    handle, reference = _logged_after_a_materialization(env)
    fresh = env.backend()
    restore(fresh, [handle], env.storage)
    assert fresh._pending is not None
    target = create_storage(str(tmp_path / "savepoint"))
    savepoint = fresh.snapshot_to(CheckpointId(50), SnapshotLocation.for_savepoint(
        target, "op", SAVEPOINT_CANONICAL)).run()
    plain = env.plain(env.kind)
    restore(plain, [savepoint], target)
    assert _state(plain) == _state(reference)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_materializations_run_at_a_lower_priority_than_the_tasks() -> None:
    import os
    import threading

    from weir.state import changelog

    def priorities() -> tuple[int, int]:
        seen: list[int] = []
        started = threading.Thread(target=lambda: seen.append(
            os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        started.start()
        started.join(timeout=10)
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id()), seen[0]

    own = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    worker, started_by_it = changelog._MATERIALIZER.submit(priorities).result(timeout=10)
    # The upload threads a materialization starts (boto3's) inherit its priority.
    assert worker == started_by_it >= changelog.MATERIALIZATION_NICE
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == own

"""The two-phase-commit file sink on file://: hidden until committed, commit on checkpoint
completion, restore commits the restored checkpoint's pending parts and removes the rest.
(The s3:// committer runs against a real SeaweedFS in tests/integration.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from weir.checkpoint.storage import create_storage
from weir.core.config import Configuration
from weir.core.errors import StateError
from weir.core.records import Elements
from weir.operators.sinks.file import FileSinkOperator, committed_parts
from weir.state.snapshot import SnapshotLocation
from weir.taskexecutor.operator import OperatorContext, StateContext

CHECKPOINTING = {"execution.checkpointing.interval": "1 s"}


class Sink:
    """A sink subtask driven the way a task drives it."""

    def __init__(self, out: Path, subtask: int = 0, parallelism: int = 1,
                 restore: tuple[int, list[bytes | None]] | None = None,
                 config: dict[str, str] | None = None, rolling: int = 1 << 20,
                 attempt: int = 0) -> None:
        self.out = out
        self.operator = FileSinkOperator("sink", str(out), "json", rolling)
        conf = Configuration.from_pairs(CHECKPOINTING if config is None else config)
        self.operator.setup(OperatorContext("sink", subtask, parallelism, 128,
                                            attempt_number=attempt, configuration=conf),
                            output=None)  # type: ignore
        context = StateContext() if restore is None else StateContext(
            checkpoint_id=restore[0], operator_state=restore[1])
        self.operator.initialize_state(context)
        self.operator.open()

    def write(self, *numbers: int) -> None:
        self.operator.process(Elements.from_records([{"n": n} for n in numbers]))

    def checkpoint(self, checkpoint_id: int) -> bytes | None:
        location = SnapshotLocation.for_checkpoint(create_storage(str(self.out)), "job",
                                                   checkpoint_id, "sink")
        return self.operator.snapshot_state(checkpoint_id, 0, location).operator_state


def records(out: Path) -> list[int]:
    return sorted(json.loads(line)["n"] for name in committed_parts(str(out))
                  for line in (out / name).read_text().splitlines())


def hidden(out: Path) -> list[str]:
    return sorted(p.name for p in out.iterdir() if p.name.startswith("."))


def untokened(name: str) -> str:
    """A hidden part's name without its attempt token."""
    return re.sub(r"\.[0-9a-f]{12}\.inprogress$", ".inprogress", name)


def test_a_stale_attempt_never_writes_into_the_restored_attempts_files(
        tmp_path: Path) -> None:
    # The old attempt runs on after the job restarted without it (its TaskExecutor was
    # paused, then resumed): both number their next part alike, from the same checkpoint.
    first = Sink(tmp_path)
    first.write(1)
    state = first.checkpoint(1)
    first.operator.notify_checkpoint_complete(1)
    second = Sink(tmp_path, restore=(1, [state]))
    second.write(2)
    first.write(99)                                # the stale attempt rolls part 1 too
    first.operator.close()                         # then it is cancelled
    second.checkpoint(2)
    second.operator.notify_checkpoint_complete(2)
    assert records(tmp_path) == [1, 2]
    assert hidden(tmp_path) == []


def test_parts_are_hidden_until_their_checkpoint_completes(tmp_path: Path) -> None:
    sink = Sink(tmp_path)
    sink.write(1, 2)
    sink.checkpoint(1)
    sink.write(3)
    sink.checkpoint(2)
    assert records(tmp_path) == [] and len(hidden(tmp_path)) == 2
    sink.operator.notify_checkpoint_complete(1)
    assert records(tmp_path) == [1, 2]
    sink.operator.notify_checkpoint_aborted(2)     # stays pending; the next one commits it
    sink.write(4)
    sink.checkpoint(3)
    sink.operator.notify_checkpoint_complete(3)
    assert records(tmp_path) == [1, 2, 3, 4]
    assert hidden(tmp_path) == []
    assert committed_parts(str(tmp_path)) == ["part-0-0.jsonl", "part-0-1.jsonl",
                                              "part-0-2.jsonl"]


def test_a_checkpoint_without_new_records_commits_nothing_new(tmp_path: Path) -> None:
    sink = Sink(tmp_path)
    sink.checkpoint(1)
    sink.operator.notify_checkpoint_complete(1)
    assert committed_parts(str(tmp_path)) == [] and hidden(tmp_path) == []


def test_restore_commits_the_restored_pending_parts_and_removes_later_ones(
        tmp_path: Path) -> None:
    first = Sink(tmp_path)
    first.write(1)
    state = first.checkpoint(1)                    # pre-committed; notification lost
    first.write(2)                                 # written after the checkpoint...
    first.checkpoint(2)                            # ...and even pre-committed: never completed
    first.write(3)                                 # in progress when the task died
    first.operator._file.flush()                   # killed: close() never ran
    assert records(tmp_path) == [] and len(hidden(tmp_path)) == 3
    second = Sink(tmp_path, restore=(1, [state]))
    assert records(tmp_path) == [1]
    assert hidden(tmp_path) == []                  # the failed attempt's parts are gone
    second.write(2, 3)                             # replayed after the checkpoint
    second.checkpoint(2)
    second.operator.notify_checkpoint_complete(2)
    assert records(tmp_path) == [1, 2, 3]
    assert committed_parts(str(tmp_path)) == ["part-0-0.jsonl", "part-0-1.jsonl"]


def test_restoring_twice_commits_once(tmp_path: Path) -> None:
    first = Sink(tmp_path)
    first.write(7)
    state = first.checkpoint(1)
    first.operator.close()
    Sink(tmp_path, restore=(1, [state])).operator.close()
    Sink(tmp_path, restore=(1, [state])).operator.close()   # committed already: fine
    assert records(tmp_path) == [7]


def test_a_vanished_pending_part_fails_the_restore(tmp_path: Path) -> None:
    first = Sink(tmp_path)
    first.write(7)
    state = first.checkpoint(1)
    first.operator.close()
    for name in hidden(tmp_path):
        (tmp_path / name).unlink()
    with pytest.raises(StateError, match="cannot be committed"):
        Sink(tmp_path, restore=(1, [state]))


def test_other_subtasks_files_are_left_alone(tmp_path: Path) -> None:
    zero, one = Sink(tmp_path, 0, 2), Sink(tmp_path, 1, 2)
    zero.write(1)
    one.write(2)
    states = [zero.checkpoint(1), one.checkpoint(1)]
    one.write(3)                                   # subtask 1 keeps writing
    Sink(tmp_path, 0, 2, restore=(1, states))      # subtask 0 alone restarts
    assert records(tmp_path) == [1]
    assert [untokened(name) for name in hidden(tmp_path)] == [
        ".part-1-0.jsonl.inprogress", ".part-1-1.jsonl.inprogress"]


@pytest.mark.parametrize(("old", "new"), [(1, 1), (2, 3), (3, 1)])
def test_part_names_are_never_reused_after_a_restore(tmp_path: Path, old: int,
                                                     new: int) -> None:
    states = []
    for subtask in range(old):
        sink = Sink(tmp_path, subtask, old, rolling=1)
        for i in range(subtask + 2):               # a part per record
            sink.write(100 * subtask + i)
        states.append(sink.checkpoint(1))
        sink.operator.notify_checkpoint_complete(1)
    before = {name: (tmp_path / name).read_text() for name in committed_parts(str(tmp_path))}
    for subtask in range(new):
        sink = Sink(tmp_path, subtask, new, restore=(1, states))
        sink.write(-1 - subtask)
        sink.checkpoint(2)
        sink.operator.notify_checkpoint_complete(2)
    after = {name: (tmp_path / name).read_text() for name in committed_parts(str(tmp_path))}
    assert {name: after[name] for name in before} == before, "a part file was overwritten"
    assert len(after) == len(before) + new


def test_without_checkpointing_parts_are_committed_at_the_end(tmp_path: Path) -> None:
    sink = Sink(tmp_path, config={})
    sink.write(1, 2)
    assert records(tmp_path) == []
    sink.operator.finish()
    assert records(tmp_path) == [1, 2] and hidden(tmp_path) == []


def test_a_rerun_without_checkpointing_replaces_the_earlier_attempts_parts(
        tmp_path: Path) -> None:
    # A finished BATCH sink subtask runs again when an input it read is produced again:
    # its parts replace the first run's, and what the first run committed beyond them
    # goes, so every record is in the directory once. Other subtasks' parts stay.
    first = Sink(tmp_path, config={}, rolling=1)
    first.write(1)
    first.write(2)
    first.write(3)
    first.operator.finish()
    other = Sink(tmp_path, subtask=1, parallelism=2, config={}, rolling=1)
    other.write(100)
    other.operator.finish()
    assert records(tmp_path) == [1, 2, 3, 100]
    again = Sink(tmp_path, config={}, rolling=1, attempt=1)
    again.write(1)
    again.write(2)
    again.operator.finish()
    assert records(tmp_path) == [1, 2, 100]
    assert committed_parts(str(tmp_path)) == ["part-0-0.jsonl", "part-0-1.jsonl",
                                              "part-1-0.jsonl"]


def test_a_first_attempt_leaves_parts_it_did_not_write_alone(tmp_path: Path) -> None:
    # Attempt 0 is no re-run: parts of the same number range from elsewhere stay.
    (tmp_path / "part-0-5.jsonl").write_text('{"n": 50}\n')
    sink = Sink(tmp_path, config={})
    sink.write(1)
    sink.operator.finish()
    assert records(tmp_path) == [1, 50]

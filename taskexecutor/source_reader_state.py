"""The checkpointed state of a source task: its reader's splits, as operator list state.

As in Flink's ``SourceOperator``, a source subtask keeps one operator *list* state, named
``SourceReaderState``, holding the unfinished splits of its reader at their current offsets.
On restore with the same parallelism every subtask gets its own splits back; after
rescaling the splits of all old subtasks are dealt round-robin to the new ones (a split is
never cut, so a reader resumes each split exactly at its offset).

:class:`SourceReaderState` is the glue the task thread calls: ``snapshot`` when a checkpoint
is taken, ``restore`` when a restored source task starts (before it asks the enumerator for
more splits), then ``reader.add_splits(splits)``.

Example:
    >>> from weir.core.source import ReaderContext
    >>> from weir.datastream.connectors.number_seq import SequenceSource, SequenceSplit
    >>> source = SequenceSource(0, 9)
    >>> old = [source.create_reader(ReaderContext(i, 2, batch_size=3)) for i in range(2)]
    >>> old[0].add_splits([SequenceSplit(0, 4)]); old[1].add_splits([SequenceSplit(5, 9)])
    >>> old[0].poll().records(), old[1].poll().records()
    ([0, 1, 2], [5, 6, 7])
    >>> snapshots = [SourceReaderState.snapshot(r, checkpoint_id=1) for r in old]
    >>> new = source.create_reader(ReaderContext(0, 1, batch_size=10))   # rescale 2 -> 1
    >>> new.add_splits(SourceReaderState.restore(snapshots, subtask_index=0, parallelism=1))
    >>> new.poll().records() + new.poll().records()
    [3, 4, 8, 9]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from weir.core.ids import CheckpointId
from weir.core.source import SourceReader
from weir.state.descriptors import ListStateDescriptor
from weir.state.operator_state import OperatorStateBackend

#: Name of the operator list state holding a source reader's splits (Flink's name).
SPLITS_STATE = "SourceReaderState"


class SourceReaderState:
    """Snapshot and restore of a source reader's splits (operator list state)."""

    @staticmethod
    def descriptor() -> ListStateDescriptor:
        return ListStateDescriptor(SPLITS_STATE)

    @staticmethod
    def snapshot(reader: SourceReader, checkpoint_id: CheckpointId,
                 backend: OperatorStateBackend | None = None,
                 splits: list[Any] | None = None) -> bytes:
        """The operator state snapshot of ``reader`` for checkpoint ``checkpoint_id``.

        Called on the task thread between two polls. ``backend`` is the source operator's
        own operator state backend when it has other states too (the splits are written
        into it and the whole backend is snapshotted); without one, a snapshot holding only
        the splits is made. Raises what ``reader.snapshot_state`` raises, and StateError if
        a split cannot be pickled. ``splits``: what the reader's ``snapshot_state_unread``
        returned, stored instead of its ``snapshot_state``.
        """
        backend = backend if backend is not None else OperatorStateBackend()
        backend.get_list_state(SourceReaderState.descriptor()).update(
            reader.snapshot_state(checkpoint_id) if splits is None else splits)
        return backend.snapshot()

    @staticmethod
    def restore(snapshots: Sequence[bytes | bytearray | memoryview | None], subtask_index: int,
                parallelism: int, backend: OperatorStateBackend | None = None) -> list[Any]:
        """The splits that source subtask ``subtask_index`` of ``parallelism`` resumes.

        ``snapshots`` are the snapshots of *all* subtasks of the source at the checkpoint
        (None for a subtask without state). When ``backend`` is given it is restored too,
        so the source operator can read its other operator states from it. Raises
        StateError if a snapshot is damaged.
        """
        backend = backend if backend is not None else OperatorStateBackend()
        backend.restore(snapshots, subtask_index, parallelism)
        return backend.get_list_state(SourceReaderState.descriptor()).get()

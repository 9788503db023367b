"""Channel state: the in-flight data of an unaligned checkpoint.

A subtask persists, for checkpoint n, the output buffers its priority barrier overtook
(per result partition and subpartition) and the input buffers its channels delivered
before their barrier n (per input channel, counted across its gates). On restore the output
data is written to the same subpartitions before anything new, and the input data is
processed before any new input: records are neither lost nor seen twice.

Format of one subtask's file, versioned (big-endian)::

    MAGIC "WEIRCHS" + u8 version (1)
    records until the end: u8 kind (0 = input, 1 = output), u32 index (input: the task's
        channel number; output: the result partition's index), u32 subpartition (output;
        0 for input), u32 length, then an Arrow IPC stream holding one record batch in the
        wire encoding (``Elements.wire_batch``: timestamps as a trailing column)

Example:
    >>> from weir.core.records import Elements
    >>> state = ChannelStateWriter(3)
    >>> state.add_input(1, Elements.from_records([1, 2]))
    >>> state.add_output(0, 2, [Elements.from_records(["a"])])
    >>> restored = read_channel_state(state.to_bytes())
    >>> [e.records() for e in restored.inputs[1]], restored.outputs[(0, 2)][0].records()
    ([[1, 2]], ['a'])
    >>> state.input_bytes > 0 and state.output_bytes > 0
    True
"""

from __future__ import annotations

import io
import struct
from collections import defaultdict
from dataclasses import dataclass, field

import pyarrow as pa

from weir.core.errors import CorruptStateError
from weir.core.ids import CheckpointId
from weir.core.records import Elements

MAGIC = b"WEIRCHS"
FORMAT_VERSION = 1
_INPUT, _OUTPUT = 0, 1
_RECORD = struct.Struct(">BIII")


class ChannelStateWriter:
    """Collects the in-flight data of one checkpoint at one subtask (task thread)."""

    def __init__(self, checkpoint_id: CheckpointId) -> None:
        self.checkpoint_id = checkpoint_id
        self._records: list[tuple[int, int, int, Elements]] = []
        self.input_bytes = 0
        self.output_bytes = 0

    def add_input(self, channel: int, elements: Elements) -> None:
        """A buffer channel ``channel`` delivered before its barrier."""
        self._records.append((_INPUT, channel, 0, elements))
        self.input_bytes += elements.estimated_bytes()

    def add_output(self, partition: int, subpartition: int,
                   overtaken: list[Elements]) -> None:
        """Buffers the barrier overtook in ``subpartition`` of result partition
        ``partition``, oldest first."""
        for elements in overtaken:
            self._records.append((_OUTPUT, partition, subpartition, elements))
            self.output_bytes += elements.estimated_bytes()

    def __bool__(self) -> bool:
        return bool(self._records)

    def to_bytes(self) -> bytes:
        """The file's content (call off the task thread: it encodes every batch)."""
        out = io.BytesIO()
        out.write(MAGIC + bytes([FORMAT_VERSION]))
        for kind, index, sub, elements in self._records:
            sink = io.BytesIO()
            batch = elements.wire_batch()
            with pa.ipc.new_stream(sink, batch.schema) as writer:
                writer.write_batch(batch)
            data = sink.getvalue()
            out.write(_RECORD.pack(kind, index, sub, len(data)))
            out.write(data)
        return out.getvalue()


@dataclass
class ChannelState:
    """Restored in-flight data of one subtask."""

    #: Task channel number -> batches, oldest first.
    inputs: dict[int, list[Elements]] = field(default_factory=lambda: defaultdict(list))
    #: (result partition index, subpartition) -> batches, oldest first.
    outputs: dict[tuple[int, int], list[Elements]] = field(
        default_factory=lambda: defaultdict(list))


def read_channel_state(data: bytes, where: str = "channel state") -> ChannelState:
    """Parse a channel state file; CorruptStateError (naming ``where``) if it is damaged."""
    state = ChannelState()
    view = memoryview(data)
    if bytes(view[:len(MAGIC)]) != MAGIC:
        msg = f"{where} is not a weir channel state file (bad magic)"
        raise CorruptStateError(msg)
    if view[len(MAGIC)] != FORMAT_VERSION:
        msg = (f"{where} has format version {view[len(MAGIC)]}; this weir reads version "
               f"{FORMAT_VERSION}")
        raise CorruptStateError(msg)
    position = len(MAGIC) + 1
    try:
        while position < len(view):
            kind, index, sub, length = _RECORD.unpack_from(view, position)
            position += _RECORD.size
            if position + length > len(view):
                msg = f"{where} is truncated"
                raise CorruptStateError(msg)
            reader = pa.ipc.open_stream(pa.py_buffer(view[position:position + length]))
            position += length
            for batch in reader:
                elements = Elements.from_wire(batch)
                if kind == _INPUT:
                    state.inputs[index].append(elements)
                elif kind == _OUTPUT:
                    state.outputs[(index, sub)].append(elements)
                else:
                    msg = f"{where} holds a record of unknown kind {kind}"
                    raise CorruptStateError(msg)
    except (struct.error, pa.ArrowInvalid) as err:
        msg = f"{where} is damaged: {err}"
        raise CorruptStateError(msg) from err
    return state

"""Unpickling state that names classes where an older weir kept them.

Snapshots pickle some of weir's own objects by reference to their class — a window used as
a namespace, a source split, an enumerator's state — so the bytes name the module the class
lived in when the snapshot was written. When a class moves, :func:`loads` still finds it:
:data:`RELOCATED` maps each old ``module`` to ``{class name: new module}``. Only the
classes whose instances snapshots hold are listed; the program's own classes travel with
the job.

The fast path is :func:`pickle.loads` itself; the relocation table is consulted only when
that fails to find a module or class, so state written by this version costs nothing extra.

A RocksDB native snapshot keys window state by the namespace's pickled bytes, which name
the class's module: windows of snapshots written before a move do not match the windows
this version writes. Such a job restores from a canonical savepoint (``weir savepoint
--type canonical`` taken with the older weir), whose keys are decoded and written anew.

Example:
    >>> import pickle
    >>> from weir.datastream.window import TimeWindow
    >>> old = pickle.dumps(TimeWindow(0, 10), protocol=2).replace(
    ...     b"weir.datastream.window.windows", b"weir.window")
    >>> loads(old)
    TimeWindow(start=0, end=10)
"""

from __future__ import annotations

import io
import pickle
from typing import Any

#: Old module -> {class name -> the module that defines it now}.
RELOCATED: dict[str, dict[str, str]] = {
    "weir.window": {
        name: "weir.datastream.window.windows"
        for name in ("Window", "TimeWindow", "CountWindow", "GlobalWindow")},
    "weir.sources.collection": {
        "CollectionSplit": "weir.datastream.connectors.collection",
        "CollectionSource": "weir.datastream.connectors.collection",
        "SequenceSplit": "weir.datastream.connectors.number_seq",
        "SequenceSource": "weir.datastream.connectors.number_seq",
        "NumberSequenceSource": "weir.datastream.connectors.number_seq",
    },
    "weir.sources.files": {
        "FileSplit": "weir.datastream.connectors.file_splits",
        "FileSplitEnumerator": "weir.datastream.connectors.file_splits",
        "FileSource": "weir.datastream.connectors.file_system",
        "StreamFormat": "weir.datastream.connectors.file_system",
    },
    "weir.connectors.spark": {
        name: "weir.datastream.connectors.spark" for name in ("StagedFiles", "SparkSource")},
    "weir.connectors.spark_staging": {
        name: "weir.datastream.connectors.spark_staging"
        for name in ("StagedResult", "StagingManifest")},
    "weir.operators.file_sink": {"PartNames": "weir.operators.sinks.file"},
}


class _RelocatingUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        moved = RELOCATED.get(module, {}).get(name)
        return super().find_class(moved or module, name)


def loads(data: bytes | bytearray | memoryview) -> Any:
    """Unpickle ``data`` (any thread), finding classes that moved since it was written.
    Raises what :func:`pickle.loads` raises when a class is not found at its old place or
    in :data:`RELOCATED` either."""
    try:
        return pickle.loads(data)
    except (ModuleNotFoundError, AttributeError):
        return _RelocatingUnpickler(io.BytesIO(data)).load()

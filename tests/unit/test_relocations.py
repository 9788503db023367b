"""State written before weir's classes moved still restores: splits, windows used as
namespaces, enumerator states name the modules of the weir that wrote them."""

from __future__ import annotations

import pickle

import pytest

from weir.core import relocations
from weir.datastream.connectors.file_splits import FileSplit
from weir.datastream.connectors.number_seq import SequenceSplit
from weir.datastream.window import TimeWindow
from weir.state.serializers import decode_key, deserialize_value, encode_key


def written_by_older_weir(value: object, now: str, then: str) -> bytes:
    """``value`` pickled as an older weir did, its class in module ``then``."""
    data = pickle.dumps(value, protocol=2)  # names the module as plain text
    assert now.encode() in data
    return data.replace(now.encode(), then.encode())


def test_a_split_of_an_older_weir_unpickles_as_todays_class() -> None:
    split = SequenceSplit(1, 100, offset=42)
    old = written_by_older_weir(split, "weir.datastream.connectors.number_seq",
                                "weir.sources.collection")
    with pytest.raises(ModuleNotFoundError):
        pickle.loads(old)
    assert deserialize_value(old) == split
    file_split = FileSplit("s3://bucket/a.parquet", "parquet", offset=3, start=1, end=2)
    old = written_by_older_weir(file_split, "weir.datastream.connectors.file_splits",
                                "weir.sources.files")
    assert relocations.loads(old) == file_split


def test_a_window_namespace_of_an_older_weir_decodes_and_encodes_as_todays() -> None:
    window = TimeWindow(0, 1_000)
    old = b"\xff" + written_by_older_weir(window, "weir.datastream.window.windows",
                                          "weir.window")
    assert decode_key(old) == window
    # Re-encoded today, the namespace names today's module: a canonical restore writes
    # rows that the window operator of this version finds.
    assert encode_key(decode_key(old)) == encode_key(window)


def test_an_unknown_class_still_fails_as_before() -> None:
    old = written_by_older_weir(TimeWindow(0, 1), "weir.datastream.window.windows",
                                "weir.nowhere")
    with pytest.raises(ModuleNotFoundError):
        relocations.loads(old)

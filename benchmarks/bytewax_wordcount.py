"""The per-record word count as a Bytewax 0.21 dataflow, for ``bench_wordcount.py``.

It runs in a virtualenv of its own (``build/venv-bytewax``: Bytewax and pyarrow only, no
weir), one OS process per Bytewax process, started by the benchmark as::

    python -m bytewax.run "bytewax_wordcount:flow('LINES_DIR', I, N, 'REPORT')" \\
        -i I -a "127.0.0.1:P0;127.0.0.1:P1"

The flow is the per-record form of the benchmark, step for step::

    input(Parquet files of lines/) -> flat_map(line.split) -> key_on(word)
        -> stateful_map(running count: every word emits its updated count) -> output(count)

* Input: process ``I`` of ``N`` reads the files ``part-K.parquet`` of ``LINES_DIR`` with
  ``K % N == I`` (one partition each), in batches of ``batch_lines`` lines.
* Output: a sink that counts the items it gets and drops them. When the dataflow ends
  (``close``), each worker writes ``REPORT-<worker>.json``: ``{"worker", "items"}``, and
  with ``keep_counts`` also ``"last"``, the last count seen per word (for the correctness
  check against ``value_counts``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bytewax.operators as op
import pyarrow.parquet as pq
from bytewax.dataflow import Dataflow
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from bytewax.outputs import DynamicSink, StatelessSinkPartition


class _LinesPartition(StatefulSourcePartition[str, None]):
    """One Parquet file of lines, read a batch at a time (no resume: recovery is off)."""

    def __init__(self, path: Path, batch_lines: int) -> None:
        self._batches: Iterator[Any] = pq.ParquetFile(path).iter_batches(
            batch_size=batch_lines, columns=["line"])

    def next_batch(self) -> list[str]:
        batch = next(self._batches)  # StopIteration at the end is Bytewax's end of input
        return batch.column(0).to_pylist()

    def snapshot(self) -> None:
        return None


class LinesSource(FixedPartitionedSource[str, None]):
    """The files of ``directory`` that belong to process ``process_id`` of ``processes``."""

    def __init__(self, directory: str, process_id: int, processes: int,
                 batch_lines: int) -> None:
        self._files = {p.name: p for p in sorted(Path(directory).glob("*.parquet"))
                       if int(p.stem.rpartition("-")[2]) % processes == process_id}
        self._batch_lines = batch_lines

    def list_parts(self) -> list[str]:
        return sorted(self._files)

    def build_part(self, step_id: str, for_part: str,
                   resume_state: None) -> _LinesPartition:
        return _LinesPartition(self._files[for_part], self._batch_lines)


class _CountingPartition(StatelessSinkPartition[tuple[str, int]]):
    def __init__(self, report: Path, keep_counts: bool) -> None:
        self._report = report
        self._items = 0
        self._last: dict[str, int] | None = {} if keep_counts else None

    def write_batch(self, items: list[tuple[str, int]]) -> None:
        self._items += len(items)
        if self._last is not None:
            self._last.update(items)

    def close(self) -> None:
        report: dict[str, Any] = {"worker": self._report.stem, "items": self._items}
        if self._last is not None:
            report["last"] = self._last
        partial = self._report.with_name(f".{self._report.name}")
        partial.write_text(json.dumps(report))
        partial.rename(self._report)


class CountingSink(DynamicSink[tuple[str, int]]):
    """Counts the items each worker receives and drops them; reports them at the end."""

    def __init__(self, report: str, keep_counts: bool) -> None:
        self._report = report
        self._keep_counts = keep_counts

    def build(self, step_id: str, worker_index: int,
              worker_count: int) -> _CountingPartition:
        return _CountingPartition(Path(f"{self._report}-{worker_index}.json"),
                                  self._keep_counts)


def split_line(line: str) -> list[str]:
    return line.split()


def word_key(word: str) -> str:
    return word


def running_count(count: int | None, _word: str) -> tuple[int, int]:
    count = (count or 0) + 1
    return count, count


def flow(lines_dir: str, process_id: int, processes: int, report: str,
         keep_counts: bool = False, batch_lines: int = 4096) -> Dataflow:
    """The word-count dataflow of process ``process_id`` of ``processes``."""
    dataflow = Dataflow("wordcount")
    lines = op.input("lines", dataflow,
                     LinesSource(lines_dir, process_id, processes, batch_lines))
    words = op.flat_map("split", lines, split_line)
    keyed = op.key_on("word", words, word_key)
    counts = op.stateful_map("count", keyed, running_count)
    op.output("discard", counts, CountingSink(report, keep_counts))
    return dataflow

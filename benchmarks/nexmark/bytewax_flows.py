"""Nexmark q0, q1 and q2 as Bytewax dataflows, timed in this process.

Run with the interpreter of a virtualenv that has ``bytewax`` (``bench_nexmark.py``
makes one under ``build/``), not weir's: it imports only :mod:`generator` (numpy and
pyarrow) from this folder. Prints one JSON object per query:
``{"query", "form", "events", "wall_s", "cpu_s", "outputs"}``.

Two forms, as a Bytewax user would write them:

* ``records``: the source emits one dict per bid; ``op.map``/``op.filter`` run per record;
* ``batches``: the source emits one Arrow batch of bids per poll; the operators compute
  on the batch with pyarrow (Bytewax passes it on as one item).

Both run one worker (``bytewax.testing.run_main``); the source generates events with the
same numpy generator as weir's jobs, ``batch`` event numbers per poll.

Usage: ``python bytewax_flows.py EVENTS q0,q1,q2 records,batches``
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parent))

import generator
from bytewax import operators as op
from bytewax.dataflow import Dataflow
from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
from bytewax.outputs import DynamicSink, StatelessSinkPartition
from bytewax.testing import run_main

BATCH = 65_536  #: event numbers per poll of the source
DOLLAR_TO_EURO = 0.908


class _Partition(StatefulSourcePartition[Any, int]):
    def __init__(self, events: int, position: int, as_records: bool) -> None:
        self.events = events
        self.position = position
        self.as_records = as_records

    def next_batch(self) -> list[Any]:
        if self.position >= self.events:
            raise StopIteration
        stop = min(self.events, self.position + BATCH)
        bids = generator.bids(np.arange(self.position, stop, dtype=np.int64))
        self.position = stop
        return bids.to_pylist() if self.as_records else [bids]

    def snapshot(self) -> int:
        return self.position


class BidSource(FixedPartitionedSource[Any, int]):
    def __init__(self, events: int, as_records: bool) -> None:
        self.events = events
        self.as_records = as_records

    def list_parts(self) -> list[str]:
        return ["bids"]

    def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> _Partition:
        return _Partition(self.events, resume_state or 0, self.as_records)


class _Counting(StatelessSinkPartition[Any]):
    def __init__(self, counter: list[int]) -> None:
        self.counter = counter

    def write_batch(self, items: list[Any]) -> None:
        for item in items:
            self.counter[0] += item.num_rows if isinstance(item, pa.RecordBatch) else 1


class CountingSink(DynamicSink[Any]):
    """Drops what it gets, counting the records."""

    def __init__(self) -> None:
        self.counter = [0]

    def build(self, step_id: str, worker_index: int, worker_count: int) -> _Counting:
        return _Counting(self.counter)


def _q0_record(bid: dict[str, Any]) -> dict[str, Any]:
    return {k: bid[k] for k in ("auction", "bidder", "price", "date_time", "extra")}


def _q1_record(bid: dict[str, Any]) -> dict[str, Any]:
    return {"auction": bid["auction"], "bidder": bid["bidder"],
            "price": DOLLAR_TO_EURO * bid["price"], "date_time": bid["date_time"],
            "extra": bid["extra"]}


def _q2_keep(bid: dict[str, Any]) -> bool:
    return bool(bid["auction"] % 123 == 0)


def _q2_record(bid: dict[str, Any]) -> tuple[int, int]:
    return bid["auction"], bid["price"]


def _q0_batch(bids: pa.RecordBatch) -> pa.RecordBatch:
    return bids.select(["auction", "bidder", "price", "date_time", "extra"])


def _q1_batch(bids: pa.RecordBatch) -> pa.RecordBatch:
    euros = pc.multiply(pc.cast(bids.column("price"), pa.float64()), DOLLAR_TO_EURO)
    return pa.RecordBatch.from_arrays(
        [bids.column("auction"), bids.column("bidder"), euros, bids.column("date_time"),
         bids.column("extra")], names=["auction", "bidder", "price", "date_time", "extra"])


def _q2_batch(bids: pa.RecordBatch) -> pa.RecordBatch:
    keep = pa.array(bids.column("auction").to_numpy() % 123 == 0)
    return bids.filter(keep).select(["auction", "price"])


def flow(query: str, form: str, events: int, sink: CountingSink) -> Dataflow:
    df = Dataflow(f"nexmark_{query}_{form}")
    stream = op.input("bids", df, BidSource(events, as_records=form == "records"))
    if form == "records":
        if query == "q0":
            stream = op.map("q0", stream, _q0_record)
        elif query == "q1":
            stream = op.map("q1", stream, _q1_record)
        else:
            stream = op.map("q2_project", op.filter("q2", stream, _q2_keep), _q2_record)
    else:
        fn = {"q0": _q0_batch, "q1": _q1_batch, "q2": _q2_batch}[query]
        stream = op.map(query, stream, fn)
    op.output("discard", stream, sink)
    return df


def main(argv: list[str]) -> int:
    events = int(argv[0])
    for query in argv[1].split(","):
        for form in argv[2].split(","):
            sink = CountingSink()
            df = flow(query, form, events, sink)
            wall, cpu = time.perf_counter(), time.process_time()
            run_main(df)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print(json.dumps({"query": query, "form": form, "events": events,
                              "wall_s": wall, "cpu_s": cpu, "outputs": sink.counter[0]}),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

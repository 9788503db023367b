"""Word-count throughput of weir on a local cluster, against a single-process ceiling,
Bytewax, and itself at parallelism 1.

What is measured
----------------
Input: ``--words`` words (10,000,000; 1,000,000 with ``--quick``) drawn with a fixed seed
from a 100,000-word vocabulary, in two key distributions:

* ``zipf``: Zipf-like skew (P(rank k) ~ 1/k), a few words are most of the input;
* ``uniform``: the same vocabulary drawn uniformly, so every batch touches many distinct
  keys (the hard case for per-key state).

Each is written once to 4 Parquet files under ``build/bench-data/`` (reused when present)
in two shapes:

* ``words/``: column ``word``, one word per row (for the vectorised form);
* ``lines/``: column ``line``, 10 words per row separated by spaces (per-record form);
* ``one-file-16/words.parquet``, ``one-file-16/lines.parquet``: the same in one file
  each, of 16 row groups (the one-file forms, zipf only).

One local cluster (``weir cluster start``: a JobMaster and 2 TaskExecutors with one slot
each, all separate OS processes; ``--taskexecutors`` and ``--slots`` change the layout)
serves the whole run. One slot per TaskExecutor makes a
job at parallelism 2 run one subtask on each TaskExecutor, and one at parallelism 1 use
one TaskExecutor; the TaskExecutors each job ran on are recorded
(``*_taskexecutors``). The forms (``--forms``; the default is marked *):

(a) vectorised (``vectorized``\\* on zipf keys, ``vectorized_uniform``\\* on uniform keys,
    parallelism 2)::

        from_source(words/).map_batches(identity).key_by("word").count()
                           .sink_to(DiscardingSink())

    Arrow batches end to end: vectorised murmur3 key-group hashing in the exchange and a
    running count per key computed per batch (every word still gets its running count
    emitted, as in Flink).

(b) per-record (``per_record``\\* on zipf keys, ``per_record_uniform`` on uniform keys,
    parallelism 2)::

        from_source(lines/).flat_map(lambda row: [(w, 1) for w in row["line"].split()])
            .key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
            .sink_to(DiscardingSink())

    One Python call per line and several per word (key selector, reduce). The benchmark
    uses named module-level functions (``split_line``, ``first``, ``add_counts``) with
    exactly these bodies.

(c) scaling (``vectorized_p1``\\*, ``per_record_p1``\\*): (a) and (b) on zipf keys at
    parallelism 1. ``*_scaling`` is the time at parallelism 1 over the time at
    parallelism 2 (the target is 1.8x). Both parallelisms run on the same cluster, in the
    same timed run, one after the other.

(d) Bytewax (``bytewax``\\*): the per-record form as a Bytewax 0.21 dataflow
    (``bytewax_wordcount.py``) over the same ``lines/`` files (zipf): ``flat_map`` split,
    ``key_on`` the word, ``stateful_map`` running count (every word emits its updated
    count, like weir's reduce), into a sink that counts and drops. It runs as 2 Bytewax
    processes with one worker each (``python -m bytewax.run ... -i I -a ADDRESSES``),
    process I reading the files K with K % 2 == I. Bytewax (``bytewax==0.21.1``) and
    pyarrow are installed into ``build/venv-bytewax`` on first use and reused afterwards;
    if that fails (no network, ...), the form is skipped with one line saying why. It is
    timed from starting the two processes to both having exited, so its time includes
    two interpreter starts and imports (its "empty job" time shows how much).
    ``per_record_vs_bytewax`` is weir's per-record rate over Bytewax's (the target is 3x);
    ``per_record_vs_bytewax_cpu`` is Bytewax's CPU time per word over weir's.

(e) one file (``one_file``, ``per_record_one_file``; opt-in): (a) and (b) over the
    one-file dataset. The file source splits the file into ranges of row groups, so both
    subtasks read it.

(f) one file, unsplit (``one_file_unsplit``, ``per_record_one_file_unsplit``; opt-in):
    the same with ``FileSource(split_bytes=`` larger than the file``)``: one split, read by
    one subtask, as before files were split. (e) against (f), in the same run, is what
    splitting a large file buys (``*_split_speedup``).

Each job is timed end to end on the client: from building/submitting the job graph to the
JobMaster reporting FINISHED (polled every 20 ms). ``records/s = words / seconds``. The
fixed cost of a job (submission, scheduling, deployment to the TaskExecutors, teardown;
for Bytewax the process starts) is measured with the same pipelines over a 40-word input
("empty job"); rates net of it are reported too (``*_net_*`` keys).

Machine scaling (with any parallelism-1 form): the same work without an engine, an
Arrow word count (``read_table`` + ``value_counts``) and a Python one (split lines, count in
a dict), in one process over the 4 files and in two processes over 2 files each, started
together: what the machine gives two processes over one, beside the scaling targets.

Ceiling: one Python process reads the same ``words/`` Parquet files
(``pyarrow.parquet.read_table``) and runs ``pyarrow.compute.value_counts`` on the column:
the best one process can do for "count every word" with Arrow, reading included (the
Parquet reader may use Arrow's thread pool, as it would anywhere). It is measured on each
key distribution, 3 times per timed run, interleaved with the jobs, and the median is used
(also reported: the same with ``use_threads=False``). It only produces final counts, not a
running count per record, so it is an upper bound. A form's "of ceiling" is against the
ceiling of its own key distribution (the target for the vectorised forms is 50%).

CPU: the CPU time the cluster processes (TaskExecutors and JobMaster, from /proc) used
during each job, per record, next to the ceiling's own CPU time per word (for Bytewax:
the CPU time of its two processes, start-up included): on this shared 2-core machine it
separates "the engine does too much work" from "it waited".

Correctness guard: before timing, every form runs once on a 100,000-word input (of its
key distribution), weir's with ``execute_and_collect``, Bytewax's with a sink that keeps
the last count per word; the last count seen per word must equal ``value_counts`` of the
input and there must be one update per word, or the benchmark stops with an error.

Runs: ``--runs`` (default 3, 2 with ``--quick``) timed runs of each form, in the order of
``--forms`` on odd runs and reversed on even runs, so that no form always runs first;
medians are reported. Results: two tables on stdout (the forms; the targets) and
``benchmarks/results/wordcount.json`` (``<form>_records_per_s``, ``ceiling_records_per_s``,
``ceiling_uniform_records_per_s``, ``<form>_ratio_to_ceiling``, ``per_record_vs_bytewax``,
``vectorized_scaling``, ``per_record_scaling``, ``targets``, per-run times, machine info).

``--profile`` adds one more run of each weir form with py-spy sampling both TaskExecutors
(``py-spy record --format raw --threads``; raw stacks under ``build/bench-profiles/``,
not committed) and prints/stores the busiest threads and the top functions by self and
total samples (samples of threads waiting in a lock, socket or sleep are left out).
``--profile-gil`` samples only the thread holding each TaskExecutor's GIL instead: the
interpreter's time, undistorted by threads queueing for the GIL, but without work done
with the GIL released (Parquet decoding, most Arrow kernels).
``--batch-size`` sets ``pipeline.batch-size`` for the jobs and ``-D KEY=VALUE`` configures
the cluster's daemons, to try engine settings.

Usage::

    python benchmarks/bench_wordcount.py --quick          # 1-2 minutes
    python benchmarks/bench_wordcount.py                  # full size, 6-10 minutes
    python benchmarks/bench_wordcount.py --forms vectorized,vectorized_uniform --runs 5
    python benchmarks/bench_wordcount.py --profile --runs 1 --batch-size 65536
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    BUILD_DIR,
    BYTEWAX_REQUIREMENTS,
    RESULTS_DIR,
    LocalCluster,
    Profiler,
    children_cpu_seconds,
    engine_revision,
    ensure_bytewax,
    format_table,
    free_port,
    machine_info,
    median,
    rate,
    run_job,
    summarise_profile,
    timed,
    write_json,
)

from weir import DiscardingSink
from weir.datastream.connectors.file_system import FileSource

FULL_WORDS = 10_000_000
QUICK_WORDS = 1_000_000
VERIFY_WORDS = 100_000
EMPTY_WORDS = 40
VOCABULARY = 100_000
WORDS_PER_LINE = 10
FILES = 4
ZIPF_EXPONENT = 1.0
SEED = 20240611
PARALLELISM = 2
TASKEXECUTORS = 2
SLOTS = 1  #: per TaskExecutor: a job at parallelism 2 spreads over both
CEILING_REPEATS = 3  #: ceiling measurements per timed run (it is cheap)
KEYS = ("zipf", "uniform")

DATA_DIR = BUILD_DIR / "bench-data"
CLUSTER_DIR = BUILD_DIR / "bench-cluster-wordcount"
PROFILE_DIR = BUILD_DIR / "bench-profiles"
BYTEWAX_FLOW = Path(__file__).resolve().parent / "bytewax_wordcount.py"
BYTEWAX_PROCESSES = 2
BYTEWAX_RUN_DIR = BUILD_DIR / "bench-bytewax"

#: The targets, checked and printed at the end: key -> (what, target value).
TARGETS = {
    "per_record_vs_bytewax": ("weir per-record / Bytewax (2 processes)", 3.0),
    "per_record_records_per_s": ("weir per-record words/s", 1_000_000.0),
    "vectorized_ratio_to_ceiling": ("vectorised (zipf) of ceiling", 0.5),
    "vectorized_uniform_ratio_to_ceiling": ("vectorised (uniform) of ceiling", 0.5),
    "vectorized_scaling": ("vectorised, parallelism 1 -> 2", 1.8),
    "per_record_scaling": ("per-record, parallelism 1 -> 2", 1.8),
}
#: What the speedup of splitting one file is reported for: (split form, unsplit form).
SPLIT_PAIRS = {"one_file_split_speedup": ("one_file", "one_file_unsplit"),
               "per_record_one_file_split_speedup": ("per_record_one_file",
                                                     "per_record_one_file_unsplit")}
#: Speedup from parallelism 1 to 2: (form at parallelism 2, the same at parallelism 1).
SCALING_PAIRS = {"vectorized_scaling": ("vectorized", "vectorized_p1"),
                 "per_record_scaling": ("per_record", "per_record_p1")}
#: Row groups per one-file dataset (as a writer with a row-group size limit leaves them).
ONE_FILE_ROW_GROUPS = 16


# -- input data ------------------------------------------------------------------------------------


def vocabulary(size: int, seed: int) -> list[str]:
    """``size`` distinct lowercase pseudo-words, 2-12 letters, English-like length spread."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"etaoinshrdlcumwfgypbvkjxqz", dtype=np.uint8)
    weights = 1.0 / np.arange(1, 27) ** 0.8
    weights /= weights.sum()
    lengths = np.clip(rng.poisson(5.0, size * 2) + 1, 2, 12)
    chars = letters[rng.choice(26, size=int(lengths.sum()), p=weights)].tobytes().decode()
    words: list[str] = []
    seen: set[str] = set()
    offset = 0
    for length in lengths.tolist():
        word = chars[offset:offset + length]
        offset += length
        if word not in seen:
            seen.add(word)
            words.append(word)
            if len(words) == size:
                return words
    msg = "could not draw enough distinct words"
    raise RuntimeError(msg)


def ensure_dataset(n_words: int, keys: str = "zipf") -> Path:
    """The dataset of ``n_words`` words (``words/`` and ``lines/``) with ``keys`` (zipf or
    uniform) distributed words, generated once."""
    if n_words % (WORDS_PER_LINE * FILES):
        msg = f"--words must be a multiple of {WORDS_PER_LINE * FILES}"
        raise ValueError(msg)
    if keys not in KEYS:
        msg = f"unknown key distribution {keys!r}: one of {', '.join(KEYS)}"
        raise ValueError(msg)
    shape = f"zipf{ZIPF_EXPONENT}" if keys == "zipf" else "uniform"
    root = DATA_DIR / f"wordcount-{n_words}-v{VOCABULARY}-{shape}-seed{SEED}"
    if (root / "_COMPLETE").exists():
        return root
    started = time.perf_counter()
    print(f"generating {n_words:,} words under {root} ...", flush=True)
    vocab = pa.array(vocabulary(VOCABULARY, SEED), pa.string())
    rng = np.random.default_rng(SEED + n_words)
    if keys == "zipf":
        # Frequency rank -> word, shuffled so that frequent words are not the short ones.
        word_of_rank = np.random.default_rng(SEED + 1).permutation(VOCABULARY)
        p = 1.0 / np.arange(1, VOCABULARY + 1, dtype=np.float64) ** ZIPF_EXPONENT
        p /= p.sum()
        indices = word_of_rank[rng.choice(VOCABULARY, size=n_words, p=p)]
    else:
        indices = rng.integers(0, VOCABULARY, size=n_words)
    words = vocab.take(pa.array(indices))
    per_file = n_words // FILES
    for sub in ("words", "lines"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for i in range(FILES):
        chunk = words.slice(i * per_file, per_file)
        pq.write_table(pa.table({"word": chunk}), root / "words" / f"part-{i}.parquet")
        columns = [chunk.take(pa.array(np.arange(j, per_file, WORDS_PER_LINE)))
                   for j in range(WORDS_PER_LINE)]
        lines = pc.binary_join_element_wise(*columns, " ")
        pq.write_table(pa.table({"line": lines}), root / "lines" / f"part-{i}.parquet")
    (root / "_COMPLETE").write_text(f"{n_words}\n")
    print(f"  done in {time.perf_counter() - started:.1f} s", flush=True)
    return root


def one_file(root: Path, sub: str) -> Path:
    """``sub/`` (words or lines) rewritten as one Parquet file of
    :data:`ONE_FILE_ROW_GROUPS` row groups (made once, next to it)."""
    path = root / f"one-file-{ONE_FILE_ROW_GROUPS}" / f"{sub}.parquet"
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        partial = path.with_name(f".{sub}.parquet")
        table = pq.read_table(root / sub)
        pq.write_table(table, partial,
                       row_group_size=max(1, -(-table.num_rows // ONE_FILE_ROW_GROUPS)))
        partial.rename(path)
    return path


# -- the pipelines ---------------------------------------------------------------------------------


def identity(batch: pa.RecordBatch) -> pa.RecordBatch:
    return batch


def split_line(row: Any) -> list[tuple[str, int]]:
    return [(w, 1) for w in row["line"].split()]


def first(pair: tuple[str, int]) -> str:
    return pair[0]


def add_counts(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    return (a[0], a[1] + b[1])


def vectorized(env: Any, source: Any) -> Any:
    return (env.from_source(source, format="parquet")
            .map_batches(identity)
            .key_by("word")
            .count())


def per_record(env: Any, source: Any) -> Any:
    return (env.from_source(source, format="parquet")
            .flat_map(split_line)
            .key_by(first)
            .reduce(add_counts))


def files(sub: str) -> Callable[[Path], Any]:
    """The source of the 4 files of ``sub``."""
    return lambda root: str(root / sub)


def single(sub: str, split: bool) -> Callable[[Path], Any]:
    """The source of ``sub`` as one file: split into ranges of row groups as usual, or
    (``split`` False) read whole by one subtask."""
    def source(root: Path) -> Any:
        path = one_file(root, sub)
        if split:
            return str(path)
        return FileSource(str(path), format="parquet", split_bytes=path.stat().st_size * 100)
    return source

if __name__ != "__main__":
    # Imported (e.g. by a test or notebook): ship the functions above by value, as the
    # TaskExecutors cannot import this module.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


@dataclass(frozen=True)
class Form:
    """A timed job: its pipeline (None: the Bytewax flow), its source given the dataset
    root, the key distribution of its dataset, and its parallelism."""

    pipeline: Callable[[Any, Any], Any] | None
    source: Callable[[Path], Any]
    keys: str = "zipf"
    parallelism: int = PARALLELISM


FORMS: dict[str, Form] = {
    "vectorized": Form(vectorized, files("words")),
    "vectorized_uniform": Form(vectorized, files("words"), "uniform"),
    "per_record": Form(per_record, files("lines")),
    "per_record_uniform": Form(per_record, files("lines"), "uniform"),
    "vectorized_p1": Form(vectorized, files("words"), parallelism=1),
    "per_record_p1": Form(per_record, files("lines"), parallelism=1),
    "bytewax": Form(None, files("lines"), parallelism=BYTEWAX_PROCESSES),
    "one_file": Form(vectorized, single("words", split=True)),
    "one_file_unsplit": Form(vectorized, single("words", split=False)),
    "per_record_one_file": Form(per_record, single("lines", split=True)),
    "per_record_one_file_unsplit": Form(per_record, single("lines", split=False)),
}
#: The default run; the order in which they run (odd runs; even runs reverse it).
DEFAULT_FORMS = ("vectorized", "vectorized_p1", "vectorized_uniform", "per_record",
                 "per_record_p1", "bytewax")
#: Kept for importers (bench_checkpoint): form -> (pipeline, source of the dataset root).
PIPELINES: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Path], Any]]] = {
    name: (form.pipeline, form.source) for name, form in FORMS.items()
    if form.pipeline is not None}


@dataclass
class Timing:
    """One timed run of a form."""

    wall_s: float
    cluster_s: float  #: the JobMaster's own start..end time (Bytewax: = wall_s)
    cpu_s: float  #: CPU seconds the cluster (or Bytewax's processes) used meanwhile
    taskexecutors: int = 0  #: how many TaskExecutors the job's subtasks ran on


def run_form(cluster: LocalCluster, form: str, root: Path, config: dict[str, Any]) -> Any:
    """Run a weir form on the cluster over the dataset at ``root``; its ``JobTiming``."""
    spec = FORMS[form]
    if spec.pipeline is None:
        msg = f"{form} is not a weir job"
        raise ValueError(msg)
    env = cluster.environment(config)
    env.set_parallelism(spec.parallelism)
    spec.pipeline(env, spec.source(root)).sink_to(DiscardingSink())
    pids = [*cluster.taskexecutor_pids(), cluster.jobmaster_pid()]
    return run_job(env, f"bench wordcount {form} ({root.name})", cpu_pids=pids)


def time_form(cluster: LocalCluster, form: str, root: Path, config: dict[str, Any],
              bytewax: Path | None) -> Timing:
    """One timed run of ``form`` (weir's on the cluster, or Bytewax's with ``bytewax``)."""
    if FORMS[form].pipeline is None:
        if bytewax is None:
            msg = "Bytewax is not installed"
            raise RuntimeError(msg)
        wall, cpu, _ = run_bytewax(bytewax, root, expect=words_of(root))
        return Timing(wall, wall, cpu)
    timing = run_form(cluster, form, root, config)
    details = timing.details
    resources = {s.resource_id for v in details.vertices for s in v.subtasks} if details \
        else set()
    return Timing(timing.wall_s, timing.cluster_s, sum(timing.cpu_s.values()), len(resources))


def words_of(root: Path) -> int:
    return int((root / "_COMPLETE").read_text())


# -- Bytewax ---------------------------------------------------------------------------------------


def run_bytewax(python: Path, root: Path, expect: int,
                keep_counts: bool = False) -> tuple[float, float, dict[str, int]]:
    """Run the Bytewax flow on ``root``'s lines as 2 processes; (wall s, CPU s, counts).

    Timed from starting the processes to both having exited. ``counts`` is the last count
    per word with ``keep_counts``, else empty. Raises when a process fails or the flow
    did not emit ``expect`` updates.
    """
    run_dir = BYTEWAX_RUN_DIR
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    addresses = ";".join(f"127.0.0.1:{free_port()}" for _ in range(BYTEWAX_PROCESSES))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    procs: list[subprocess.Popen[bytes]] = []
    cpu = children_cpu_seconds()
    started = time.perf_counter()
    try:
        for i in range(BYTEWAX_PROCESSES):
            factory = (f"flow({str(root / 'lines')!r}, {i}, {BYTEWAX_PROCESSES}, "
                       f"{str(run_dir / 'report')!r}, keep_counts={keep_counts})")
            with (run_dir / f"process-{i}.log").open("wb") as log:
                procs.append(subprocess.Popen(
                    [str(python), "-m", "bytewax.run", f"{BYTEWAX_FLOW}:{factory}",
                     "-i", str(i), "-a", addresses],
                    stdout=log, stderr=subprocess.STDOUT, env=env, cwd=run_dir))
        codes = [proc.wait(timeout=3600) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    wall = time.perf_counter() - started
    cpu = children_cpu_seconds() - cpu
    for i, code in enumerate(codes):
        if code:
            log = (run_dir / f"process-{i}.log").read_text(errors="replace").strip()
            msg = (f"Bytewax process {i} exited with {code}: "
                   f"{log.splitlines()[-1] if log else 'no output'} ({run_dir})")
            raise RuntimeError(msg)
    items = 0
    counts: dict[str, int] = {}
    for report in sorted(run_dir.glob("report-*.json")):
        data = json.loads(report.read_text())
        items += data["items"]
        counts.update(data.get("last", {}))
    if items != expect:
        msg = f"the Bytewax flow emitted {items:,} updates for {expect:,} words ({run_dir})"
        raise AssertionError(msg)
    return wall, cpu, counts


# -- the ceiling and the correctness guard ---------------------------------------------------------


def ceiling_run(root: Path, use_threads: bool = True,
                words: int | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds for this process to read the word column and value_counts it.

    With ``words``, also checks that the counts add up to it (once, outside the timing).
    """
    def work() -> pa.StructArray:
        table = pq.read_table(root / "words", columns=["word"], use_threads=use_threads)
        return pc.value_counts(table["word"])

    cpu = time.process_time()
    seconds, counts = timed(work)
    cpu = time.process_time() - cpu
    if words is not None and pc.sum(counts.field("counts")).as_py() != words:
        msg = f"the ceiling's value_counts does not add up to {words:,} words"
        raise AssertionError(msg)
    return seconds, cpu


#: The work of one process of the machine's scaling ceilings (see machine_scaling): it reads
#: the Parquet files given, prints "ready", waits for a line on stdin, does the work, and
#: prints the seconds it took. "arrow": read the words and value_counts them; "python": a
#: per-record Python word count of the lines (split each line, count in a dict).
_SCALING_WORK = r"""
import sys, time
import pyarrow.compute as pc, pyarrow.parquet as pq
kind, paths = sys.argv[1], sys.argv[2:]
if kind == "python":
    lines = [line for p in paths for line in pq.read_table(p)["line"].to_pylist()]
print("ready", flush=True)
sys.stdin.readline()
start = time.perf_counter()
if kind == "arrow":
    for p in paths:
        pc.value_counts(pq.read_table(p, columns=["word"], use_threads=False)["word"])
else:
    counts = {}
    get = counts.get
    for line in lines:
        for word in line.split():
            counts[word] = get(word, 0) + 1
print(time.perf_counter() - start, flush=True)
"""


def machine_scaling(root: Path, kind: str) -> dict[str, float]:
    """What this machine gives two processes over one, with no engine involved: the same
    work (``_SCALING_WORK``) over all 4 files in one process, then over 2 files each in two
    processes started together. Returns both times and their ratio (1 process / 2).

    Two cores shared with other machines' work, or a memory system two busy cores
    saturate, give less than 2x; that bounds what any engine's parallelism 1 -> 2 can give
    here, and is reported beside the scaling targets.
    """
    sub = "words" if kind == "arrow" else "lines"
    parts = sorted(str(p) for p in (root / sub).glob("*.parquet"))

    def together(groups: list[list[str]]) -> float:
        procs = [subprocess.Popen([sys.executable, "-c", _SCALING_WORK, kind, *group],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for group in groups]
        try:
            for proc in procs:
                assert proc.stdout is not None
                if proc.stdout.readline().strip() != "ready":
                    msg = f"a {kind} scaling process failed to start"
                    raise RuntimeError(msg)
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write("go\n")
                proc.stdin.flush()
            took = []
            for proc in procs:
                out, _ = proc.communicate(timeout=600)
                if proc.returncode:
                    msg = f"a {kind} scaling process exited with {proc.returncode}"
                    raise RuntimeError(msg)
                took.append(float(out.strip()))
            return max(took)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    one = median([together([parts]) for _ in range(CEILING_REPEATS)])
    two = median([together([parts[0::2], parts[1::2]]) for _ in range(CEILING_REPEATS)])
    return {"one_process_s": one, "two_processes_s": two, "scaling": one / two}


def expected_counts(root: Path) -> dict[str, int]:
    counts = pc.value_counts(pq.read_table(root / "words", columns=["word"])["word"])
    return dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(),
                    strict=True))


def check_counts(form: str, expected: dict[str, int], last: dict[str, int],
                 updates: int) -> None:
    """Raise AssertionError unless ``last`` (the last count seen per word) and the number of
    updates are exactly what ``expected`` (value_counts of the input) says."""
    words = sum(expected.values())
    problems = []
    if updates != words:
        problems.append(f"{updates:,} running-count updates for {words:,} words")
    wrong = [w for w in expected if last.get(w) != expected[w]]
    extra = set(last) - set(expected)
    if wrong:
        sample = ", ".join(f"{w!r}: got {last.get(w)}, expected {expected[w]}"
                           for w in wrong[:5])
        problems.append(f"{len(wrong):,} of {len(expected):,} words counted wrong ({sample})")
    if extra:
        problems.append(f"{len(extra):,} words that are not in the input")
    if problems:
        msg = f"WRONG RESULT of the {form} word count: " + "; ".join(problems)
        raise AssertionError(msg)


def verify(cluster: LocalCluster, roots: dict[str, Path], config: dict[str, Any],
           forms: list[str], bytewax: Path | None) -> dict[str, float]:
    """Run every form on the small input; the last count per word must be exact."""
    expected = {keys: expected_counts(root) for keys, root in roots.items()}
    took = {}
    for form in forms:
        spec = FORMS[form]
        root = roots[spec.keys]
        want = expected[spec.keys]
        words = sum(want.values())
        last: dict[str, int] = {}
        if spec.pipeline is None:
            if bytewax is None:
                continue
            took[form], _, last = run_bytewax(bytewax, root, expect=words, keep_counts=True)
            updates = words  # run_bytewax checked the number of updates
        else:
            env = cluster.environment(config)
            env.set_parallelism(spec.parallelism)
            stream = spec.pipeline(env, spec.source(root))
            started = time.perf_counter()
            updates = 0
            with stream.execute_and_collect(f"bench wordcount verify {form}") as results:
                for record in results:
                    last[record[0]] = record[1]
                    updates += 1
            took[form] = time.perf_counter() - started
        check_counts(form, want, last, updates)
        print(f"  {form:27} correct: {len(want):,} distinct words, {words:,} updates "
              f"({took[form]:.1f} s)", flush=True)
    return took


# -- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_WORDS:,} words and 2 runs (1-2 minutes)")
    parser.add_argument("--runs", type=int, help="timed runs of each form (default 3; quick 2)")
    parser.add_argument("--words", type=int,
                        help=f"input size (default {FULL_WORDS:,}; quick {QUICK_WORDS:,})")
    parser.add_argument("--batch-size", type=int,
                        help="pipeline.batch-size of the jobs (default: the engine's default)")
    parser.add_argument("-D", dest="cluster_options", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="configuration of the cluster's daemons (repeatable), e.g. "
                             "-D taskmanager.memory.segment-size=1mb")
    parser.add_argument("--forms", default=",".join(DEFAULT_FORMS),
                        help=f"comma-separated forms to time, in this order (default: "
                             f"{','.join(DEFAULT_FORMS)}; all: {','.join(FORMS)})")
    parser.add_argument("--taskexecutors", type=int, default=TASKEXECUTORS,
                        help=f"TaskExecutors of the cluster (default {TASKEXECUTORS})")
    parser.add_argument("--slots", type=int, default=SLOTS,
                        help=f"slots per TaskExecutor (default {SLOTS}); --taskexecutors 1 "
                             "--slots 2 runs a job at parallelism 2 in one process")
    parser.add_argument("--no-verify", action="store_true", help="skip the correctness guard")
    parser.add_argument("--profile", action="store_true",
                        help="one extra run per weir form under py-spy (TaskExecutor "
                             "processes)")
    parser.add_argument("--profile-gil", action="store_true",
                        help="like --profile, but sample only the thread holding each "
                             "TaskExecutor's GIL (py-spy --gil): where interpreter time "
                             "goes, without threads that merely wait for the GIL")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "wordcount.json",
                        help="where to write the JSON results")
    args = parser.parse_args(argv)
    args.profile = args.profile or args.profile_gil
    args.words = args.words or (QUICK_WORDS if args.quick else FULL_WORDS)
    args.runs = args.runs or (2 if args.quick else 3)
    args.forms = list(dict.fromkeys(f.strip() for f in args.forms.split(",") if f.strip()))
    unknown = set(args.forms) - set(FORMS)
    if unknown:
        parser.error(f"unknown form(s) {', '.join(sorted(unknown))}: "
                     f"choose from {', '.join(FORMS)}")
    if args.runs < 1 or not args.forms:
        parser.error("--runs must be at least 1 and --forms must name a form")
    if args.taskexecutors < 1 or args.slots < 1 or \
            args.taskexecutors * args.slots < max(FORMS[f].parallelism for f in args.forms):
        parser.error("--taskexecutors x --slots must hold the forms' parallelism (2)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Ctrl-C must reach the clean-up even when started from a shell that ignores SIGINT
    # for background jobs; SIGTERM is turned into KeyboardInterrupt by LocalCluster.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    begun = time.perf_counter()
    info = machine_info()
    revision = engine_revision()  # at the start: others may edit the engine meanwhile
    config: dict[str, Any] = {}
    if args.batch_size:
        config["pipeline.batch-size"] = args.batch_size
    bytewax: Path | None = None
    if "bytewax" in args.forms:
        bytewax = ensure_bytewax()
        if bytewax is None:
            args.forms.remove("bytewax")
            if not args.forms:
                return 1
    forms: list[str] = args.forms
    keys = sorted({"zipf"} | {FORMS[f].keys for f in forms}, key=KEYS.index)
    roots = {k: ensure_dataset(args.words, k) for k in keys}
    verify_roots = {k: ensure_dataset(VERIFY_WORDS, k) for k in keys}
    empty_roots = {k: ensure_dataset(EMPTY_WORDS, k) for k in keys}

    times: dict[str, list[Timing]] = {f: [] for f in forms}
    empty: dict[str, list[float]] = {f: [] for f in forms}
    # key distribution -> (wall, CPU) per measurement; the same reading without threads
    ceiling: dict[str, list[tuple[float, float]]] = {k: [] for k in keys}
    ceiling_1t: dict[str, list[float]] = {k: [] for k in keys}
    profiles: dict[str, Any] = {}
    verified: dict[str, float] = {}

    scaling_ceilings: dict[str, dict[str, float]] = {}
    if any(FORMS[f].parallelism == 1 for f in forms):
        for kind in ("arrow", "python"):
            scaling_ceilings[kind] = machine_scaling(roots["zipf"], kind)
            found = scaling_ceilings[kind]
            print(f"machine scaling ceiling ({kind}): 1 process {found['one_process_s']:.2f} s,"
                  f" 2 processes {found['two_processes_s']:.2f} s: {found['scaling']:.2f}x",
                  flush=True)
    print(f"starting a local cluster ({args.taskexecutors} TaskExecutor(s) x {args.slots} "
          f"slot(s)) in {CLUSTER_DIR}", flush=True)
    with LocalCluster(CLUSTER_DIR, taskexecutors=args.taskexecutors, slots=args.slots,
                      options=args.cluster_options) as cluster:
        if not args.no_verify:
            print(f"correctness guard on {VERIFY_WORDS:,} words:", flush=True)
            verified = verify(cluster, verify_roots, config, forms, bytewax)
        for k in keys:  # warm the page cache; check the ceiling
            ceiling_run(roots[k], words=args.words)
        for form in forms:  # warm-up, and the fixed cost of a (nearly) empty job
            for _ in range(3):
                empty[form].append(time_form(cluster, form, empty_roots[FORMS[form].keys],
                                             config, bytewax).wall_s)
        for run in range(1, args.runs + 1):
            for k in keys:
                for _ in range(CEILING_REPEATS):
                    ceiling[k].append(ceiling_run(roots[k]))
                    ceiling_1t[k].append(ceiling_run(roots[k], use_threads=False)[0])
            for form in forms if run % 2 else reversed(forms):
                timing = time_form(cluster, form, roots[FORMS[form].keys], config, bytewax)
                times[form].append(timing)
                print(f"  run {run}/{args.runs}: {form:27} {timing.wall_s:7.2f} s "
                      f"({rate(args.words / timing.wall_s)} records/s; used "
                      f"{timing.cpu_s:.1f} CPU-s)", flush=True)
            for k in keys:
                best = min(wall for wall, _ in ceiling[k][-CEILING_REPEATS:])
                print(f"  run {run}/{args.runs}: {'ceiling ' + k:27} {best:7.2f} s "
                      f"({rate(args.words / best)} words/s, best of {CEILING_REPEATS})",
                      flush=True)
        if args.profile:
            pids = cluster.taskexecutor_pids()
            for form in forms:
                if FORMS[form].pipeline is None:
                    continue
                label = f"wordcount-{form}-{args.words}" + ("-gil" if args.profile_gil else "")
                with Profiler(pids, PROFILE_DIR, label, gil_only=args.profile_gil) as profiler:
                    job = run_form(cluster, form, roots[FORMS[form].keys], config)
                summary = summarise_profile(profiler.outputs, rate_hz=profiler.rate_hz)
                summary["wall_s"] = round(job.wall_s, 3)
                summary["mode"] = "gil" if args.profile_gil else "threads"
                summary["raw_files"] = [str(p) for p in profiler.outputs]
                profiles[form] = summary
                print_profile(form, summary)

    result = report(args, forms, keys, times, empty, ceiling, ceiling_1t, scaling_ceilings)
    result["verified"] = {"words": VERIFY_WORDS, "seconds": verified} if verified else False
    result["profiles"] = profiles
    result["machine"] = info
    result["engine"] = revision
    result["total_benchmark_s"] = time.perf_counter() - begun
    write_json(args.output, result)
    print(f"results written to {args.output} (total {result['total_benchmark_s']:.0f} s)")
    return 0


def report(args: argparse.Namespace, forms: list[str], keys: list[str],
           times: dict[str, list[Timing]], empty: dict[str, list[float]],
           ceiling: dict[str, list[tuple[float, float]]],
           ceiling_1t: dict[str, list[float]],
           scaling_ceilings: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Print the two tables; the results as a JSON-able dict."""
    words = args.words
    result: dict[str, Any] = {
        "benchmark": "wordcount",
        "quick": args.quick,
        "words": words,
        "vocabulary": VOCABULARY,
        "key_distributions": {"zipf": f"P(rank k) ~ 1/k^{ZIPF_EXPONENT}",
                              "uniform": "uniform over the vocabulary"},
        "zipf_exponent": ZIPF_EXPONENT,
        "words_per_line": WORDS_PER_LINE,
        "files": FILES,
        "parallelism": PARALLELISM,
        "cluster": {"taskexecutors": args.taskexecutors, "slots_per_taskexecutor": args.slots},
        "bytewax": {"requirements": list(BYTEWAX_REQUIREMENTS),
                    "processes": BYTEWAX_PROCESSES, "workers_per_process": 1,
                    "timed": "process start to exit of both processes"},
        "batch_size": args.batch_size or "engine default",
        "cluster_options": args.cluster_options,
        "runs": args.runs,
        "forms": forms,
    }
    ceiling_rate: dict[str, float] = {}
    ceiling_rows = []
    for k in keys:
        prefix = "ceiling" if k == "zipf" else f"ceiling_{k}"
        walls = [wall for wall, _ in ceiling[k]]
        seconds = median(walls)
        ceiling_rate[k] = words / seconds
        unthreaded = median(ceiling_1t[k])
        result[f"{prefix}_records_per_s"] = ceiling_rate[k]
        result[f"{prefix}_median_s"] = seconds
        result[f"{prefix}_run_s"] = walls
        result[f"{prefix}_best_s"] = min(walls)
        result[f"{prefix}_cpu_ns_per_record"] = median([c for _, c in ceiling[k]]) / words * 1e9
        result[f"{prefix}_single_thread_records_per_s"] = words / unthreaded
        result[f"{prefix}_single_thread_run_s"] = ceiling_1t[k]
        ceiling_rows.append(["ceiling (1 process, pc.value_counts)", k, "", f"{seconds:.2f}",
                             rate(ceiling_rate[k]), "100.0%", "", "", "",
                             f"{result[f'{prefix}_cpu_ns_per_record']:.0f}", ""])
        ceiling_rows.append(["  same, reading without threads", k, "", f"{unthreaded:.2f}",
                             rate(words / unthreaded), f"{seconds / unthreaded:.1%}",
                             "", "", "", "", ""])
    rows = []
    for form in forms:
        spec = FORMS[form]
        runs = times[form]
        t = median([r.wall_s for r in runs])
        overhead = median(empty[form])
        net = max(t - overhead, 1e-9)
        top = ceiling_rate[spec.keys]
        cpu_ns = median([r.cpu_s for r in runs]) / words * 1e9
        placed = sorted({r.taskexecutors for r in runs}) if spec.pipeline else []
        result[f"{form}_records_per_s"] = words / t
        result[f"{form}_median_s"] = t
        result[f"{form}_run_s"] = [r.wall_s for r in runs]
        if spec.pipeline is None:  # Bytewax: its two processes
            result[f"{form}_cpu_s"] = [r.cpu_s for r in runs]
        else:
            result[f"{form}_cluster_run_s"] = [r.cluster_s for r in runs]
            result[f"{form}_cluster_cpu_s"] = [r.cpu_s for r in runs]
        result[f"{form}_cpu_ns_per_record"] = cpu_ns
        result[f"{form}_ratio_to_ceiling"] = words / t / top
        result[f"{form}_empty_job_s"] = empty[form]
        result[f"{form}_net_records_per_s"] = words / net
        result[f"{form}_net_ratio_to_ceiling"] = words / net / top
        result[f"{form}_parallelism"] = spec.parallelism
        if placed:
            result[f"{form}_taskexecutors"] = placed
        rows.append([form, spec.keys, str(spec.parallelism), f"{t:.2f}", rate(words / t),
                     f"{words / t / top:.1%}", f"{overhead:.2f}", rate(words / net),
                     f"{words / net / top:.1%}", f"{cpu_ns:.0f}",
                     ",".join(map(str, placed)) if placed else "-"])
    for key, (split, unsplit) in SPLIT_PAIRS.items():
        if {split, unsplit} <= set(forms):
            result[key] = result[f"{unsplit}_median_s"] / result[f"{split}_median_s"]
    for key, (p2, p1) in SCALING_PAIRS.items():
        if {p2, p1} <= set(forms):
            result[key] = result[f"{p1}_median_s"] / result[f"{p2}_median_s"]
            result[key.replace("scaling", "net_scaling")] = (
                result[f"{p2}_net_records_per_s"] / result[f"{p1}_net_records_per_s"])
    if {"per_record", "bytewax"} <= set(forms):
        result["per_record_vs_bytewax"] = (result["per_record_records_per_s"]
                                           / result["bytewax_records_per_s"])
        result["per_record_vs_bytewax_net"] = (result["per_record_net_records_per_s"]
                                               / result["bytewax_net_records_per_s"])
        # The same by CPU time per word: less sensitive to what else runs on the machine.
        result["per_record_vs_bytewax_cpu"] = (result["bytewax_cpu_ns_per_record"]
                                               / result["per_record_cpu_ns_per_record"])
    for kind, found in scaling_ceilings.items():
        result[f"machine_scaling_{kind}"] = found
    targets: dict[str, dict[str, Any]] = {}
    target_rows = []
    for key, (what, target) in TARGETS.items():
        value = result.get(key)
        passed = value is not None and value >= target
        targets[key] = {"what": what, "value": value, "target": target, "pass": passed}
        if value is None:
            shown, wanted = "not run", ""
        elif key.endswith("_records_per_s"):
            shown, wanted = rate(value), f">= {rate(target)}"
        elif key.endswith("ratio_to_ceiling"):
            shown, wanted = f"{value:.1%}", f">= {target:.0%}"
        else:
            shown, wanted = f"{value:.2f}x", f">= {target:.1f}x"
        target_rows.append([what, shown, wanted,
                            "-" if value is None else "pass" if passed else "FAIL"])
    result["targets"] = targets

    print()
    print(f"word count, {words:,} words ({VOCABULARY:,}-word vocabulary; zipf: s="
          f"{ZIPF_EXPONENT}, uniform), weir on {args.taskexecutors} TaskExecutor(s) x "
          f"{args.slots} slot(s), Bytewax 0.21 as {BYTEWAX_PROCESSES} processes; median of "
          f"{args.runs} run(s), {os.cpu_count()} CPUs")
    print(format_table(
        ["form", "keys", "p", "median s", "records/s", "of ceiling", "empty job s",
         "net records/s", "net of ceiling", "CPU ns/record", "TEs used"],
        rows + ceiling_rows))
    print()
    print(format_table(["target", "value", "target", ""], target_rows))
    for kind, form in (("arrow", "vectorised"), ("python", "per-record")):
        if kind in scaling_ceilings:
            print(f"{form} scaling beside the machine's: 2 processes doing the same {kind} "
                  f"word count without weir get {scaling_ceilings[kind]['scaling']:.2f}x of one")
    if "per_record_vs_bytewax_cpu" in result:
        print(f"CPU per word, Bytewax / weir per-record: {result['per_record_vs_bytewax_cpu']:.2f}x"
              f" (Bytewax's includes its processes' start-up)")
    for key, (split, _) in SPLIT_PAIRS.items():
        if key in result:
            print(f"{split} split vs unsplit: {result[key]:.2f}x")
    return result


def print_profile(form: str, summary: dict[str, Any]) -> None:
    what = "GIL-holding" if summary["mode"] == "gil" else "busy"
    print(f"\nprofile of the {form} job: {summary['samples']:,} samples of {what} threads of "
          f"both TaskExecutors (~{summary.get('busy_thread_s', 0):.1f} thread-s, plus "
          f"{summary['waiting_percent']:.0f}% of samples waiting, left out); run took "
          f"{summary['wall_s']:.1f} s")
    print(f"  task loop outside _process_input (mailbox, backpressure checks, waits that "
          f"did not sleep): {summary['task_loop_outside_input_percent']:.1f}% of samples")
    for kind in ("threads", "self", "total"):
        print(f"  top by {kind} time:")
        for row in summary[kind][:12]:
            print(f"    {row['percent']:5.1f}%  {row['function']}")


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted; the cluster was stopped", file=sys.stderr)
        sys.exit(130)

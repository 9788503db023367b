"""Word-count throughput of weir on a local cluster, against a single-process ceiling.

What is measured
----------------
Input: ``--words`` words (10,000,000; 1,000,000 with ``--quick``) drawn with a fixed seed
from a 100,000-word vocabulary with Zipf-like skew (P(rank k) ~ 1/k), written once to 4
Parquet files under ``build/bench-data/`` (reused when present) in two shapes:

* ``words/``: column ``word``, one word per row (for the vectorised form);
* ``lines/``: column ``line``, 10 words per row separated by spaces (per-record form);
* ``one-file-16/words.parquet``, ``one-file-16/lines.parquet``: the same in one file
  each, of 16 row groups (the one-file forms).

One local cluster (``weir cluster start``: a JobMaster and 2 TaskExecutors with 2 slots
each, all separate OS processes) serves the whole run; both jobs run at parallelism 2:

(a) vectorised::

        from_source(words/).map_batches(identity).key_by("word").count()
                           .sink_to(DiscardingSink())

    Arrow batches end to end: vectorised murmur3 key-group hashing in the exchange and a
    numpy running count per key (every word still gets its running count emitted, as in
    Flink, but computed per batch).

(b) per-record::

        from_source(lines/).flat_map(lambda row: [(w, 1) for w in row["line"].split()])
            .key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1]))
            .sink_to(DiscardingSink())

    One Python call per line and several per word (key selector, reduce). The benchmark
    uses named module-level functions (``split_line``, ``first``, ``add_counts``) with
    exactly these bodies.

(c) one file (``one_file``, ``per_record_one_file``): (a) and (b) over the one-file
    dataset. The file source splits the file into ranges of row groups, so both
    subtasks read it.

(d) one file, unsplit (``one_file_unsplit``, ``per_record_one_file_unsplit``): the same
    with ``FileSource(split_bytes=`` larger than the file``)``: one split, read by one
    subtask, as before files were split. (c) against (d), in the same run, is what
    splitting a large file buys (``*_split_speedup``). It matters most where the work
    is chained to the source (the per-record form's ``flat_map``).

Each job is timed end to end on the client: from building/submitting the job graph to the
JobMaster reporting FINISHED (polled every 20 ms). ``records/s = words / seconds``. The
fixed cost of a job (submission, scheduling, deployment to the TaskExecutors, teardown) is
measured with the same two pipelines over a 40-word input ("empty job"); rates net of it
are reported too (``*_net_*`` keys).

Ceiling: one Python process reads the same ``words/`` Parquet files
(``pyarrow.parquet.read_table``) and runs ``pyarrow.compute.value_counts`` on the column:
the best one process can do for "count every word" with Arrow, reading included (the
Parquet reader may use Arrow's thread pool, as it would anywhere). It is measured 3 times
per timed run, interleaved with the jobs, and the median is used (also reported: the same
with ``use_threads=False``). It only produces final counts, not a running count per
record, so it is an upper bound.

CPU: the CPU time the cluster processes (TaskExecutors and JobMaster, from /proc) used
during each job, per record, next to the ceiling's own CPU time per word: on this shared
2-core machine it separates "the engine does too much work" from "it waited".

Correctness guard: before timing, both pipelines run once with ``execute_and_collect`` on
a 100,000-word input; the last count seen per word must equal ``value_counts`` of the
input, or the benchmark stops with an error.

Runs: ``--runs`` (default 3, 2 with ``--quick``) timed runs of each form, alternating;
medians are reported. Results: a table on stdout and ``benchmarks/results/wordcount.json``
(``vectorized_records_per_s``, ``per_record_records_per_s``, ``ceiling_records_per_s``,
ratios, per-run times, machine info).

``--profile`` adds one more run of each form with py-spy sampling both TaskExecutors
(``py-spy record --format raw --threads``; raw stacks under ``build/bench-profiles/``,
not committed) and prints/stores the busiest threads and the top functions by self and
total samples (samples of threads waiting in a lock, socket or sleep are left out).
``--profile-gil`` samples only the thread holding each TaskExecutor's GIL instead: the
interpreter's time, undistorted by threads queueing for the GIL, but without work done
with the GIL released (Parquet decoding, most Arrow kernels).
``--batch-size`` sets ``pipeline.batch-size`` for the jobs and ``-D KEY=VALUE`` configures
the cluster's daemons, to try engine settings.

Usage::

    python benchmarks/bench_wordcount.py --quick          # 10-30 s
    python benchmarks/bench_wordcount.py                  # full size, 2-3 minutes
    python benchmarks/bench_wordcount.py --profile --runs 1 --batch-size 65536
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable
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
    RESULTS_DIR,
    LocalCluster,
    Profiler,
    engine_revision,
    format_table,
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
CEILING_REPEATS = 3  #: ceiling measurements per timed run (it is cheap)

DATA_DIR = BUILD_DIR / "bench-data"
CLUSTER_DIR = BUILD_DIR / "bench-cluster-wordcount"
PROFILE_DIR = BUILD_DIR / "bench-profiles"

FORMS = ("vectorized", "per_record", "one_file", "one_file_unsplit", "per_record_one_file",
         "per_record_one_file_unsplit")
#: What the speedup of splitting one file is reported for: (split form, unsplit form).
SPLIT_PAIRS = {"one_file_split_speedup": ("one_file", "one_file_unsplit"),
               "per_record_one_file_split_speedup": ("per_record_one_file",
                                                     "per_record_one_file_unsplit")}
#: Row groups per one-file dataset (as a writer with a row-group size limit leaves them).
ONE_FILE_ROW_GROUPS = 16


# -- input data -------------------------------------------------------------------------------


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


def ensure_dataset(n_words: int) -> Path:
    """The dataset of ``n_words`` words (``words/`` and ``lines/``), generated once."""
    if n_words % (WORDS_PER_LINE * FILES):
        msg = f"--words must be a multiple of {WORDS_PER_LINE * FILES}"
        raise ValueError(msg)
    root = DATA_DIR / f"wordcount-{n_words}-v{VOCABULARY}-zipf{ZIPF_EXPONENT}-seed{SEED}"
    if (root / "_COMPLETE").exists():
        return root
    started = time.perf_counter()
    print(f"generating {n_words:,} words under {root} ...", flush=True)
    vocab = pa.array(vocabulary(VOCABULARY, SEED), pa.string())
    # Frequency rank -> word, shuffled so that frequent words are not the short ones.
    word_of_rank = np.random.default_rng(SEED + 1).permutation(VOCABULARY)
    p = 1.0 / np.arange(1, VOCABULARY + 1, dtype=np.float64) ** ZIPF_EXPONENT
    p /= p.sum()
    ranks = np.random.default_rng(SEED + n_words).choice(VOCABULARY, size=n_words, p=p)
    words = vocab.take(pa.array(word_of_rank[ranks]))
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


def expected_counts(root: Path) -> dict[str, int]:
    counts = pc.value_counts(pq.read_table(root / "words", columns=["word"])["word"])
    return dict(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist(),
                    strict=True))


# -- the two pipelines and the ceiling --------------------------------------------------------


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

#: form -> (pipeline, source of the dataset root)
PIPELINES: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Path], Any]]] = {
    "vectorized": (vectorized, files("words")),
    "per_record": (per_record, files("lines")),
    "one_file": (vectorized, single("words", split=True)),
    "one_file_unsplit": (vectorized, single("words", split=False)),
    "per_record_one_file": (per_record, single("lines", split=True)),
    "per_record_one_file_unsplit": (per_record, single("lines", split=False)),
}


def run_form(cluster: LocalCluster, form: str, root: Path, config: dict[str, Any]) -> Any:
    env = cluster.environment(config)
    env.set_parallelism(PARALLELISM)
    pipeline, source = PIPELINES[form]
    pipeline(env, source(root)).sink_to(DiscardingSink())
    pids = [*cluster.taskexecutor_pids(), cluster.jobmaster_pid()]
    return run_job(env, f"bench wordcount {form} ({root.name})", cpu_pids=pids)


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


def verify(cluster: LocalCluster, root: Path, config: dict[str, Any],
           forms: list[str]) -> dict[str, float]:
    """Run every form with a collect sink; the last count per word must be exact."""
    expected = expected_counts(root)
    took = {}
    for form in forms:
        env = cluster.environment(config)
        env.set_parallelism(PARALLELISM)
        pipeline, source = PIPELINES[form]
        stream = pipeline(env, source(root))
        started = time.perf_counter()
        last: dict[str, int] = {}
        updates = 0
        with stream.execute_and_collect(f"bench wordcount verify {form}") as results:
            for record in results:
                word, count = record[0], record[1]
                last[word] = count
                updates += 1
        took[form] = time.perf_counter() - started
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
        print(f"  {form:27} correct: {len(expected):,} distinct words, {words:,} updates "
              f"({took[form]:.1f} s)", flush=True)
    return took


# -- main -------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"{QUICK_WORDS:,} words and 2 runs (under 2 minutes)")
    parser.add_argument("--runs", type=int, help="timed runs of each form (default 3; quick 2)")
    parser.add_argument("--words", type=int,
                        help=f"input size (default {FULL_WORDS:,}; quick {QUICK_WORDS:,})")
    parser.add_argument("--batch-size", type=int,
                        help="pipeline.batch-size of the jobs (default: the engine's default)")
    parser.add_argument("-D", dest="cluster_options", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="configuration of the cluster's daemons (repeatable), e.g. "
                             "-D taskmanager.memory.segment-size=1mb")
    parser.add_argument("--forms", default=",".join(FORMS),
                        help=f"comma-separated forms to time (default: {','.join(FORMS)})")
    parser.add_argument("--no-verify", action="store_true", help="skip the correctness guard")
    parser.add_argument("--profile", action="store_true",
                        help="one extra run per form under py-spy (TaskExecutor processes)")
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
    args.forms = [f.strip() for f in args.forms.split(",") if f.strip()]
    unknown = set(args.forms) - set(FORMS)
    if unknown or args.runs < 1:
        parser.error(f"unknown form(s) {sorted(unknown)} or bad --runs")
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
    root = ensure_dataset(args.words)
    verify_root = ensure_dataset(VERIFY_WORDS)
    empty_root = ensure_dataset(EMPTY_WORDS)

    times: dict[str, list[float]] = {f: [] for f in args.forms}
    cluster_times: dict[str, list[float]] = {f: [] for f in args.forms}
    cpu_times: dict[str, list[float]] = {f: [] for f in args.forms}
    empty: dict[str, list[float]] = {f: [] for f in args.forms}
    ceiling: list[float] = []
    ceiling_cpu: list[float] = []
    ceiling_1t: list[float] = []  # the same without Arrow's thread pool for reading
    profiles: dict[str, Any] = {}
    verified: dict[str, float] = {}

    print(f"starting a local cluster (2 TaskExecutors x 2 slots) in {CLUSTER_DIR}", flush=True)
    with LocalCluster(CLUSTER_DIR, taskexecutors=2, slots=2,
                      options=args.cluster_options) as cluster:
        if not args.no_verify:
            print(f"correctness guard on {VERIFY_WORDS:,} words:", flush=True)
            verified = verify(cluster, verify_root, config, args.forms)
        ceiling_run(root, words=args.words)  # warm the page cache; check the ceiling
        for form in args.forms:  # warm-up, and the fixed cost of a (nearly) empty job
            for _ in range(3):
                empty[form].append(run_form(cluster, form, empty_root, config).wall_s)
        for run in range(1, args.runs + 1):
            for _ in range(CEILING_REPEATS):
                wall, cpu = ceiling_run(root)
                ceiling.append(wall)
                ceiling_cpu.append(cpu)
                ceiling_1t.append(ceiling_run(root, use_threads=False)[0])
            for form in args.forms:
                timing = run_form(cluster, form, root, config)
                times[form].append(timing.wall_s)
                cluster_times[form].append(timing.cluster_s)
                cpu_times[form].append(sum(timing.cpu_s.values()))
                print(f"  run {run}/{args.runs}: {form:27} {timing.wall_s:7.2f} s "
                      f"({rate(args.words / timing.wall_s)} records/s; cluster used "
                      f"{cpu_times[form][-1]:.1f} CPU-s)", flush=True)
            best = min(ceiling[-CEILING_REPEATS:])
            print(f"  run {run}/{args.runs}: {'ceiling':27} {best:7.2f} s "
                  f"({rate(args.words / best)} words/s, best of {CEILING_REPEATS})", flush=True)
        if args.profile:
            pids = cluster.taskexecutor_pids()
            for form in args.forms:
                label = f"wordcount-{form}-{args.words}" + ("-gil" if args.profile_gil else "")
                with Profiler(pids, PROFILE_DIR, label, gil_only=args.profile_gil) as profiler:
                    timing = run_form(cluster, form, root, config)
                summary = summarise_profile(profiler.outputs, rate_hz=profiler.rate_hz)
                summary["wall_s"] = round(timing.wall_s, 3)
                summary["mode"] = "gil" if args.profile_gil else "threads"
                summary["raw_files"] = [str(p) for p in profiler.outputs]
                profiles[form] = summary
                print_profile(form, summary)

    words = args.words
    ceiling_s = median(ceiling)
    ceiling_rate = words / ceiling_s
    result: dict[str, Any] = {
        "benchmark": "wordcount",
        "quick": args.quick,
        "words": words,
        "vocabulary": VOCABULARY,
        "zipf_exponent": ZIPF_EXPONENT,
        "words_per_line": WORDS_PER_LINE,
        "files": FILES,
        "parallelism": PARALLELISM,
        "cluster": {"taskexecutors": 2, "slots_per_taskexecutor": 2},
        "batch_size": args.batch_size or "engine default",
        "cluster_options": args.cluster_options,
        "runs": args.runs,
        "ceiling_records_per_s": ceiling_rate,
        "ceiling_median_s": ceiling_s,
        "ceiling_run_s": ceiling,
        "ceiling_best_s": min(ceiling),
        "ceiling_cpu_ns_per_record": median(ceiling_cpu) / words * 1e9,
        "ceiling_single_thread_records_per_s": words / median(ceiling_1t),
        "ceiling_single_thread_run_s": ceiling_1t,
        "targets": {"vectorized_ratio_to_ceiling": 0.25, "per_record_records_per_s": 100_000},
    }
    rows = []
    for form in args.forms:
        t = median(times[form])
        overhead = median(empty[form])
        net = max(t - overhead, 1e-9)
        result[f"{form}_records_per_s"] = words / t
        result[f"{form}_median_s"] = t
        result[f"{form}_run_s"] = times[form]
        result[f"{form}_cluster_run_s"] = cluster_times[form]
        result[f"{form}_cluster_cpu_s"] = cpu_times[form]
        result[f"{form}_cpu_ns_per_record"] = median(cpu_times[form]) / words * 1e9
        result[f"{form}_ratio_to_ceiling"] = words / t / ceiling_rate
        result[f"{form}_empty_job_s"] = empty[form]
        result[f"{form}_net_records_per_s"] = words / net
        result[f"{form}_net_ratio_to_ceiling"] = words / net / ceiling_rate
        rows.append([form, f"{t:.2f}", rate(words / t), f"{words / t / ceiling_rate:.1%}",
                     f"{overhead:.2f}", rate(words / net), f"{words / net / ceiling_rate:.1%}",
                     f"{result[f'{form}_cpu_ns_per_record']:.0f}"])
    rows.append(["ceiling (1 process, pc.value_counts)", f"{ceiling_s:.2f}", rate(ceiling_rate),
                 "100.0%", "", "", "", f"{result['ceiling_cpu_ns_per_record']:.0f}"])
    single = median(ceiling_1t)
    rows.append(["  same, reading without threads", f"{single:.2f}", rate(words / single),
                 f"{ceiling_s / single:.1%}", "", "", "", ""])
    for key, (split, unsplit) in SPLIT_PAIRS.items():
        if {split, unsplit} <= set(args.forms):
            result[key] = median(times[unsplit]) / median(times[split])
    result["verified"] = {"words": VERIFY_WORDS, "seconds": verified} if verified else False
    result["profiles"] = profiles
    result["machine"] = info
    result["engine"] = revision
    result["total_benchmark_s"] = time.perf_counter() - begun
    write_json(args.output, result)

    print()
    print(f"word count, {words:,} words ({VOCABULARY:,}-word vocabulary, Zipf s="
          f"{ZIPF_EXPONENT}), parallelism {PARALLELISM} on 2 TaskExecutors x 2 slots, "
          f"median of {args.runs} run(s), {info['cpu_count']} CPUs")
    print(format_table(
        ["form", "median s", "records/s", "of ceiling", "empty job s", "net records/s",
         "net of ceiling", "CPU ns/record"], rows))
    checks = []
    if "vectorized" in args.forms:
        ok = result["vectorized_ratio_to_ceiling"] >= 0.25
        checks.append(f"vectorised >= 25% of ceiling: {'yes' if ok else 'NO'}")
    if "per_record" in args.forms:
        ok = result["per_record_records_per_s"] >= 100_000
        checks.append(f"per-record >= 100k records/s: {'yes' if ok else 'NO'}")
    for key, (split, _) in SPLIT_PAIRS.items():
        if key in result:
            checks.append(f"{split} split vs unsplit: {result[key]:.2f}x")
    print("targets: " + "; ".join(checks))
    print(f"results written to {args.output} (total {result['total_benchmark_s']:.0f} s)")
    return 0


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

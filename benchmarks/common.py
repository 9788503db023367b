"""Shared helpers of the benchmarks: a local cluster, job timing, tables, JSON, py-spy.

* :class:`LocalCluster` (:mod:`weir.testing.cluster`, shared with the tests) starts a real
  local cluster (``weir cluster start``: one JobMaster and N TaskExecutor OS processes)
  under a directory and always stops it again, also on Ctrl-C or SIGTERM, when used as a
  context manager; :func:`poll` waits for a condition with a deadline.
* :func:`run_job` submits whatever was built on an environment and times it from
  submission to FINISHED.
* :class:`Profiler` samples the TaskExecutor processes with py-spy while a job runs and
  :func:`summarise_profile` turns py-spy's raw (collapsed-stack) output into the top
  functions by self and total time.
* :func:`ensure_venv` makes a virtualenv with other systems' packages (e.g. Bytewax) on first
  use, or says in one line why it cannot.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Re-exported: the benchmarks take the local cluster from here.
from weir.testing.cluster import LocalCluster as LocalCluster
from weir.testing.cluster import poll as poll
from weir.testing.cluster import weir_cli as weir_cli

REPO_ROOT = Path(__file__).resolve().parent.parent
BUILD_DIR = REPO_ROOT / "build"
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"

# -- timing jobs ------------------------------------------------------------------------------


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads) so far; 0 if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class JobTiming:
    job_id: str
    wall_s: float  #: client side: from building/submitting the graph to seeing FINISHED
    cluster_s: float  #: the JobMaster's own start..end time of the job
    cpu_s: dict[int, float]  #: CPU seconds each watched process used meanwhile
    details: Any = None  #: the JobMaster's final JobDetails (vertices, subtasks, metrics)


def run_job(env: Any, name: str, poll_interval: float = 0.02,
            cpu_pids: Sequence[int] = ()) -> JobTiming:
    """Submit what was built on ``env``, wait for FINISHED (raises otherwise), time it.

    ``cpu_pids``: processes (e.g. the TaskExecutors) whose CPU time during the job is
    reported in ``JobTiming.cpu_s``.
    """
    cpu_before = {pid: process_cpu_seconds(pid) for pid in cpu_pids}
    started = time.perf_counter()
    job = env.execute_async(name)
    try:
        details = job.wait(timeout=3600, poll_interval=poll_interval)
    except BaseException:
        with contextlib.suppress(Exception):
            job.close()  # cancels the job if it still runs (e.g. on Ctrl-C)
        raise
    wall = time.perf_counter() - started
    summary = details.summary
    cluster = (summary.end_time_ms - summary.start_time_ms) / 1000 if summary.end_time_ms else 0.0
    job.client.close()
    cpu = {pid: round(process_cpu_seconds(pid) - before, 3) for pid, before in cpu_before.items()}
    return JobTiming(job.job_id, wall, cluster, cpu, details)


def rss_bytes(pid: int) -> int | None:
    """Resident set size of a process (VmRSS in /proc/PID/status); None if it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024  # reported in kB
    return None


@dataclass
class MetricSample:
    name: str
    labels: dict[str, str]
    value: float


def scrape_metrics(url: str, prefix: str = "", timeout: float = 5.0) -> list[MetricSample]:
    """The samples of a Prometheus ``/metrics`` endpoint whose name starts with ``prefix``."""
    from urllib.request import urlopen

    from prometheus_client.parser import text_string_to_metric_families

    with urlopen(url, timeout=timeout) as response:  # a local daemon's URL
        text = response.read().decode()
    return [MetricSample(s.name, dict(s.labels), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples if s.name.startswith(prefix)]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


# -- reporting --------------------------------------------------------------------------------


def machine_info() -> dict[str, Any]:
    import numpy
    import pyarrow

    info: dict[str, Any] = {
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else None,
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "pyarrow": pyarrow.__version__,
        "numpy": numpy.__version__,
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                info["memory_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    with contextlib.suppress(OSError):
        info["loadavg_at_start"] = [round(x, 2) for x in os.getloadavg()]
    return info


def engine_revision() -> dict[str, Any]:
    """The checked-out commit and whether the working tree differs from it (read-only git)."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                                  cwd=REPO_ROOT, check=False).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no")
               .splitlines()]
    return {"commit": git("rev-parse", "HEAD"), "modified_files": changed}


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)


def print_targets(targets: dict[str, dict[str, Any]]) -> None:
    """One line per target: its value, the target and pass/FAIL."""
    for name, target in targets.items():
        print(f"target {name}: {target['value']} (target {target['target']}): "
              f"{'pass' if target['pass'] else 'FAIL'}")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table; the first column is left-aligned, the others right-aligned."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(row, widths, strict=True)))

    out = [line(cells[0]), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells[1:])
    return "\n".join(out)


def rate(value: float) -> str:
    """12_345_678 -> '12.35 M', 123_456 -> '123.5 k'."""
    if value != value:  # nan
        return "n/a"
    if value >= 1e6:
        return f"{value / 1e6:.2f} M"
    if value >= 1e3:
        return f"{value / 1e3:.1f} k"
    return f"{value:.0f}"


# -- profiling with py-spy --------------------------------------------------------------------


def py_spy() -> str | None:
    """The py-spy executable (next to this interpreter, else on PATH), if installed."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


class Profiler:
    """``py-spy record --format raw --threads`` on some processes for a ``with`` block.

    Only threads that are busy (not idle in a wait) are sampled, ``rate_hz`` times a second.
    """

    def __init__(self, pids: Sequence[int], out_dir: Path, label: str, rate_hz: int = 100,
                 gil_only: bool = False) -> None:
        exe = py_spy()
        if exe is None:
            msg = "py-spy is not installed: pip install py-spy"
            raise RuntimeError(msg)
        self.exe = exe
        self.pids = list(pids)
        self.out_dir = out_dir
        self.label = label
        self.rate_hz = rate_hz
        self.gil_only = gil_only
        self.outputs: list[Path] = []
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Profiler:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for pid in self.pids:
            out = self.out_dir / f"{self.label}-pid{pid}.txt"
            out.unlink(missing_ok=True)
            self.outputs.append(out)
            args = [self.exe, "record", "--pid", str(pid), "--format", "raw", "-o", str(out),
                    "--rate", str(self.rate_hz), "--nonblocking", "--threads"]
            if self.gil_only:
                args.append("--gil")
            self._procs.append(subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.PIPE))
        time.sleep(0.5)  # let py-spy attach before the job starts
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        for proc in self._procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _frame_name(frame: str) -> str:
    """py-spy raw frame 'fn (/abs/path/file.py:123)' -> 'fn (file.py:123)', repo-relative."""
    frame = frame.strip()
    if " (" not in frame:
        return frame
    fn, _, location = frame.partition(" (")
    location = location.rstrip(")")
    location = location.replace(str(REPO_ROOT) + "/", "")
    site = location.find("site-packages/")
    if site >= 0:
        location = location[site + len("site-packages/"):]
    elif "/lib/python3" in location:
        location = location[location.index("/lib/python3") + len("/lib/"):]
    return f"{fn} ({location})"


def _without_line(frame: str) -> tuple[str, str]:
    """'fn (file.py:123)' -> ('fn (file.py)', '123')."""
    head, sep, line = frame.rpartition(":")
    if not sep or not line.endswith(")") or not line[:-1].isdigit():
        return frame, ""
    return f"{head})", line[:-1]


def load_raw_profiles(paths: Sequence[Path]) -> list[tuple[str, list[str], int]]:
    """(thread name, frames outermost first, samples) from py-spy ``--threads`` raw files."""
    stacks: list[tuple[str, list[str], int]] = []
    for path in paths:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            frames = stack.split(";")
            thread = ""
            if frames[0].startswith("thread ("):
                head = frames.pop(0)  # a sample may hold the thread and no frame
                thread = head.partition("): ")[2] or head
            stacks.append((thread, [_frame_name(f) for f in frames], int(count)))
    return stacks


#: Leaf frames of threads that wait rather than work. py-spy's idle detection is a
#: heuristic (it samples the OS thread state), so such samples still show up; they are
#: reported as ``waiting_percent`` and left out of the tables.
WAITING_LEAVES = ("Condition.wait (", "Event.wait (", "socket.accept (", "select (",
                  "channel_spin (", "_serve (grpc", "sleep (", "recv_exact (", "Queue.get (")


def summarise_profile(paths: Sequence[Path], top: int = 15, rate_hz: int | None = None,
                      waiting: Sequence[str] = WAITING_LEAVES) -> dict[str, Any]:
    """Top functions by self and by total (inclusive) samples, over all busy threads.

    Functions are aggregated over their lines; the line given is the one with the most
    samples. ``threads`` is the share of samples per thread name (task threads are named
    ``task <vertex> (i/n)``), i.e. where the CPU of the TaskExecutors went. Percentages
    are of the samples that were not waiting (innermost frame in ``waiting``, by default
    ``WAITING_LEAVES``).
    """
    stacks = load_raw_profiles(paths)
    everything = sum(c for _, _, c in stacks)
    stacks = [(t, f, c) for t, f, c in stacks if not (f and any(w in f[-1] for w in waiting))]
    total = sum(c for _, _, c in stacks)
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    lines: dict[str, Counter[str]] = {}
    per_thread: Counter[str] = Counter()
    for thread, frames, count in stacks:
        per_thread[thread or "?"] += count
        if not frames:
            continue
        name, line = _without_line(frames[-1])
        own[name] += count
        lines.setdefault(name, Counter())[line] += count
        for frame in {_without_line(f)[0] for f in frames}:
            inclusive[frame] += count

    def label(name: str) -> str:
        line = lines.get(name, Counter()).most_common(1)
        return f"{name[:-1]}:{line[0][0]})" if line and line[0][0] else name

    def rows(counter: Counter[str], with_line: bool) -> list[dict[str, Any]]:
        if not total:
            return []
        return [{"function": label(name) if with_line else name, "samples": n,
                 "percent": round(100 * n / total, 1)} for name, n in counter.most_common(top)]

    # The task thread's own loop (mailbox, flush timer, backpressure checks and waits)
    # as opposed to processing input: Task._loop on the stack without Task._process_input.
    loop = sum(c for _, f, c in stacks if any(x.startswith("Task._loop ") for x in f)
               and not any(x.startswith("Task._process_input ") for x in f))
    waiting = round(100 * (everything - total) / everything, 1) if everything else 0.0
    summary: dict[str, Any] = {"samples": total, "waiting_percent": waiting,
                               "task_loop_outside_input_percent":
                                   round(100 * loop / total, 1) if total else 0.0,
                               "self": rows(own, True),
                               "total": rows(inclusive, False),
                               "threads": rows(per_thread, False)}
    if rate_hz:
        summary["busy_thread_s"] = round(total / rate_hz, 2)
    return summary


_source_lines: dict[str, list[str]] = {}


def frame_source(frame: str) -> str:
    """The source line a frame ('fn (file.py:123)', as loaded) executes, for repo files only."""
    location = frame.rpartition(" (")[2].rstrip(")")
    path, _, line = location.rpartition(":")
    if not path or not line.isdigit() or path.startswith("/"):
        return ""
    if path not in _source_lines:
        try:
            _source_lines[path] = (REPO_ROOT / path).read_text().splitlines()
        except (OSError, UnicodeDecodeError, ValueError):  # ValueError: a NUL in the name
            _source_lines[path] = []
    lines = _source_lines[path]
    index = int(line) - 1
    return lines[index].strip() if 0 <= index < len(lines) else ""


def categorise_profile(paths: Sequence[Path], categories: Sequence[tuple[str, Sequence[str]]],
                       thread_groups: Sequence[tuple[str, Sequence[str]]] = (),
                       waiting: Sequence[str] = WAITING_LEAVES) -> dict[str, Any]:
    """Busy samples by thread group and, within each group, by category of work.

    A sample's category is the first of ``categories`` (label, substrings) that matches,
    looking at the frames from the innermost one outwards, so the most specific work wins
    (a socket write inside serialisation code counts as a socket write). A frame matches
    when a substring occurs in its name ('fn (file.py:123)') or, for files of this
    repository, in the source line it executes (read from the working tree when this runs,
    so call it right after profiling). Samples that match nothing count as ``other``. A
    thread belongs to the first of ``thread_groups`` (label, substrings of the thread
    name) that matches, else to ``other threads``. Samples whose innermost frame is one of
    ``waiting`` are left out (by default ``WAITING_LEAVES``, as in
    :func:`summarise_profile`). Percentages are of all busy samples of all groups.
    """
    stacks = load_raw_profiles(paths)
    stacks = [(t, f, c) for t, f, c in stacks if not (f and any(w in f[-1] for w in waiting))]
    total = sum(c for _, _, c in stacks)
    by_group: dict[str, Counter[str]] = {}
    for thread, frames, count in stacks:
        group = next((label for label, needles in thread_groups
                      if any(n in thread for n in needles)), "other threads")
        category = "other"
        for frame in reversed(frames):
            haystack = f"{frame} {frame_source(frame)}"
            match = next((label for label, needles in categories
                          if any(n in haystack for n in needles)), None)
            if match is not None:
                category = match
                break
        by_group.setdefault(group, Counter())[category] += count
    groups = []
    for group, counter in sorted(by_group.items(), key=lambda kv: -sum(kv[1].values())):
        samples = sum(counter.values())
        groups.append({
            "group": group, "samples": samples,
            "percent": round(100 * samples / total, 1) if total else 0.0,
            "categories": [{"category": c, "samples": n,
                            "percent": round(100 * n / total, 1) if total else 0.0,
                            "percent_of_group": round(100 * n / samples, 1)}
                           for c, n in counter.most_common()]})
    overall: Counter[str] = Counter()
    for counter in by_group.values():
        overall.update(counter)
    return {"samples": total, "groups": groups,
            "categories": [{"category": c, "samples": n,
                            "percent": round(100 * n / total, 1) if total else 0.0}
                           for c, n in overall.most_common()]}


# -- CPU time per thread ----------------------------------------------------------------------


def _cpu_fields(stat_path: Path) -> tuple[float, float] | None:
    """(user, system) CPU seconds from a /proc/.../stat file; None if it is gone."""
    try:
        stat = stat_path.read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    ticks = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / ticks, int(fields[12]) / ticks


def process_cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process (all its threads) so far; zeros if gone."""
    return _cpu_fields(Path(f"/proc/{pid}/stat")) or (0.0, 0.0)


class ThreadCpuSampler:
    """CPU time of every thread of some processes during a ``with`` block.

    A background thread reads ``/proc/PID/task/TID/stat`` every ``interval`` seconds and
    keeps the last values seen, so threads that end inside the block (task threads) are
    counted up to their last sample. Threads that exist at the start count from there;
    threads started later count from zero. ``result`` maps (pid, tid) to (user, system)
    seconds. Thread names: see :func:`profile_thread_names` (py-spy knows them, /proc
    does not: Python does not name OS threads).
    """

    def __init__(self, pids: Sequence[int], interval: float = 0.1) -> None:
        import threading

        self.pids = list(pids)
        self.interval = interval
        self._first: dict[tuple[int, int], tuple[float, float]] = {}
        self._last: dict[tuple[int, int], tuple[float, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="thread-cpu-sampler",
                                        daemon=True)
        self.result: dict[tuple[int, int], tuple[float, float]] = {}

    def _sample(self, initial: bool) -> None:
        for pid in self.pids:
            with contextlib.suppress(OSError):
                for task in Path(f"/proc/{pid}/task").iterdir():
                    values = _cpu_fields(task / "stat")
                    if values is None:
                        continue
                    key = (pid, int(task.name))
                    if key not in self._first:
                        self._first[key] = values if initial else (0.0, 0.0)
                    self._last[key] = values

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample(initial=False)

    def __enter__(self) -> ThreadCpuSampler:
        self._sample(initial=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(initial=False)
        self.result = {key: (round(last[0] - self._first[key][0], 3),
                             round(last[1] - self._first[key][1], 3))
                       for key, last in self._last.items()}


def profile_thread_names(path: Path) -> dict[int, str]:
    """Native thread id -> Python thread name, from a py-spy ``--threads`` raw file."""
    names: dict[int, str] = {}
    if not path.exists():
        return names
    for line in path.read_text().splitlines():
        if line.startswith("thread ("):
            tid, _, rest = line[len("thread ("):].partition("): ")
            if tid.isdigit():
                names[int(tid)] = rest.split(";", 1)[0]
    return names


# -- other systems, in virtualenvs of their own -----------------------------------------------


def ensure_venv(directory: Path, requirements: Sequence[str],
                timeout: float = 900) -> tuple[Path | None, str]:
    """A virtualenv at ``directory`` with ``requirements`` pip-installed, made on first use.

    Returns (its python, "") or, when it cannot be made (no network, no wheel for this
    Python, ...), (None, one line saying why). A virtualenv is reused when its marker file
    lists the same requirements; a failed attempt is removed, so the next run tries again.
    """
    python = directory / "bin" / "python"
    marker = directory / ".requirements"
    wanted = "\n".join(requirements) + "\n"
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python, ""
    shutil.rmtree(directory, ignore_errors=True)
    directory.parent.mkdir(parents=True, exist_ok=True)
    # The base interpreter, not this virtualenv's: the new one must not see its packages.
    base = getattr(sys, "_base_executable", sys.executable)
    steps = [[base, "-m", "venv", str(directory)],
             [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
              *requirements]]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            shutil.rmtree(directory, ignore_errors=True)
            return None, f"{' '.join(step[:3])} failed: {exc}"
        if done.returncode:
            shutil.rmtree(directory, ignore_errors=True)
            errors = [line.strip() for line in (done.stderr or done.stdout).splitlines()
                      if line.strip() and not line.startswith("WARNING")]
            reason = errors[-1] if errors else f"exit code {done.returncode}"
            return None, f"{' '.join(step[:3])} failed: {reason}"
    marker.write_text(wanted)
    return python, ""


#: One virtualenv of Bytewax for every benchmark that runs it beside weir.
BYTEWAX_REQUIREMENTS = ("bytewax==0.21.1", "numpy", "pyarrow")


def ensure_bytewax() -> Path | None:
    """The Bytewax virtualenv's python (``build/venv-bytewax``, installed on first use), or
    None after one line saying why it could not be installed."""
    directory = BUILD_DIR / "venv-bytewax"
    if not (directory / ".requirements").exists():
        print(f"installing {' '.join(BYTEWAX_REQUIREMENTS)} into {directory} (once) ...",
              flush=True)
    python, why = ensure_venv(directory, BYTEWAX_REQUIREMENTS)
    if python is None:
        print(f"bytewax: skipped, it could not be installed ({why}); rerun with network "
              f"access to PyPI, or leave it out", flush=True)
    return python


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a process to listen on)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children_cpu_seconds() -> float:
    """User + system CPU time of this process's children that have been waited for."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime

"""Every benchmark script imports and parses its arguments, so a broken import fails CI
(the benchmarks themselves run with ``make bench``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
SCRIPTS = sorted(BENCHMARKS.glob("bench_*.py"))


def test_benchmarks_are_found() -> None:
    assert {p.name for p in SCRIPTS} >= {"bench_wordcount.py", "bench_shuffle.py",
                                          "bench_state.py"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_benchmark_parses_quick_help(script: Path, tmp_path: Path) -> None:
    # Run from another directory, as `make bench` runs them from the repository root:
    # the script's own folder comes first on sys.path either way.
    result = subprocess.run([sys.executable, str(script), "--quick", "--help"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--quick" in result.stdout

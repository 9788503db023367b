"""``env.add_python_file``: a job's functions import a module of the user's that no
TaskExecutor has installed (in a directory on no one's path), as PyFlink ships Python
files with a job; checked on a real cluster and in process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import REPO, write_job

TOOLS = '''
from weir.datastream.functions import FlatMapFunction

SUFFIX = "!"


class Tokenizer(FlatMapFunction):
    def flat_map(self, value):
        yield from value.split()


def shout(word):
    return word.upper() + SUFFIX
'''

JOB = '''
import sys

from weir.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.add_python_file(sys.argv[1])
import text_tools  # shipped with the job: no TaskExecutor has it

env.set_parallelism(2)
words = (env.from_collection(["to be", "or not"]).rebalance()
         .flat_map(text_tools.Tokenizer()).map(text_tools.shout))
with words.execute_and_collect() as got:
    print(sorted(got))
'''

EXPECTED = str(sorted(["TO!", "BE!", "OR!", "NOT!"]))


def _files(tmp_path: Path) -> tuple[Path, Path]:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "text_tools.py").write_text(TOOLS)
    return write_job(tmp_path, JOB), lib


def test_a_shipped_module_is_used_on_a_cluster(shared_cluster: Any, tmp_path: Path) -> None:
    job, lib = _files(tmp_path)
    result = shared_cluster.weir("run", str(job), str(lib))
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == EXPECTED


def test_a_shipped_file_is_used_in_process(tmp_path: Path) -> None:
    job, lib = _files(tmp_path)
    result = subprocess.run([sys.executable, str(job), str(lib / "text_tools.py")],
                            capture_output=True, text=True, timeout=120, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == EXPECTED


def test_what_cannot_be_shipped_is_named(tmp_path: Path) -> None:
    from weir import InvalidJobError, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment()
    with pytest.raises(InvalidJobError, match="does not exist"):
        env.add_python_file(str(tmp_path / "missing.py"))
    archive = tmp_path / "deps.zip"
    archive.write_bytes(b"PK")
    with pytest.raises(InvalidJobError, match="not archives or wheels"):
        env.add_python_file(str(archive))
    (tmp_path / "json.py").write_text("")
    with pytest.raises(InvalidJobError, match=r"module name 'json'.* is taken"):
        env.add_python_file(str(tmp_path / "json.py"))

"""The README and the generated wire contracts stay in step with the code."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from weir import docgen

REPO = Path(__file__).resolve().parents[2]


def test_readme_configuration_reference_is_current():
    readme = (REPO / "README.md").read_text()
    assert docgen.render(readme) == readme, "README is stale: run `make docs`"


def test_generated_proto_modules_are_current(tmp_path: Path):
    pytest.importorskip("grpc_tools")
    # Compiled as weir/proto/*.proto, as `make proto` does: modules import weir.proto.*.
    out = tmp_path / "weir" / "proto"
    out.mkdir(parents=True)
    protos = sorted((REPO / "proto").glob("*.proto"))
    for proto in protos:
        (out / proto.name).write_text(proto.read_text())
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.",
                    "--pyi_out=.", "--grpc_python_out=.",
                    *(f"weir/proto/{p.name}" for p in protos)], cwd=tmp_path, check=True)
    for generated in sorted(out.glob("*_pb2*.py*")):
        committed = REPO / "proto" / generated.name
        assert committed.exists(), f"{generated.name} is not committed: run `make proto`"
        assert committed.read_text() == generated.read_text(), \
            f"{generated.name} is stale: run `make proto`"


def test_readme_job_example_runs_and_prints_what_it_says():
    readme = (REPO / "README.md").read_text()
    block = re.search(r"## A job\n\n```python\n(.*?)```", readme, re.S)
    assert block is not None
    code = block.group(1)
    expected = re.search(r"# (\[.*\])", code).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "__readme__"})
    assert out.getvalue().strip() == expected


def test_every_public_name_resolves_and_any_module_imports_first():
    import subprocess
    import sys

    import weir

    assert all(getattr(weir, name) is not None for name in weir.__all__)
    # Each package's modules must import on their own, in a fresh interpreter: the
    # packages depend on each other, and an import cycle only shows from some entry points.
    modules = ["weir.state.descriptors", "weir.state.backend", "weir.state.timers",
               "weir.state.operator_state", "weir.checkpoint.storage", "weir.taskexecutor.task",
               "weir.jobmaster.daemon", "weir.window"]
    code = "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]"
    for module in modules:
        result = subprocess.run([sys.executable, "-c", code, module], cwd=REPO,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"import {module} first: {result.stderr[-500:]}"

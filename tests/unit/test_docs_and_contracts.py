"""The README, the docs and the generated wire contracts stay in step with the code."""

from __future__ import annotations

import contextlib
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from weir import docgen

REPO = Path(__file__).resolve().parents[2]


DOCS = REPO / "docs"


def test_generated_doc_tables_are_current():
    assert docgen.stale() == [], "generated tables are stale: run `make docs`"


def test_a_table_edited_by_hand_is_stale_until_regenerated(tmp_path: Path):
    for table in docgen.TABLES:
        page = tmp_path / table.page
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text((REPO / table.page).read_text())
    page = tmp_path / "docs" / "operations" / "metrics.md"
    page.write_text(page.read_text().replace("| `weir_task_numRecordsIn` | gauge |",
                                             "| `weir_task_numRecordsIn` | counter |"))
    assert docgen.stale(tmp_path) == ["docs/operations/metrics.md"]
    for path, (_, fresh) in docgen.regenerated(tmp_path).items():
        path.write_text(fresh)
    assert docgen.stale(tmp_path) == []


def test_every_daemon_metric_is_in_the_reference():
    from weir.core.metric_names import BY_DAEMON

    page = (DOCS / "operations" / "metrics.md").read_text()
    names = [spec.name for _, specs in BY_DAEMON for spec in specs]
    assert len(names) == len(set(names))
    assert [name for name in names if f"`{name}`" not in page] == []


def test_pyflink_names_reference_lists_refusals_with_their_reason():
    rows = docgen.pyflink_name_rows()
    assert ("weir.datastream.connectors.kafka", "*", docgen.REFUSED) in {r[:3] for r in rows}
    assert all(note for _, _, status, note in rows if status == docgen.REFUSED)
    assert ("weir.datastream.functions", "MapFunction", docgen.AVAILABLE, "") in rows


def test_readme_is_a_short_front_door_whose_links_resolve():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    assert readme.index("make demo") < readme.index("make test") < readme.index("## A job")
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert any(t.startswith("docs/") for t in targets)
    assert [t for t in targets if "://" not in t and not (REPO / t).exists()] == []


def _markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]


def test_no_table_cell_is_a_paragraph():
    long_cells = []
    for path in _markdown_files():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("|"):
                long_cells.extend(f"{path.relative_to(REPO)}:{number}" for cell in
                                  line.strip("|").split(" | ") if len(cell) > 200)
    assert long_cells == []


def test_docs_import_installed_names():
    # As test_layout checks for code: `weir.state`, never `state`, in examples too.
    bare = re.compile(r"^\s*(?:from|import) (proto|state|checkpoint|shuffle|jobmaster|"
                      r"taskexecutor)\b", re.M)
    assert [f"{p.name}: {m.group(0)}" for p in _markdown_files()
            for m in bare.finditer(p.read_text())] == []


def test_docs_site_builds_strictly(tmp_path: Path):
    pytest.importorskip("mkdocs")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stderr[-3000:]


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
               "weir.jobmaster.daemon", "weir.datastream.window"]
    code = "import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]"
    for module in modules:
        result = subprocess.run([sys.executable, "-c", code, module], cwd=REPO,
                                capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, f"import {module} first: {result.stderr[-500:]}"

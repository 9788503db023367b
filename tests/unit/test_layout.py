"""The package layout: one installed namespace, and imports that only point down the floors.

Floors, bottom up (README, "Architecture"):

0. ``weir.proto``: the wire contracts.
1. ``weir.core``: configuration, errors, ids, records, RPC/metrics/file helpers, the
   source and executor contracts.
2. ``weir.shuffle``, then ``weir.checkpoint`` (barriers travel as shuffle events), then
   ``weir.state`` (snapshots go to checkpoint storage).
3. The daemons ``weir.jobmaster`` and ``weir.taskexecutor``; they meet only through
   ``weir.proto``.
4. The user API, operators, sources and connectors (the rest of ``weir``).
5. The client floor: ``weir.client``, ``weir.cli``, ``weir.testing`` and the package facade.

Every import counts, also one inside a function or under ``TYPE_CHECKING``: a lazy import
is still a dependency.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.support.layout import FOLDERS, REPO, engine_modules

PROTO, CORE = "weir.proto", "weir.core"
SHUFFLE, CHECKPOINT, STATE = "weir.shuffle", "weir.checkpoint", "weir.state"
JOBMASTER, TASKEXECUTOR = "weir.jobmaster", "weir.taskexecutor"
API, CLIENT = "api", "client"
RUNTIME = {PROTO, CORE, SHUFFLE, CHECKPOINT, STATE}

#: What each part may import besides itself.
ALLOWED: dict[str, set[str]] = {
    PROTO: set(),
    CORE: {PROTO},
    SHUFFLE: {PROTO, CORE},
    CHECKPOINT: {PROTO, CORE, SHUFFLE},
    STATE: {PROTO, CORE, CHECKPOINT},
    JOBMASTER: RUNTIME,
    TASKEXECUTOR: RUNTIME,
    API: RUNTIME | {JOBMASTER, TASKEXECUTOR},
    CLIENT: RUNTIME | {JOBMASTER, TASKEXECUTOR, API},
}

#: Modules of the ``weir`` folder that belong to the client floor.
CLIENT_MODULES = ("weir.client", "weir.cli", "weir.__main__", "weir.docgen", "weir.testing")


def part_of(module: str) -> str:
    """The floor part a module belongs to."""
    if module == "weir" or module.startswith(CLIENT_MODULES):
        return CLIENT
    for part in (PROTO, CORE, SHUFFLE, CHECKPOINT, STATE, JOBMASTER, TASKEXECUTOR):
        if module == part or module.startswith(part + "."):
            return part
    return API


def imports_of(source: str, module: str, is_package: bool) -> list[tuple[int, str]]:
    """Every module ``module`` imports (absolute names), with line numbers."""
    found = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            found.append((node.lineno, name))
            # ``from weir.core import options`` imports the module weir.core.options.
            found.extend((node.lineno, f"{name}.{alias.name}") for alias in node.names)
    return found


def violations(module: str, imported: str) -> str | None:
    """Why ``module`` must not import ``imported`` (None when it may)."""
    top = imported.split(".")[0]
    if top in FOLDERS and top != "weir":
        return f"imports '{imported}': use the installed name 'weir.{imported}'"
    if top != "weir":
        return None
    source = part_of(module)
    if imported == "weir":
        return None if source == CLIENT else (
            "imports the package facade 'weir': import the defining module")
    target = part_of(imported)
    if target == source or target in ALLOWED[source]:
        return None
    return f"{source} must not import {target} ('{imported}')"


def test_imports_point_down_the_floors() -> None:
    problems = []
    for module, path in engine_modules():
        for line, imported in imports_of(path.read_text(), module, path.name == "__init__.py"):
            why = violations(module, imported)
            if why is not None:
                problems.append(f"{path.relative_to(REPO)}:{line}: {why}")
    assert not problems, "wrong-way imports:\n" + "\n".join(problems)


@pytest.mark.parametrize(("module", "imported"), [
    # The back-arrows the layout had before the floors were drawn; each must be refused.
    ("weir.jobmaster.scheduler", "weir.taskexecutor.options"),
    ("weir.taskexecutor.task", "weir.jobmaster.daemon"),
    ("weir.state.timers", "weir.operators.processing_time"),
    ("weir.taskexecutor.task", "weir.operators.base"),
    ("weir.taskexecutor.record_writer", "weir.keys"),
    ("weir.jobmaster.source_coordinator", "weir.sources.api"),
    ("weir.shuffle.api", "weir.state.key_groups"),
    ("weir.shuffle.api", "weir.checkpoint.barrier"),
    ("weir.state.handles", "weir.taskexecutor.task"),
    ("weir.checkpoint.storage", "weir.state.handles"),
    ("weir.core.config", "weir.jobmaster.options"),
    ("weir.environment", "weir.client.minicluster"),
    ("weir.functions", "weir.cli.main"),
    ("weir.state.backend", "state.key_groups"),
])
def test_a_wrong_way_import_is_refused(module: str, imported: str) -> None:
    assert violations(module, imported) is not None


@pytest.mark.parametrize(("module", "imported"), [
    ("weir.taskexecutor.task", "weir.shuffle.api"),
    ("weir.state.snapshot", "weir.checkpoint.storage"),
    ("weir.operators.base", "weir.taskexecutor.operator"),
    ("weir.cli.main", "weir.jobmaster.daemon"),
    ("weir.core.rpc", "weir.proto.common_pb2"),
    ("weir.jobmaster.daemon", "weir.core.options"),
])
def test_a_right_way_import_is_accepted(module: str, imported: str) -> None:
    assert violations(module, imported) is None


def test_everything_uses_installed_names() -> None:
    """Code, doctest examples and the README import ``weir.state``, never ``state``: run from
    a checkout, ``state`` would load a second copy of the module, with its own classes."""
    names = "|".join(f for f in FOLDERS if f != "weir")
    bare = re.compile(rf"^\s*(?:>>> )?(?:from|import) ({names})\b", re.M)
    problems = []
    paths = [path for folder in ("tests", "benchmarks", "examples", "deploy", *FOLDERS)
             for path in sorted((REPO / folder).rglob("*.py"))]
    for path in [*paths, REPO / "README.md", REPO / "benchmarks" / "README.md"]:
        text = path.read_text()
        for match in bare.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            problems.append(f"{path.relative_to(REPO)}:{line}: {match.group(0).strip()}")
    assert not problems, "\n".join(problems)


def test_wheel_installs_nothing_but_weir(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), str(REPO)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    wheels = list(tmp_path.glob("weir-*.whl"))
    assert len(wheels) == 1
    names = zipfile.ZipFile(wheels[0]).namelist()
    top = {name.split("/")[0] for name in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"weir"}
    # Every engine module of the checkout is in the wheel, under its installed name.
    shipped = {name.removesuffix(".py").replace("/", ".") for name in names
               if name.endswith(".py")}
    expected = {module if path.name != "__init__.py" else module + ".__init__"
                for module, path in engine_modules()}
    assert expected - shipped == set()

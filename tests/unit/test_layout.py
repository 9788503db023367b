"""The package layout: one installed namespace, imports that only point down the floors, and
one home per concept.

Floors, bottom up (README, "Architecture"):

0. ``weir.proto``: the wire contracts.
1. ``weir.core``: configuration, errors, ids, records, RPC/metrics/file helpers, the
   source and executor contracts.
2. ``weir.shuffle``, then ``weir.checkpoint`` (barriers travel as shuffle events), then
   ``weir.state`` (snapshots go to checkpoint storage).
3. The daemons ``weir.jobmaster`` and ``weir.taskexecutor``; they meet only through
   ``weir.proto``.
4. The user API, laid out under PyFlink's module paths, in four floors of its own:

   a. what a program writes and configures: ``weir.common`` (configuration, types, time,
      watermark and restart strategies, the job client), ``weir.metrics``, and the
      definitions of ``weir.datastream`` (functions, windows, state, state backends and
      checkpoint storage, checkpointing, the enums and small classes), with the refusals
      of what PyFlink has and weir lacks (``weir.unsupported``);
   b. their runtime side, ``weir.operators``: the operators (windows, sinks, event time,
      async I/O, ...) and how keys are found;
   c. the connectors, ``weir.datastream.connectors``: sources and sinks, which create
      their readers and operators;
   d. the streams and the environment (``weir.datastream.data_stream``,
      ``stream_execution_environment``, ``async_data_stream``), the job graph they build
      (``graph``, ``code_fingerprint``, ``python_files``) and the ``weir.datastream``
      package, which names them all.

5. The client floor: ``weir.client``, ``weir.cli``, ``weir.testing`` (what tests and
   benchmarks share) and the package facade ``weir``.

Every import counts, also one inside a function or under ``TYPE_CHECKING``: a lazy import
is still a dependency. A package's modules may import each other within their floor.

A concept has one home: no two modules define a public class of the same name, and only a
concept's own modules carry its name (windows, sinks, watermarks).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import zipfile
from collections import defaultdict
from pathlib import Path

import pytest

from tests.support.layout import FOLDERS, REPO, engine_modules

PROTO, CORE = "weir.proto", "weir.core"
SHUFFLE, CHECKPOINT, STATE = "weir.shuffle", "weir.checkpoint", "weir.state"
JOBMASTER, TASKEXECUTOR = "weir.jobmaster", "weir.taskexecutor"
API, OPERATORS, CONNECTORS, STREAMS = "api", "operators", "connectors", "streams"
CLIENT = "client"
RUNTIME = {PROTO, CORE, SHUFFLE, CHECKPOINT, STATE}
DAEMONS = {JOBMASTER, TASKEXECUTOR}

#: What each part may import besides itself.
ALLOWED: dict[str, set[str]] = {
    PROTO: set(),
    CORE: {PROTO},
    SHUFFLE: {PROTO, CORE},
    CHECKPOINT: {PROTO, CORE, SHUFFLE},
    STATE: {PROTO, CORE, CHECKPOINT},
    JOBMASTER: RUNTIME,
    TASKEXECUTOR: RUNTIME,
    API: RUNTIME | DAEMONS,
    OPERATORS: RUNTIME | DAEMONS | {API},
    CONNECTORS: RUNTIME | DAEMONS | {API, OPERATORS},
    STREAMS: RUNTIME | DAEMONS | {API, OPERATORS, CONNECTORS},
    CLIENT: RUNTIME | DAEMONS | {API, OPERATORS, CONNECTORS, STREAMS},
}

#: Modules of the ``weir`` folder that belong to the client floor.
CLIENT_MODULES = ("weir.client", "weir.cli", "weir.__main__", "weir.docgen", "weir.testing")
#: Modules of ``weir.datastream`` on the floor of the streams and the environment (the
#: package itself too); its other modules are definitions, but for its connectors.
STREAMS_MODULES = ("weir.datastream.data_stream", "weir.datastream.stream_execution_environment",
                   "weir.datastream.async_data_stream", "weir.datastream.graph",
                   "weir.datastream.code_fingerprint", "weir.datastream.python_files")


def _within(module: str, packages: tuple[str, ...] | str) -> bool:
    packages = (packages,) if isinstance(packages, str) else packages
    return any(module == p or module.startswith(p + ".") for p in packages)


def part_of(module: str) -> str:
    """The floor part a module belongs to."""
    if module == "weir" or _within(module, CLIENT_MODULES):
        return CLIENT
    for part in (PROTO, CORE, SHUFFLE, CHECKPOINT, STATE, JOBMASTER, TASKEXECUTOR):
        if _within(module, part):
            return part
    if _within(module, "weir.operators"):
        return OPERATORS
    if _within(module, "weir.datastream.connectors"):
        return CONNECTORS
    if module == "weir.datastream" or _within(module, STREAMS_MODULES):
        return STREAMS
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
    ("weir.taskexecutor.record_writer", "weir.operators.keys"),
    ("weir.jobmaster.source_coordinator", "weir.datastream.connectors.base"),
    ("weir.shuffle.api", "weir.state.key_groups"),
    ("weir.shuffle.api", "weir.checkpoint.barrier"),
    ("weir.state.handles", "weir.taskexecutor.task"),
    ("weir.checkpoint.storage", "weir.state.handles"),
    ("weir.core.config", "weir.jobmaster.options"),
    ("weir.datastream.stream_execution_environment", "weir.client.minicluster"),
    ("weir.datastream.functions", "weir.cli.main"),
    ("weir.state.backend", "state.key_groups"),
    # Within the API: definitions, then operators, then connectors, then the streams.
    ("weir.core.config", "weir.common.configuration"),
    ("weir.datastream.functions", "weir.operators.base"),
    ("weir.common.execution_config", "weir.datastream.stream_execution_environment"),
    ("weir.datastream.window.triggers", "weir.operators.window.operator"),
    ("weir.operators.keys", "weir.datastream.data_stream"),
    ("weir.operators.sinks.file", "weir.datastream.connectors.file_system"),
    ("weir.datastream.connectors.spark", "weir.datastream.stream_execution_environment"),
    ("weir.datastream.data_stream", "weir"),
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
    ("weir.common.typeinfo", "weir.core.types"),
    ("weir.common.restart_strategy", "weir.jobmaster.options"),
    ("weir.operators.window.operator", "weir.datastream.window.triggers"),
    ("weir.datastream.connectors.file_system", "weir.operators.sinks.file"),
    ("weir.datastream.data_stream", "weir.operators.window.operator"),
    ("weir.datastream.stream_execution_environment", "weir.datastream.connectors.spark"),
    ("weir", "weir.datastream.stream_execution_environment"),
])
def test_a_right_way_import_is_accepted(module: str, imported: str) -> None:
    assert violations(module, imported) is None


def test_no_two_modules_define_a_public_class_of_the_same_name() -> None:
    """One name, one meaning: two classes of one name are two concepts (rename one) or one
    concept with two homes (keep one)."""
    defined: dict[str, set[str]] = defaultdict(set)
    for module, path in engine_modules():
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                defined[node.name].add(module)
    twice = {name: modules for name, modules in defined.items() if len(modules) > 1}
    assert not twice, "\n".join(f"{name}: {sorted(modules)}" for name, modules in twice.items())


#: A concept -> the packages and modules that are its homes: the user-facing one, the
#: runtime one, and (watermarks) the task's valve that merges its inputs' watermarks.
CONCEPT_HOMES = {
    "window": ("weir.datastream.window", "weir.operators.window"),
    "sink": ("weir.operators.sinks",),
    "watermark": ("weir.common.watermark_strategy", "weir.taskexecutor.watermark_valve"),
}


def test_only_a_concepts_homes_carry_its_name() -> None:
    """No third "windows" or "sinks" module: the user-facing side of windows, sinks and
    watermarks is under PyFlink's path, the runtime side in weir.operators."""
    problems = [f"{module} ({word}s live in {', '.join(homes)})"
                for module, _ in engine_modules()
                for word, homes in CONCEPT_HOMES.items()
                if word in module and not _within(module, homes)]
    assert not problems, "\n".join(problems)


def test_the_ground_floor_has_no_import_hooks() -> None:
    """What the API makes importable (PyFlink's paths, refused packages) is the API's
    business: nothing in weir.core touches the import system."""
    hooks = {"meta_path", "path_hooks", "MetaPathFinder", "PathEntryFinder", "Loader"}
    problems = []
    for module, path in engine_modules():
        if not _within(module, CORE):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.attr if isinstance(node, ast.Attribute) else \
                node.id if isinstance(node, ast.Name) else None
            if name in hooks:
                problems.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(("module", "not_loaded"), [
    # The runtime imports weir.core; the facade must not load the API with it.
    ("weir.core.time", "weir.common"),
    ("weir.state.descriptors", "weir.datastream"),
    # An operator imports definitions of weir.datastream, not the streams above it.
    ("weir.operators.base", "weir.datastream.stream_execution_environment"),
    ("weir.operators.window.operator", "weir.datastream.data_stream"),
])
def test_a_lower_floor_loads_without_the_floors_above(module: str, not_loaded: str) -> None:
    code = f"import sys, {module}; print({not_loaded!r} in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr[-1000:]
    assert result.stdout.strip() == "False"


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

"""Every docstring example runs and shows what it says: one test per module, over every
engine module (and the shared test support), discovered from the files rather than listed,
so that a module added or moved is covered without a test to edit."""

from __future__ import annotations

import doctest
import importlib
import io
from contextlib import redirect_stdout
from types import ModuleType

import pytest

from tests.support.layout import REPO, engine_modules


def _documented_modules() -> list[str]:
    """Engine modules, then the test support's; without the generated protobuf modules and
    ``weir.__main__`` (importing it runs the command line)."""
    engine = [name for name, path in engine_modules()
              if "_pb2" not in path.name and name != "weir.__main__"]
    support = [f"tests.support.{path.stem}"
               for path in sorted((REPO / "tests" / "support").glob("*.py"))
               if path.stem != "__init__"]
    return engine + support


MODULES = _documented_modules()


def _examples(module: ModuleType) -> list[doctest.DocTest]:
    return [test for test in doctest.DocTestFinder().find(module) if test.examples]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    out = io.StringIO()
    with redirect_stdout(out):
        result = doctest.testmod(module)
    assert result.failed == 0, f"{name}: {result.failed} example(s) failed\n{out.getvalue()}"


def test_the_public_api_carries_examples() -> None:
    """Every module that defines a name of the ``weir`` facade shows how to use it."""
    import weir

    defining = sorted({module for name in weir.__all__
                       if (module := getattr(getattr(weir, name), "__module__", None))
                       and module.startswith("weir.")})
    assert defining, "the facade names no module"
    without = [name for name in defining if not _examples(importlib.import_module(name))]
    assert not without, f"public modules without a docstring example: {without}"


def test_most_engine_modules_carry_examples() -> None:
    """A floor, so that examples are not lost unnoticed: at least 60% of the engine's
    modules (106 of 160 when this test was written) have one."""
    modules = [name for name in MODULES if not name.startswith("tests.")]
    with_examples = [name for name in modules if _examples(importlib.import_module(name))]
    assert len(with_examples) >= 0.6 * len(modules), (len(with_examples), len(modules))

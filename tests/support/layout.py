"""The engine's modules, as the repository lays them out: each top-level folder is a package
of the one installed ``weir`` namespace (pyproject's ``[tool.setuptools.package-dir]``).

Discovered from the files, never listed, so that modules can move without a test to edit.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def package_folders() -> dict[str, str]:
    """Repository folder -> installed package (pyproject's package-dir), e.g.
    ``{"weir": "weir", "state": "weir.state", ...}``."""
    with (REPO / "pyproject.toml").open("rb") as f:
        package_dir = tomllib.load(f)["tool"]["setuptools"]["package-dir"]
    return {folder: package for package, folder in package_dir.items()}


#: Repository folder -> installed package.
FOLDERS = package_folders()


def engine_modules() -> list[tuple[str, Path]]:
    """(installed module name, file) of every engine module, packages as their
    ``__init__.py``, in folder and path order."""
    modules = []
    for folder, package in FOLDERS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            relative = path.relative_to(REPO / folder).with_suffix("")
            parts = [p for p in relative.parts if p != "__init__"]
            modules.append((".".join([package, *parts]), path))
    return modules

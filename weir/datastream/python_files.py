"""Python files shipped with a job (PyFlink's ``env.add_python_file``).

A job's functions travel to the TaskExecutors pickled (cloudpickle). A function defined in
the job program travels by value, but one imported from a module of the user's travels by
reference: the TaskExecutor imports that module again, and fails where it is not
installed. :func:`ship_python_file` imports the module (or every module of a directory)
on the client and registers it with cloudpickle to travel by value, with its functions,
classes and module-level values, so it needs no installing anywhere.

Example:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "weir_doc_helpers.py").write_text("def double(x):\\n    return 2 * x\\n")
    >>> [m.__name__ for m in ship_python_file(str(folder / "weir_doc_helpers.py"))]
    ['weir_doc_helpers']
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import cloudpickle

from weir.core.errors import InvalidJobError


def ship_python_file(file_path: str) -> list[ModuleType]:
    """Import ``file_path`` — a ``.py`` module, a package directory, or a directory of
    modules and packages — and have the job carry it by value; returns the modules.

    Raises InvalidJobError, naming the path, for a missing path, an archive (install
    its contents on every TaskExecutor instead), or a name that another module already
    took in this process."""
    path = Path(file_path).expanduser().resolve()
    if not path.exists():
        msg = f"add_python_file: {file_path} does not exist"
        raise InvalidJobError(msg)
    if path.is_file() and path.suffix == ".py":
        return [_ship(path.parent, path.stem, path)]
    if path.is_dir() and (path / "__init__.py").is_file():
        return [_ship(path.parent, path.name, path / "__init__.py")]
    if path.is_dir():
        found = sorted([p for p in path.glob("*.py")]
                       + [p for p in path.iterdir() if (p / "__init__.py").is_file()])
        return [_ship(path, p.stem if p.is_file() else p.name,
                      p if p.is_file() else p / "__init__.py") for p in found]
    msg = (f"add_python_file: {file_path} is neither a .py file nor a directory: weir ships "
           f"Python source with the job, not archives or wheels; install those on every "
           f"TaskExecutor")
    raise InvalidJobError(msg)


def _ship(directory: Path, name: str, origin: Path) -> ModuleType:
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    module = importlib.import_module(name)
    found = Path(getattr(module, "__file__", "") or "").resolve()
    if found != origin.resolve():
        msg = (f"add_python_file: the module name '{name}' of {origin} is taken by "
               f"{found or 'a built-in module'}: rename the file")
        raise InvalidJobError(msg)
    cloudpickle.register_pickle_by_value(module)
    return module

"""PyFlink API that has no meaning in weir, or that weir does not support yet: using it fails
at once, while the job is built, with one line naming the feature and what to do instead,
rather than with an AttributeError or a ModuleNotFoundError.

Each refusal is declared next to what it concerns: a module of PyFlink's paths lists the
names it lacks in ``__unsupported__`` and gets its ``__getattr__`` from :func:`refusing`
(a package whose names load on first use, from :func:`lazy_names`); a class refuses
PyFlink's methods it lacks through :func:`refuse`; a package registers with
:func:`refuse_modules` the modules below it that weir has no part of (Java connectors,
the Table API), which then import, and refuse every name. The reasons several of them
share are the constants below.

Example:
    >>> __getattr__ = refusing("weir.example", {"Gone": "use Here instead"})
    >>> try:
    ...     __getattr__("Gone")
    ... except UnsupportedFeatureError as err:
    ...     print(err)
    Gone (weir.example) is not supported by weir: use Here instead
    >>> try:
    ...     refuse("Env", "register_cached_file", {"register_cached_file": "no cache"})
    ... except InvalidJobError as err:
    ...     print(err)
    register_cached_file is not supported by weir: no cache
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Callable, Collection, Mapping, Sequence
from types import ModuleType
from typing import Any, NoReturn

from weir.core.errors import InvalidJobError

#: Why Java connectors, jars and Java objects do not exist in weir.
JAVA = "weir runs no JVM: Java connectors and jars do not exist in weir"
#: What replaces Python dependency management that ships archives.
DEPS = ("install the packages the job's functions import on every TaskExecutor; "
        "env.add_python_file ships .py files and directories with the job")
#: Why settings of the DataSet API do not exist.
DATASET = "it belongs to the removed DataSet API"
#: What replaces Java file formats.
FILES = ("read Parquet, CSV or JSON lines with FileSource(path, format=...) and write "
         "with FileSink(path, format=...)")
#: Why serialization schemas do not exist.
SCHEMAS = ("serialization schemas belong to Java connectors: records travel as Arrow "
           "columns or pickles")
#: Why type serializers do not exist.
SERIALIZERS = "records travel as Arrow columns or pickles: there are no type serializers"
#: What replaces Java sources.
SOURCES = ("implement weir.Source (FLIP-27 style) or read with from_collection, "
           "from_sequence, FileSource or from_spark")
#: What replaces Java sinks.
SINKS = "write with FileSink or implement weir.Sink"
#: Why custom merging window assigners are refused.
CUSTOM_MERGING = ("custom merging window assigners are not supported yet; use "
                  "(Dynamic)EventTimeSessionWindows / ProcessingTimeSessionWindows")
#: Why custom partitioners are refused.
CUSTOM_PARTITIONERS = "custom partitioners are not supported yet"
#: Why a class PyFlink uses inside its own implementation is not offered.
INTERNAL = "it is PyFlink-internal"


class UnsupportedFeatureError(InvalidJobError, ImportError):
    """A PyFlink name weir does not have, imported from one of PyFlink's module paths.

    An ImportError, so ``from ... import`` raises it as it is (with its message), and an
    InvalidJobError, so ``weir run`` reports it in one line, as it does any job that
    cannot be built.
    """


def refuse(owner: str, name: str, table: Mapping[str, str]) -> NoReturn:
    """Raise the error for PyFlink's method ``name`` of class ``owner`` if it is in
    ``table`` (method name -> why weir has no such thing), else AttributeError.

    Called from a class's ``__getattr__``; raises InvalidJobError naming the method.
    """
    reason = table.get(name)
    if reason is None:
        msg = f"'{owner}' object has no attribute '{name}'"
        raise AttributeError(msg)
    msg = f"{name} is not supported by weir: {reason}"
    raise InvalidJobError(msg)


def _refusal(module: str, name: str, reason: str) -> UnsupportedFeatureError:
    return UnsupportedFeatureError(f"{name} ({module}) is not supported by weir: {reason}")


def refusing(module: str, unsupported: Mapping[str, str]) -> Callable[[str], NoReturn]:
    """The ``__getattr__`` of PyFlink's ``module``: a name of ``unsupported`` (PyFlink
    name -> why weir lacks it and what to use instead) raises UnsupportedFeatureError,
    any other name AttributeError.

    >>> refusing("weir.example", {})("Missing")
    Traceback (most recent call last):
    ...
    AttributeError: module 'weir.example' has no attribute 'Missing'
    """

    def __getattr__(name: str) -> NoReturn:  # noqa: N807 - a module's __getattr__
        reason = unsupported.get(name)
        if reason is not None:
            raise _refusal(module, name, reason)
        msg = f"module {module!r} has no attribute {name!r}"
        raise AttributeError(msg)

    return __getattr__


def lazy_names(module: str, modules: Sequence[str], *, submodules: Collection[str] = (),
               hidden: Collection[str] = (), refuse_unsupported: bool = True
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose names are those of
    ``modules`` (full names; each one's ``__all__``, except ``hidden``) and of its own
    ``submodules``, each loaded on first use (PEP 562). ``__all__`` is their union, and
    ``__unsupported__`` the union of the modules' (refused as by :func:`refusing` when
    ``refuse_unsupported``).

    Loading on first use lets a module of the package that the runtime imports (an
    operator imports ``weir.datastream.functions``) load without the modules above it
    (the environment, which imports the operators). A name is taken from the first module
    that has it.
    """
    package = sys.modules[module]

    def _names() -> list[str]:
        names = dict.fromkeys(submodules)
        for name in modules:
            names.update(dict.fromkeys(n for n in importlib.import_module(name).__all__
                                       if n not in hidden))
        return list(names)

    def _unsupported() -> dict[str, str]:
        merged: dict[str, str] = {}
        for name in modules:
            merged.update(getattr(importlib.import_module(name), "__unsupported__", {}))
        return merged

    def __getattr__(name: str) -> Any:  # noqa: N807 - a module's __getattr__
        if name == "__all__":
            value: Any = _names()
        elif name == "__unsupported__":
            value = _unsupported()
        elif name in submodules:
            value = importlib.import_module(f"{module}.{name}")
        elif name.startswith("_"):
            msg = f"module {module!r} has no attribute {name!r}"
            raise AttributeError(msg)
        else:
            value = _lookup(name)
        setattr(package, name, value)  # later lookups skip this function
        return value

    def _lookup(name: str) -> Any:
        if name not in hidden:
            for source in modules:
                found = importlib.import_module(source)
                if name in found.__all__:
                    return getattr(found, name)
        reason = _unsupported().get(name) if refuse_unsupported else None
        if reason is not None:
            raise _refusal(module, name, reason)
        msg = f"module {module!r} has no attribute {name!r}"
        raise AttributeError(msg)

    def __dir__() -> list[str]:  # noqa: N807 - a module's __dir__
        return sorted({*vars(package), *_names()})

    return __getattr__, __dir__


def java_connector(feature: str, instead: str) -> str:
    """Why every name of a Java connector's module is refused."""
    return f"{feature} is a Java connector and weir runs no JVM; {instead}"


def missing_package(feature: str, instead: str) -> str:
    """Why every name of a PyFlink package weir has no part of is refused."""
    return f"weir has no {feature}; {instead}"


class _RefusedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Creates the modules registered by :func:`refuse_modules` when they are imported:
    each one's every name raises UnsupportedFeatureError with the module's reason."""

    def __init__(self) -> None:
        #: Module -> why; packages also cover every module below them.
        self.modules: dict[str, str] = {}
        self.packages: dict[str, str] = {}

    def reason(self, fullname: str) -> tuple[str, bool] | None:
        """Why ``fullname`` is refused and whether it is a package; None: it is not."""
        if fullname in self.modules:
            return self.modules[fullname], False
        for package, why in self.packages.items():
            if fullname == package or fullname.startswith(package + "."):
                return why, True
        return None

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        found = self.reason(fullname)
        if found is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=found[1])

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        name = module.__name__
        found = self.reason(name)
        assert found is not None
        why = found[0]
        pyflink = name.replace("weir", "pyflink", 1)
        module.__doc__ = f"PyFlink's ``{pyflink}``: not in weir ({why.split(';')[0]})."
        setattr(module, "__all__", [])  # noqa: B010 - set on a module being created

        def __getattr__(attribute: str) -> Any:  # noqa: N807 - a module's __getattr__
            if attribute.startswith("__"):
                raise AttributeError(attribute)
            raise _refusal(name, attribute, why)

        setattr(module, "__getattr__", __getattr__)  # noqa: B010


_FINDER = _RefusedModules()


def refuse_modules(reasons: Mapping[str, str], *, packages: bool = False) -> None:
    """Make each module of ``reasons`` (full name -> why) importable, every name in it
    refused with that reason; with ``packages``, every module below each one too.

    Called by a package when it is imported (before any module below it can be), for the
    modules of PyFlink's that live below it and that weir has no part of.
    """
    (_FINDER.packages if packages else _FINDER.modules).update(reasons)
    if _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)

"""Regenerates the documentation's reference tables from the code that they describe.

Each table lives in a page under ``docs/`` between two markers::

    <!-- BEGIN GENERATED: NAME (python -m weir.docgen) -->
    ...
    <!-- END GENERATED: NAME -->

and is rendered from one declaration in the code:

* ``configuration`` (``docs/operations/configuration.md``): the options modules
  (:data:`weir.core.config.OPTION_MODULES`);
* ``metrics`` (``docs/operations/metrics.md``): :mod:`weir.core.metric_names`;
* ``pyflink-names`` (``docs/user-guide/pyflink-names.md``): the record of which PyFlink
  names weir has and which it refuses, with the reason (:func:`pyflink_name_rows`).

``python -m weir.docgen`` (``make docs``) rewrites the tables; ``python -m weir.docgen
--check`` (``make docs-check``) exits 1, naming the pages, when one is stale, and so does
``tests/unit/test_docs_and_contracts.py``.

Example:
    >>> print(replace_between("a\\n<!-- BEGIN GENERATED: t (python -m weir.docgen) -->\\n"
    ...                       "old\\n<!-- END GENERATED: t -->\\nb", "t", "new"))
    a
    <!-- BEGIN GENERATED: t (python -m weir.docgen) -->
    new
    <!-- END GENERATED: t -->
    b
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: A PyFlink name as the reference lists it: (module path under ``weir``, name, status,
#: note). ``status`` is :data:`AVAILABLE` or :data:`REFUSED`; a name ``*`` stands for every
#: name of a module weir refuses as a whole.
PyFlinkRow = tuple[str, str, str, str]
AVAILABLE = "yes"
REFUSED = "refused"


def begin_marker(name: str) -> str:
    return f"<!-- BEGIN GENERATED: {name} (python -m weir.docgen) -->"


def end_marker(name: str) -> str:
    return f"<!-- END GENERATED: {name} -->"


def replace_between(text: str, name: str, body: str) -> str:
    """``text`` with what lies between the markers of ``name`` replaced by ``body``.

    Raises ValueError when ``text`` lacks either marker.
    """
    begin, end = begin_marker(name), end_marker(name)
    head, sep, rest = text.partition(begin)
    if not sep or end not in rest:
        msg = f"the markers of the generated table {name!r} are missing"
        raise ValueError(msg)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{body.strip()}\n{end}{tail}"


def _cell(text: str) -> str:
    """``text`` made safe for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


# -- configuration ---------------------------------------------------------------------------

def _default(value: Any) -> str:
    if value is None:
        return "(none)"
    return f"`{value}`" if str(value) != "" else '`""` (empty)'


def configuration_reference() -> str:
    """Every option, grouped by the module that declares it, as a definition list.

    A list rather than one table: several options' descriptions are paragraphs, which
    make unreadable table cells.
    """
    from weir.core.config import OPTION_MODULES, Option

    sections: list[str] = []
    seen: set[str] = set()
    for module_name in OPTION_MODULES:
        module = importlib.import_module(module_name)
        title = (module.__doc__ or module_name).strip().splitlines()[0].rstrip(".")
        entries: list[str] = []
        for value in vars(module).values():
            if not isinstance(value, Option) or value.key in seen:
                continue
            seen.add(value.key)
            facts = [f"type `{value.type.__name__}`", f"default {_default(value.default)}",
                     f"env `{value.env_var}`"]
            if value.choices:
                facts.append("one of " + ", ".join(f"`{c}`" for c in value.choices))
            if value.deprecated_keys:
                facts.append("older key " + ", ".join(f"`{k}`" for k in value.deprecated_keys))
            doc = " ".join(value.doc.split())
            # The key is the anchor: other pages link to configuration.md#<key>.
            entries.append(f"`{value.key}` {{ #{value.key} }}\n:   {doc}\n\n"
                           f"    {'; '.join(facts)}.\n")
        if entries:
            sections.append(f"### {title}\n\n_Declared in `{module_name}`._\n\n"
                            + "\n".join(entries))
    return "\n".join(sections)


# -- metrics ---------------------------------------------------------------------------------

def metrics_reference() -> str:
    """One table per daemon scope, from :data:`weir.core.metric_names.BY_DAEMON`; labels
    every metric of a scope carries are said once, above its table."""
    from weir.core.metric_names import BY_DAEMON

    def names(labels: Iterable[str]) -> str:
        return ", ".join(f"`{label}`" for label in labels)

    sections = []
    for scope, specs in BY_DAEMON:
        common = [label for label in specs[0].labels if all(label in s.labels for s in specs)]
        extra = {spec.name: [la for la in spec.labels if la not in common] for spec in specs}
        with_extra = any(extra.values())
        rows = ["| metric | type |" + (" more labels |" if with_extra else "")
                + " description |", "|---|---|" + ("---|" if with_extra else "") + "---|"]
        for spec in specs:
            more = f" {names(extra[spec.name]) or '—'} |" if with_extra else ""
            rows.append(f"| `{spec.name}` | {spec.type} |{more} {_cell(spec.help)} |")
        note = f"Every metric here carries the labels {names(common)}.\n\n" if common else ""
        sections.append(f"### {scope}\n\n{note}" + "\n".join(rows) + "\n")
    return "\n".join(sections)


# -- PyFlink names ---------------------------------------------------------------------------

@dataclass(frozen=True)
class PyFlinkRecord:
    """What the code records about PyFlink's names: the one place the generator reads.

    ``modules``: module path under weir -> PyFlink's public names there; ``reasons``: name
    -> why weir refuses it; ``aliases``: name -> weir's name for it; ``refused_modules``:
    module -> why weir refuses every name of it; ``refused_methods``: PyFlink class (dotted
    path under weir) -> {method: why weir refuses it}.
    """

    modules: dict[str, list[str]]
    reasons: dict[str, str]
    aliases: dict[str, str]
    refused_modules: dict[str, str]
    refused_methods: dict[str, dict[str, str]]


def pyflink_record() -> PyFlinkRecord:
    """Read the record from the API modules themselves: every module under PyFlink's paths
    (``weir.common``, ``weir.datastream``, ``weir.metrics``) names what it has in
    ``__all__`` and what it refuses, with why, in ``__unsupported__``; the modules weir
    has no part of are those registered with :func:`weir.unsupported.refuse_modules`; the
    methods a class refuses are its ``__unsupported__`` table."""
    import importlib
    import pkgutil

    from weir import unsupported

    modules: dict[str, list[str]] = {}
    reasons: dict[str, str] = {}
    for package_name in ("weir.common", "weir.datastream", "weir.metrics"):
        package = importlib.import_module(package_name)
        found = [package_name, *(info.name for info in pkgutil.walk_packages(
            package.__path__, package_name + "."))]
        for module_name in found:
            module = importlib.import_module(module_name)
            refused: dict[str, str] = dict(getattr(module, "__unsupported__", {}))
            names = [*getattr(module, "__all__", ()), *refused]
            if names:
                modules[module_name] = names
            reasons.update(refused)
    finder = unsupported._FINDER
    refused_modules = {**finder.modules, **finder.packages}
    from weir.common import ExecutionConfig, WatermarkStrategy
    from weir.datastream import DataStream, DataStreamSink, StreamExecutionEnvironment

    methods = {f"{cls.__module__.rpartition('.')[0]}.{cls.__name__}": cls.__unsupported__
               for cls in (StreamExecutionEnvironment, DataStream, DataStreamSink,
                           ExecutionConfig, WatermarkStrategy)}
    return PyFlinkRecord(modules=modules, reasons=reasons, aliases={},
                         refused_modules=refused_modules,
                         refused_methods={k: dict(v) for k, v in methods.items() if v})


def pyflink_name_rows(record: PyFlinkRecord | None = None) -> list[PyFlinkRow]:
    """Every PyFlink name weir knows of, as ``(module, name, status, note)`` rows, sorted.

    Example:
        >>> rows = pyflink_name_rows(PyFlinkRecord(
        ...     modules={"weir.x": ["B", "A"]}, reasons={"B": "no B here"},
        ...     aliases={"A": "AA"}, refused_modules={"weir.y": "no JVM"},
        ...     refused_methods={"weir.x.C": {"m": "no m"}}))
        >>> for row in rows:
        ...     print(row)
        ('weir.x', 'A', 'yes', 'weir calls it `AA`')
        ('weir.x', 'B', 'refused', 'no B here')
        ('weir.x.C', 'm()', 'refused', 'no m')
        ('weir.y', '*', 'refused', 'no JVM')
    """
    record = record if record is not None else pyflink_record()
    rows: list[PyFlinkRow] = []
    for module, names in record.modules.items():
        for name in set(names):
            if name in record.reasons:
                rows.append((module, name, REFUSED, record.reasons[name]))
            elif name in record.aliases:
                rows.append((module, name, AVAILABLE, f"weir calls it `{record.aliases[name]}`"))
            else:
                rows.append((module, name, AVAILABLE, ""))
    rows.extend((module, "*", REFUSED, why) for module, why in record.refused_modules.items())
    for owner, table in record.refused_methods.items():
        rows.extend((owner, f"{name}()", REFUSED, why) for name, why in table.items())
    return sorted(rows, key=lambda r: (r[0], r[1].lower(), r[1]))


def pyflink_names_reference(rows: Iterable[PyFlinkRow] | None = None) -> str:
    """The rows as one table per module path, with a count of each status first."""
    rows = list(rows if rows is not None else pyflink_name_rows())
    by_module: dict[str, list[PyFlinkRow]] = {}
    for row in rows:
        by_module.setdefault(row[0], []).append(row)
    available = sum(1 for r in rows if r[2] == AVAILABLE)
    out = [f"{len(by_module)} module paths and classes; {available} names available, "
           f"{len(rows) - available} refused.\n"]
    for module, module_rows in by_module.items():
        pyflink = module.replace("weir", "pyflink", 1)
        out.append(f"### `{module}`\n\nPyFlink's `{pyflink}`.\n")
        out.append("| name | weir | note |\n|---|---|---|")
        out.extend(f"| `{name}` | {status} | {_cell(note)} |"
                   for _, name, status, note in module_rows)
        out.append("")
    return "\n".join(out)


# -- the pages -------------------------------------------------------------------------------

@dataclass(frozen=True)
class GeneratedTable:
    """One generated table: its marker name, the page that holds it, how it is rendered."""

    name: str
    page: str
    render: Callable[[], str]


TABLES: tuple[GeneratedTable, ...] = (
    GeneratedTable("configuration", "docs/operations/configuration.md",
                   configuration_reference),
    GeneratedTable("metrics", "docs/operations/metrics.md", metrics_reference),
    GeneratedTable("pyflink-names", "docs/user-guide/pyflink-names.md",
                   pyflink_names_reference),
)


def regenerated(root: Path = REPO) -> dict[Path, tuple[str, str]]:
    """Page -> (its text now, its text with every table regenerated)."""
    pages: dict[Path, tuple[str, str]] = {}
    for table in TABLES:
        path = root / table.page
        current, text = pages.get(path, (path.read_text(), path.read_text()))
        pages[path] = (current, replace_between(text, table.name, table.render()))
    return pages


def stale(root: Path = REPO) -> list[str]:
    """The pages (relative to ``root``) whose generated tables are not current."""
    return [str(path.relative_to(root)) for path, (now, fresh) in regenerated(root).items()
            if now != fresh]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m weir.docgen", description=__doc__
                                     .split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a generated table is stale")
    args = parser.parse_args(argv)
    if args.check:
        pages = stale()
        for page in pages:
            print(f"{page}: generated tables are stale: run `make docs`", file=sys.stderr)
        return 1 if pages else 0
    for path, (now, fresh) in regenerated().items():
        if now != fresh:
            path.write_text(fresh)
            print(f"updated {path.relative_to(REPO)}")
        else:
            print(f"unchanged {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

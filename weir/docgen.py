"""Regenerates the README's configuration reference from the options modules.

Run ``python -m weir.docgen`` (or ``make docs``); a test fails when the README is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from weir.core.config import options_reference_markdown

BEGIN = "<!-- BEGIN GENERATED: configuration (python -m weir.docgen) -->"
END = "<!-- END GENERATED: configuration -->"


def render(readme: str) -> str:
    """``readme`` with the text between the markers replaced by the current table."""
    head, sep, rest = readme.partition(BEGIN)
    if not sep or END not in rest:
        msg = "README.md lacks the configuration markers"
        raise ValueError(msg)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{options_reference_markdown()}\n{END}{tail}"


def main() -> int:
    path = Path(__file__).resolve().parents[1] / "README.md"
    path.write_text(render(path.read_text()))
    print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

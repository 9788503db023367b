"""Copy the dashboard's pinned browser libraries from an ``npm ci`` tree into
``static/vendor/`` and write ``static/vendor/MANIFEST.json`` (package, version, license,
file, sha256): ``make web`` runs it, and the files it writes are committed, so that
installing weir needs no Node.js and the shipped files are exactly the released ones.

Usage: ``python vendor.py NODE_MODULES VENDOR_DIR``
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

#: package -> (its distributed files to ship, our folder for them). Each package's LICENSE
#: is copied beside them; dagre's ES module build bundles graphlib, whose LICENSE goes too.
FILES: dict[str, tuple[list[str], str]] = {
    "preact": (["dist/preact.module.js", "hooks/dist/hooks.module.js", "LICENSE"], "preact"),
    "htm": (["dist/htm.module.js", "LICENSE"], "htm"),
    "@dagrejs/dagre": (["dist/dagre.esm.js", "dist/dagre.esm.js.LEGAL.txt", "LICENSE"],
                       "dagre"),
    "@dagrejs/graphlib": (["LICENSE"], "dagre/graphlib"),
    "uplot": (["dist/uPlot.esm.js", "dist/uPlot.min.css", "LICENSE"], "uplot"),
}


def vendor(node_modules: Path, target: Path) -> list[dict[str, str]]:
    """Copy every file of :data:`FILES` below ``target`` (emptied first) and return the
    manifest's entries."""
    if target.exists():
        shutil.rmtree(target)
    entries: list[dict[str, str]] = []
    for package, (files, folder) in FILES.items():
        meta = json.loads((node_modules / package / "package.json").read_text())
        for name in files:
            source = node_modules / package / name
            destination = target / folder / Path(name).name
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination)
            entries.append({"package": package, "version": meta["version"],
                            "license": meta.get("license", ""),
                            "file": destination.relative_to(target).as_posix(),
                            "sha256": hashlib.sha256(destination.read_bytes()).hexdigest()})
    (target / "MANIFEST.json").write_text(json.dumps(entries, indent=1) + "\n")
    return entries


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: vendor.py NODE_MODULES VENDOR_DIR")
    written = vendor(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"{len(written)} files in {sys.argv[2]}")

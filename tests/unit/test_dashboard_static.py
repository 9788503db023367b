"""The web dashboard's static files on the REST server: served without the token (while
the API needs it) with their content types and caching headers, revalidated by ETag, no
path out of the folder, 404 for unknown files; and the vendored libraries are exactly the
files `make web` copies (their manifest's sha256 and package-lock.json's versions)."""

from __future__ import annotations

import hashlib
import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from weir.jobmaster.rest.handlers import Request
from weir.jobmaster.rest.router import Router
from weir.jobmaster.rest.server import RestServer, static_name

WEB = Path(__file__).resolve().parents[2] / "jobmaster" / "rest" / "web"
TOKEN = "dashboard-token"


def _jobs(request: Request) -> tuple[int, object]:
    return 200, {"jobs": []}


@pytest.fixture(scope="module")
def server() -> Iterator[RestServer]:
    router: Router = Router()
    router.add("GET", "/jobs", _jobs)
    rest = RestServer("127.0.0.1", 0, router, TOKEN, None)
    yield rest
    rest.stop()


def fetch(server: RestServer, path: str, method: str = "GET",
          headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """Raw request (no client-side normalisation of ``..`` in the path)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, \
            response.read()
    finally:
        conn.close()


def test_the_page_needs_no_token_while_the_api_does(server: RestServer) -> None:
    status, headers, body = fetch(server, "/")
    assert status == 200 and headers["content-type"].startswith("text/html")
    assert b'<script type="module" src="static/app.js">' in body
    assert headers["cache-control"] == "no-cache" and headers["etag"]
    assert fetch(server, "/jobs")[0] == 401
    assert fetch(server, "/jobs", headers={"Authorization": f"Bearer {TOKEN}"})[0] == 200


@pytest.mark.parametrize(("path", "content_type"), [
    ("/static/app.js", "text/javascript"), ("/static/js/graph.js", "text/javascript"),
    ("/static/style.css", "text/css"), ("/static/favicon.svg", "image/svg+xml"),
    ("/static/vendor/uplot/uPlot.min.css", "text/css"),
    ("/static/vendor/MANIFEST.json", "application/json")])
def test_content_types(server: RestServer, path: str, content_type: str) -> None:
    status, headers, body = fetch(server, path)
    assert status == 200, body
    assert headers["content-type"].split(";")[0] == content_type
    assert int(headers["content-length"]) == len(body) > 0
    assert headers["x-content-type-options"] == "nosniff"


def test_vendor_files_are_cached_and_own_files_revalidated(server: RestServer) -> None:
    _, vendor, _ = fetch(server, "/static/vendor/preact/preact.module.js")
    assert "max-age" in vendor["cache-control"]
    status, own, body = fetch(server, "/static/app.js")
    assert status == 200 and own["cache-control"] == "no-cache"
    status, _, body = fetch(server, "/static/app.js", headers={"If-None-Match": own["etag"]})
    assert (status, body) == (304, b"")
    status, headers, body = fetch(server, "/static/app.js", method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 0


@pytest.mark.parametrize("path", [
    "/static/../server.py", "/static/../../rest/server.py", "/static/%2e%2e/server.py",
    "/static/js/../../server.py", "/static/.hidden", "/static//etc/passwd",
    "/static/vendor/preact/LICENSE", "/static/nothing.js", "/static/"])
def test_no_way_out_and_unknown_files_are_404(server: RestServer, path: str) -> None:
    status, headers, body = fetch(server, path)
    assert status == 404, (path, body[:200])
    assert headers["content-type"] == "application/json" and b"import" not in body


def test_static_paths_never_shadow_the_api() -> None:
    from weir.jobmaster.rest.handlers import RestHandlers

    for _, pattern in RestHandlers.__new__(RestHandlers).routes().patterns():
        assert static_name(pattern) is None, pattern
    assert static_name("/v1/jobs") is None and static_name("/static/app.js") == "app.js"


def test_only_get_and_head_serve_files(server: RestServer) -> None:
    status, _, _ = fetch(server, "/static/app.js", method="POST")
    assert status == 401  # not a file, so an API request: it needs the token
    status, _, _ = fetch(server, "/static/app.js", method="POST",
                         headers={"Authorization": f"Bearer {TOKEN}"})
    assert status == 404


def test_vendored_files_match_their_manifest_and_the_lock_file() -> None:
    vendor = WEB / "static" / "vendor"
    manifest = json.loads((vendor / "MANIFEST.json").read_text())
    lock = json.loads((WEB / "package-lock.json").read_text())["packages"]
    declared = json.loads((WEB / "package.json").read_text())["dependencies"]
    assert {e["package"] for e in manifest} >= set(declared)
    for entry in manifest:
        path = vendor / entry["file"]
        assert path.is_file(), entry
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"], entry
        assert lock[f"node_modules/{entry['package']}"]["version"] == entry["version"], entry
        if entry["package"] in declared:
            assert declared[entry["package"]] == entry["version"]  # pinned exactly
    # Every shipped file is in the manifest, and each library has its licence beside it.
    shipped = {p.relative_to(vendor).as_posix() for p in vendor.rglob("*") if p.is_file()}
    assert shipped - {"MANIFEST.json"} == {e["file"] for e in manifest}
    for package in {e["package"] for e in manifest}:
        assert any(e["package"] == package and e["file"].endswith("LICENSE")
                   for e in manifest), package


def test_the_page_imports_only_what_is_shipped() -> None:
    """Every module the page names (import map, preloads, stylesheets) is a shipped file."""
    import re

    static = WEB / "static"
    page = (static / "index.html").read_text()
    for ref in re.findall(r'(?:href|src)="(?:\./)?static/([^"]+)"', page) + \
            re.findall(r'"\./static/([^"]+)"', page):
        assert (static / ref).is_file(), ref
    for module in static.rglob("*.js"):
        if "vendor" in module.parts:
            continue
        for ref in re.findall(r'from "(\.[^"]+)"', module.read_text()):
            assert (module.parent / ref).resolve().is_file(), (module, ref)


def test_the_wheel_ships_every_static_file(tmp_path: Path) -> None:
    import subprocess
    import sys
    import zipfile

    repo = WEB.parents[2]
    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp_path), str(repo)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    [wheel] = tmp_path.glob("weir-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    static = WEB / "static"
    expected = {"weir/jobmaster/rest/web/static/" + p.relative_to(static).as_posix()
                for p in static.rglob("*") if p.is_file()}
    assert expected - shipped == set()

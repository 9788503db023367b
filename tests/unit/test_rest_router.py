"""The REST router (pure) and the REST server's front door: authentication by token and
by TLS client certificate, JSON errors, on a real in-process server."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from weir.core.tls import TlsFiles, generate_cluster_pki
from weir.jobmaster.rest.handlers import Handler, Operations, Request, RestError
from weir.jobmaster.rest.router import Router
from weir.jobmaster.rest.server import RestServer
from weir.testing.cluster import poll

TOKEN = "s3cret-token"


def test_router_binds_parameters_and_reports_methods() -> None:
    router: Router[str] = Router()
    router.add("GET", "/jobs/overview", "overview")
    router.add("GET", "/jobs/:jobid", "job")
    router.add("PATCH", "/jobs/:jobid", "cancel")
    router.add("GET", "/jobs/:jobid/vertices/:vertexid", "vertex")

    assert router.match("GET", "/jobs/overview").handler == "overview"  # type: ignore[union-attr]
    match = router.match("get", "//jobs/j1/vertices/7/")
    assert match is not None and (match.handler, match.params) == \
        ("vertex", {"jobid": "j1", "vertexid": "7"})
    assert router.match("PATCH", "/jobs/j1").handler == "cancel"  # type: ignore[union-attr]
    refused = router.match("DELETE", "/jobs/j1")
    assert refused is not None and refused.handler is None and refused.allowed == \
        ("GET", "PATCH")
    for path in ("/", "/jobs/j1/vertices", "/jobs/j1/vertices/7/x", "/job/j1"):
        assert router.match("GET", path) is None
    assert ("GET", "/jobs/:jobid/vertices/:vertexid") in router.patterns()


def _routes() -> Router[Handler]:
    def echo(request: Request) -> tuple[int, Any]:
        return 200, {"params": request.params, "query": request.query, "body": request.body}

    def bad(request: Request) -> tuple[int, Any]:
        raise RestError(400, "give ?n=1")

    def bug(request: Request) -> tuple[int, Any]:
        raise ValueError("secret internals")

    router: Router[Handler] = Router()
    router.add("GET", "/echo/:name", echo)
    router.add("POST", "/echo/:name", echo)
    router.add("GET", "/bad", bad)
    router.add("GET", "/bug", bug)
    return router


def _call(url: str, token: str | None = None, context: ssl.SSLContext | None = None,
          method: str = "GET", data: bytes | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=data, method=method)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


@pytest.fixture
def plain() -> Iterator[str]:
    server = RestServer("127.0.0.1", 0, _routes(), TOKEN, None)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def test_token_is_required_and_errors_are_json(plain: str) -> None:
    for token in (None, "wrong", TOKEN + "x", ""):
        status, body = _call(f"{plain}/echo/a", token)
        assert status == 401 and "security.auth.token" in body["errors"][0]
    status, body = _call(f"{plain}/echo/a?x=1", TOKEN)
    assert (status, body) == (200, {"params": {"name": "a"}, "query": {"x": "1"}, "body": {}})
    status, body = _call(f"{plain}/echo/a", TOKEN, method="POST", data=b'{"k": [1]}')
    assert (status, body["body"]) == (200, {"k": [1]})

    assert _call(f"{plain}/echo/a", TOKEN, method="POST", data=b"{nope")[0] == 400
    assert _call(f"{plain}/echo/a", TOKEN, method="POST", data=b"[1]")[0] == 400
    assert _call(f"{plain}/bad", TOKEN) == (400, {"errors": ["give ?n=1"]})
    status, body = _call(f"{plain}/bug", TOKEN)
    assert status == 500 and "secret internals" not in json.dumps(body)
    assert _call(f"{plain}/v1/echo/b", TOKEN)[1]["params"] == {"name": "b"}
    assert _call(f"{plain}/missing", TOKEN)[0] == 404
    assert _call(f"{plain}/v2/echo/b", TOKEN)[0] == 404
    assert _call(f"{plain}/echo/a", TOKEN, method="DELETE")[0] == 405


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[TlsFiles, TlsFiles]:
    """The cluster's certificates and another CA's."""
    base = tmp_path_factory.mktemp("pki")
    return (generate_cluster_pki(base / "cluster", ["127.0.0.1", "localhost"]),
            generate_cluster_pki(base / "other", ["127.0.0.1", "localhost"]))


def _client(trust: Path, identity: TlsFiles | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(trust))
    if identity is not None:
        context.load_cert_chain(identity.cert, identity.key)
    return context


@pytest.mark.parametrize("token", [None, TOKEN])
def test_tls_accepts_the_cluster_certificate_or_the_token(
        pki: tuple[TlsFiles, TlsFiles], token: str | None) -> None:
    cluster, other = pki
    server = RestServer("127.0.0.1", 0, _routes(), token, cluster)
    url = f"https://127.0.0.1:{server.port}/echo/x"
    try:
        assert _call(url, context=_client(cluster.truststore, cluster))[0] == 200
        status, body = _call(url, context=_client(cluster.truststore, None))
        assert status == 401 and "client certificate" in body["errors"][0]
        assert _call(url, "wrong", context=_client(cluster.truststore, None))[0] == 401
        if token is not None:
            assert _call(url, token, context=_client(cluster.truststore, None))[0] == 200
        # A certificate of another CA fails the handshake: no answer, let alone data.
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            _call(url, context=_client(cluster.truststore, other))
        # Plain HTTP on the HTTPS port gets nothing either.
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            _call(url.replace("https", "http"), token)
    finally:
        server.stop()


def test_an_operation_given_a_known_trigger_id_is_not_started_again() -> None:
    operations = Operations()
    runs: list[int] = []

    def run() -> dict[str, Any]:
        runs.append(1)
        return {"location": f"savepoint-{len(runs)}"}

    try:
        given = "ab" * 16
        assert operations.start("job", "savepoint", run, given) == given
        assert operations.start("job", "savepoint", run, given) == given
        # The same id for another job or another kind is another operation.
        assert operations.start("other", "savepoint", run, given) == given
        fresh = operations.start("job", "savepoint", run)
        assert fresh != given and len(fresh) == 32

        def completed(job: str, trigger: str) -> Any:
            return poll(lambda: (s := operations.status(job, "savepoint", trigger))
                        ["status"]["id"] == "COMPLETED" and s, 10, what="the operation")

        for job, trigger in (("job", given), ("other", given), ("job", fresh)):
            assert completed(job, trigger)["operation"]["location"].startswith("savepoint-")
        assert len(runs) == 3
        with pytest.raises(RestError) as missing:
            operations.status("job", "rescale", given)
        assert missing.value.status == 404
    finally:
        operations.close()

"""Each PyFlink-style program runs twice: as ``python job.py`` would (an in-process
cluster per job) and submitted to a real cluster of daemon processes, as ``weir run job.py``
would (the program unchanged: ``get_execution_environment()`` finds the cluster). The
cluster runs are in ``make chaos``; tests that start clusters of their own run once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(params=["in-process", pytest.param("cluster", marks=pytest.mark.slow)])
def runs_on(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "in-process" or "cluster_factory" in request.fixturenames:
        if request.param == "cluster":
            pytest.skip("starts clusters of its own")
        yield request.param
        return
    from weir.core.config import Configuration
    from weir.core.execution import ExecutionContext, set_execution_context

    cluster = request.getfixturevalue("shared_cluster")
    set_execution_context(ExecutionContext(address=cluster.address, token=None,
                                           configuration=Configuration(),
                                           cluster_dir=str(cluster.dir)))
    try:
        yield request.param
    finally:
        set_execution_context(None)

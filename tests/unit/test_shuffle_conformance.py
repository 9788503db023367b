"""Both shuffle services pass the conformance suite (weir.testing.shuffle_service): the
pipelined one, and the external one with its service running in this process."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from weir.core.config import Configuration
from weir.shuffle.api import ShuffleServiceFactory
from weir.shuffle.external.factory import ExternalShuffleServiceFactory
from weir.shuffle.external.service import ShuffleServiceDaemon
from weir.shuffle.pipelined.factory import PipelinedShuffleServiceFactory
from weir.testing.shuffle_service import (
    SHUFFLE_SERVICE_CHECKS,
    ShuffleCluster,
    shuffle_cluster,
)


@pytest.fixture(params=["pipelined", "external"])
def service(request: pytest.FixtureRequest,
            start_shuffle_daemon: Callable[..., ShuffleServiceDaemon]
            ) -> Iterator[tuple[ShuffleServiceFactory, Configuration]]:
    """(factory, configuration) of each shuffle service in turn."""
    if request.param == "pipelined":
        yield PipelinedShuffleServiceFactory(), Configuration()
        return
    daemon = start_shuffle_daemon()
    yield ExternalShuffleServiceFactory(), Configuration.from_pairs(
        {"shuffle-service.address": daemon.address})


@pytest.mark.parametrize("check", SHUFFLE_SERVICE_CHECKS, ids=lambda check: check.__name__)
def test_conformance(service: tuple[ShuffleServiceFactory, Configuration],
                     check: Callable[[ShuffleCluster], None]) -> None:
    with shuffle_cluster(*service) as cluster:
        check(cluster)

"""A ShuffleServiceFactory for tests: the pipelined service, plus a record of its use.

Every factory call writes a marker file under ``$WEIR_TEST_SHUFFLE_RECORD`` (a directory),
so a test can see that daemons in other processes loaded this class by its dotted path.
"""

from __future__ import annotations

import os
from pathlib import Path

from weir.core.config import Configuration
from weir.shuffle.api import ShuffleEnvironment, ShuffleEnvironmentContext, ShuffleMaster
from weir.shuffle.pipelined.factory import PipelinedShuffleServiceFactory


def _record(what: str) -> None:
    directory = os.environ.get("WEIR_TEST_SHUFFLE_RECORD")
    if directory:
        Path(directory, f"{what}-{os.getpid()}").touch()


class RecordingShuffleServiceFactory(PipelinedShuffleServiceFactory):
    def create_shuffle_master(self, configuration: Configuration) -> ShuffleMaster:
        _record("master")
        return super().create_shuffle_master(configuration)

    def create_shuffle_environment(self,
                                   context: ShuffleEnvironmentContext) -> ShuffleEnvironment:
        _record("environment")
        return super().create_shuffle_environment(context)

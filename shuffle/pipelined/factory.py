"""Factory of the default (pipelined) shuffle service."""

from __future__ import annotations

from weir.core.config import Configuration
from weir.shuffle.api import (
    ShuffleEnvironment,
    ShuffleEnvironmentContext,
    ShuffleMaster,
    ShuffleServiceFactory,
)
from weir.shuffle.pipelined.environment import PipelinedShuffleEnvironment
from weir.shuffle.pipelined.master import PipelinedShuffleMaster


class PipelinedShuffleServiceFactory(ShuffleServiceFactory):
    """The default: ``shuffle-service-factory.class`` =
    ``weir.shuffle.pipelined.factory.PipelinedShuffleServiceFactory``."""

    def create_shuffle_master(self, configuration: Configuration) -> ShuffleMaster:
        return PipelinedShuffleMaster()

    def create_shuffle_environment(self,
                                   context: ShuffleEnvironmentContext) -> ShuffleEnvironment:
        return PipelinedShuffleEnvironment(context)

"""Factory of the default (pipelined) shuffle service."""

from __future__ import annotations

from shuffle.api import (
    ShuffleEnvironment,
    ShuffleEnvironmentContext,
    ShuffleMaster,
    ShuffleServiceFactory,
)
from shuffle.pipelined.environment import PipelinedShuffleEnvironment
from shuffle.pipelined.master import PipelinedShuffleMaster
from weir.config import Configuration


class PipelinedShuffleServiceFactory(ShuffleServiceFactory):
    """The default: ``shuffle-service-factory.class`` =
    ``shuffle.pipelined.factory.PipelinedShuffleServiceFactory``."""

    def create_shuffle_master(self, configuration: Configuration) -> ShuffleMaster:
        return PipelinedShuffleMaster()

    def create_shuffle_environment(self,
                                   context: ShuffleEnvironmentContext) -> ShuffleEnvironment:
        return PipelinedShuffleEnvironment(context)

"""Factory of the external shuffle service: ``shuffle-service-factory.class`` =
``weir.shuffle.external.factory.ExternalShuffleServiceFactory``, with ``shuffle-service.address``
naming a running ``weir shuffle-service``."""

from __future__ import annotations

from weir.core.config import Configuration
from weir.core.errors import ConfigError
from weir.core.secrets import auth_token
from weir.core.tls import TlsFiles
from weir.shuffle.api import (
    ShuffleEnvironment,
    ShuffleEnvironmentContext,
    ShuffleMaster,
    ShuffleServiceFactory,
)
from weir.shuffle.external.environment import ExternalShuffleEnvironment
from weir.shuffle.external.master import ExternalShuffleMaster
from weir.shuffle.options import SHUFFLE_SERVICE_ADDRESS


def service_address(configuration: Configuration) -> str:
    """The configured HOST:PORT of the service; ConfigError naming the key if unset or bad."""
    address = configuration.get(SHUFFLE_SERVICE_ADDRESS)
    key = SHUFFLE_SERVICE_ADDRESS.key
    if not address:
        msg = (f"'{key}' is not set: the external shuffle service needs the HOST:PORT of a "
               f"running `weir shuffle-service` (-D {key}=HOST:PORT)")
        raise ConfigError(msg)
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        msg = f"invalid value for '{key}': {address!r} is not HOST:PORT"
        raise ConfigError(msg)
    return address


class ExternalShuffleServiceFactory(ShuffleServiceFactory):
    """Creates the external shuffle's master and environments; both raise ConfigError
    when ``shuffle-service.address`` is missing."""

    def create_shuffle_master(self, configuration: Configuration) -> ShuffleMaster:
        return ExternalShuffleMaster(service_address(configuration),
                                     auth_token(configuration), TlsFiles.from_conf(configuration))

    def create_shuffle_environment(self,
                                   context: ShuffleEnvironmentContext) -> ShuffleEnvironment:
        return ExternalShuffleEnvironment(context, service_address(context.configuration))

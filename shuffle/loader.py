"""Loads the ShuffleServiceFactory named by ``shuffle-service-factory.class``.

Example:
    >>> from weir.shuffle.loader import load_shuffle_service_factory
    >>> from weir.core.config import Configuration
    >>> type(load_shuffle_service_factory(Configuration())).__name__
    'PipelinedShuffleServiceFactory'
"""

from __future__ import annotations

import importlib

from weir.core.config import Configuration
from weir.core.errors import ConfigError
from weir.shuffle.api import ShuffleServiceFactory
from weir.shuffle.options import SHUFFLE_SERVICE_FACTORY


def load_shuffle_service_factory(configuration: Configuration) -> ShuffleServiceFactory:
    """Instantiate the configured factory; a wrong path is a ConfigError naming it."""
    path = configuration.get(SHUFFLE_SERVICE_FACTORY)
    module_name, _, class_name = path.rpartition(".")
    try:
        factory_class = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as err:
        msg = (f"invalid value for '{SHUFFLE_SERVICE_FACTORY.key}': cannot load {path!r} "
               f"({err}); give the dotted path of a ShuffleServiceFactory class")
        raise ConfigError(msg) from err
    if not (isinstance(factory_class, type) and issubclass(factory_class, ShuffleServiceFactory)):
        msg = (f"invalid value for '{SHUFFLE_SERVICE_FACTORY.key}': {path!r} is not a "
               "ShuffleServiceFactory subclass")
        raise ConfigError(msg)
    return factory_class()

"""Nexmark for weir: the event generator, the queries and their reference results.

The TaskExecutors cannot import this package, so its functions travel by value in the
job graph (cloudpickle), wherever it was imported from.
"""

import sys

import cloudpickle

cloudpickle.register_pickle_by_value(sys.modules[__name__])

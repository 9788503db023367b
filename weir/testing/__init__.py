"""Test utilities shipped with weir, for its own tests and benchmarks and for anyone who
tests jobs, or a plugin, against it (as Flink ships ``flink-test-utils``). Nothing here
depends on pytest.

* :mod:`weir.testing.cluster` — :class:`~weir.testing.cluster.LocalCluster`, a cluster of
  real daemon processes in a directory of its own; :func:`~weir.testing.cluster.weir_cli`,
  :func:`~weir.testing.cluster.poll`.
* :mod:`weir.testing.faults` — faults injected into a local cluster: a daemon SIGKILLed or
  frozen, its embedded S3 server stopped and started again.
* Conformance suites, which every implementation of a pluggable interface must pass:
  :func:`~weir.testing.state_backend.check_state_backend` (keyed state backends),
  :func:`~weir.testing.shuffle_service.check_shuffle_service` (shuffle services, as named by
  ``shuffle-service-factory.class``) and :func:`~weir.testing.job_store.check_job_store`
  (high-availability job stores).

The in-process test doubles of the engine's own unit tests, and the pytest fixtures, are
in the repository's ``tests/support``.

Example:
    >>> from weir.testing import poll
    >>> poll(lambda: 42, timeout=1)
    42
"""

from weir.testing.cluster import ClusterError, LocalCluster, poll, weir_cli

__all__ = ["ClusterError", "LocalCluster", "poll", "weir_cli"]

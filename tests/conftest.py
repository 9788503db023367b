"""Shared fixtures: real local clusters (daemon processes), Spark, a SeaweedFS S3 server,
an external shuffle service, a pipelined data plane, keyed state backends of every kind."""

pytest_plugins = ["tests.support.cluster", "tests.support.spark", "tests.support.seaweedfs",
                  "tests.support.shuffle_service", "tests.support.pipelined_shuffle",
                  "tests.support.state_backends", "tests.support.hosts"]

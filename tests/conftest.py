"""Shared fixtures: real local clusters (daemon processes), in-process mini clusters, Spark,
a SeaweedFS S3 server."""

pytest_plugins = ["tests.support.cluster", "tests.support.spark", "tests.support.seaweedfs",
                  "tests.support.shuffle_service"]

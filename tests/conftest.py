"""Shared fixtures: real local clusters (daemon processes), in-process mini clusters, Spark."""

pytest_plugins = ["tests.support.cluster", "tests.support.spark"]

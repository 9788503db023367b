"""Connectors: Spark-fed sources (and, later, transactional sinks)."""

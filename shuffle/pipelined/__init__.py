"""Default shuffle service: pipelined partitions, in-memory local channels, TCP remote ones."""

"""The JobMaster's REST API: Flink's JobManager REST paths and JSON shapes, served over
HTTP(S) next to the gRPC services (``server``), routed by ``router``, answered by
``handlers`` from the same JobMaster calls the gRPC Dispatcher uses, shaped by the pure
functions of ``mapping``."""

"""The sink operators, one module each: collect (results back to the client), print,
discard, and the exactly-once file sink. Their user-facing sides are the ``Sink``
contract and ``FileSink`` (:mod:`weir.datastream.connectors`) and ``DataStream.print`` /
``execute_and_collect``."""

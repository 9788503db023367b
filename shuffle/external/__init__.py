"""External shuffle service (FLIP-31's motivating case): batch output that outlives its producer.

* :mod:`weir.shuffle.external.service` — the daemon (``weir shuffle-service``) and its
  ``ShuffleService`` gRPC service (``proto/shuffle_service.proto``);
* :mod:`weir.shuffle.external.storage` — how it stores partitions (sorted, spilled runs);
* :mod:`weir.shuffle.external.factory`, :mod:`~weir.shuffle.external.master`,
  :mod:`~weir.shuffle.external.environment` — the FLIP-31 implementation that jobs use when
  ``shuffle-service-factory.class`` is
  ``weir.shuffle.external.factory.ExternalShuffleServiceFactory`` and
  ``shuffle-service.address`` names the service.

Producers stream each result partition to the service and commit it when they finish;
consumers read their subpartition from the service; the JobMaster releases partitions when
the job ends. Meant for bounded jobs (``execution.runtime-mode: BATCH``).
"""

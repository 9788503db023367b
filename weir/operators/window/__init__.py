"""The window operators: the keyed window operator (:mod:`~weir.operators.window.operator`:
any assigner, trigger, evictor and window function, over keyed state) and the vectorised
window aggregations (:mod:`~weir.operators.window.vectorized`). What a program writes —
assigners, triggers, evictors, window functions — is in :mod:`weir.datastream.window`."""

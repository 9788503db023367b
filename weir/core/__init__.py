"""The ground floor: what every other part of weir builds on, importing nothing of weir's
above it (``tests/unit/test_layout.py`` checks it).

Configuration and options, errors, typed ids, records and the other stream elements
(timestamps, watermarks) with their encoding, rows and types, durations, the FLIP-27
source contract, the executor contract, and helpers for RPC, metrics, files, processes and
processing time. The user API names what of these a program uses under PyFlink's paths
(``weir.common``, ``weir.datastream``).
"""

"""The ground floor: what every other part of weir builds on, importing nothing of weir's
above it (``tests/unit/test_layout.py`` checks it).

Configuration and options, errors, typed ids, records and their Arrow encoding, rows and
types, durations, watermarks on the wire, the FLIP-27 source contract, the executor
contract, and helpers for RPC, metrics, files, processes and processing time.
"""

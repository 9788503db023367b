"""Data exchange between tasks behind pluggable FLIP-31 interfaces (see shuffle.api)."""

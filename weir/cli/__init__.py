"""The ``weir`` command line."""

"""Assertions the suites of :mod:`weir.testing` share, without depending on pytest.

Example:
    >>> with raises(ValueError, "bad"):
    ...     raise ValueError("a bad value")
    >>> with raises(ValueError, "bad"):
    ...     pass
    Traceback (most recent call last):
    ...
    AssertionError: ValueError ('bad') was not raised
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator


@contextlib.contextmanager
def raises(kind: type[BaseException], match: str) -> Iterator[None]:
    """Like ``pytest.raises(kind, match=...)``: the block must raise ``kind`` with a message
    in which the regular expression ``match`` is found; raises AssertionError otherwise
    (other exceptions pass through)."""
    try:
        yield
    except kind as err:
        if not re.search(match, str(err)):
            msg = f"{kind.__name__} raised, but {str(err)!r} does not match {match!r}"
            raise AssertionError(msg) from err
    else:
        msg = f"{kind.__name__} ({match!r}) was not raised"
        raise AssertionError(msg)

"""Which frames of a traceback are the user's: everything outside weir's own packages,
Python's standard library and installed dependencies. A failure in a user function is
reported with those frames (file, line, function), not with weir's internals.

Example:
    >>> def parse(line):
    ...     return int(line)
    >>> try:
    ...     parse("x")
    ... except ValueError as err:
    ...     where = user_location(err)
    >>> where.split(" in ", 1)[1]
    'parse: return int(line)'
"""

from __future__ import annotations

import importlib.util
import linecache
import os
import sysconfig
import traceback
from functools import cache

#: weir's packages (the repository's top-level folders are mapped into the namespace).
_PACKAGES = ("weir", "weir.state", "weir.shuffle", "weir.checkpoint", "weir.jobmaster",
             "weir.taskexecutor", "weir.proto")


@cache
def _foreign_roots() -> tuple[str, ...]:
    roots = set()
    for name in _PACKAGES:
        spec = importlib.util.find_spec(name)
        for location in (spec.submodule_search_locations or []) if spec else []:
            roots.add(os.path.realpath(location) + os.sep)
    paths = sysconfig.get_paths()
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        if paths.get(key):
            roots.add(os.path.realpath(paths[key]) + os.sep)
    return tuple(sorted(roots))


#: The file name cloudpickle gives the code of functions it ships by value.
SHIPPED_CODE = "<dynamic-code>"


def _is_users(filename: str) -> bool:
    if filename.startswith("<"):
        # Python's frozen modules are not; code typed or exec'd (<stdin>, a notebook
        # cell, <string>) is.
        return not filename.startswith("<frozen")
    return not os.path.realpath(filename).startswith(_foreign_roots())


def user_frames(err: BaseException, program: str = "") -> list[traceback.FrameSummary]:
    """The frames of ``err``'s traceback in user code, outermost first. Frames of code
    shipped by value (the job program's functions) are named after ``program``, the job
    program's file, with its source line when the file is readable here."""
    frames = []
    for frame in traceback.extract_tb(err.__traceback__):
        if frame.filename == SHIPPED_CODE and program:
            line = linecache.getline(program, frame.lineno or 0).strip()
            frame = traceback.FrameSummary(program, frame.lineno, frame.name,
                                           line=line or None)
        if _is_users(frame.filename):
            frames.append(frame)
    return frames


def user_location(err: BaseException, program: str = "") -> str:
    """Where in user code ``err`` was raised: ``file:line in function: source``, or ""
    when no frame of its traceback is the user's."""
    frames = user_frames(err, program)
    if not frames:
        return ""
    frame = frames[-1]
    source = f": {frame.line.strip()}" if frame.line else ""
    return f"{frame.filename}:{frame.lineno} in {frame.name}{source}"


def user_traceback(err: BaseException, program: str = "") -> str:
    """``err``'s traceback with only the user's frames (all of them when none is the
    user's), as Python prints it."""
    frames = user_frames(err, program)
    if not frames:
        return "".join(traceback.format_exception(err))
    lines = ["Traceback (most recent call last):\n", *traceback.format_list(frames),
             *traceback.format_exception_only(err)]
    return "".join(lines)

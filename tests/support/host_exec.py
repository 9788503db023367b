"""The launcher that puts one process of a test "host" onto that host's own disk.

Run inside a fresh mount namespace (``unshare --mount --propagation private``, as root) as
``python -P -m tests.support.host_exec DISK -- COMMAND ...``: it binds the directory DISK
over ``/tmp``, creates ``/tmp/home`` (HOME) and ``/tmp/work`` (the working directory) on it,
points TMPDIR at ``/tmp``, and replaces itself with COMMAND (so the pid the caller holds
is COMMAND's). Whatever COMMAND writes under /tmp, HOME or its working directory lands on
DISK; what other hosts wrote on theirs it cannot see. The code (the checkout, its .venv)
stays shared, as one image on every machine would be: where it lies under /tmp (a checkout
cloned into a temporary directory), it is bound back at its path on the host's /tmp.

``python -P -m tests.support.host_exec check`` only tries whether this process may mount
(exit 0 if so; one line on stderr and exit 1 if not): ``unshare`` alone can succeed where
the bind mount is refused.

Example:
    >>> disk, inside = split_argv(["/d", "--", "weir", "jobmaster"])
    >>> disk, inside
    ('/d', ['weir', 'jobmaster'])
"""

from __future__ import annotations

import ctypes
import os
import shutil
import sys
from pathlib import Path

#: mount(2) flags (linux/mount.h).
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
#: What a host's disk holds, as its processes see it.
TMP = Path("/tmp")
HOME = TMP / "home"
WORK = TMP / "work"
USAGE = "usage: python -P -m tests.support.host_exec DISK -- COMMAND ...  |  check"


def split_argv(argv: list[str]) -> tuple[str, list[str]]:
    """``DISK -- COMMAND ...`` split into the disk and the command; ValueError otherwise."""
    if len(argv) < 3 or argv[1] != "--":
        raise ValueError(USAGE)
    return argv[0], argv[2:]


def _mount(source: str | None, target: str, flags: int) -> None:
    # os has no mount(2): the C library's, through ctypes.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong,
                           ctypes.c_void_p]
    if libc.mount(source.encode() if source else None, target.encode(), None, flags,
                  None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source or 'none'} on {target}: {os.strerror(err)}")


def code_roots() -> list[Path]:
    """The installed code that lies under /tmp (a checkout cloned there, with its .venv),
    outermost directories only: every host must still see it, at the same path, once its
    disk covers /tmp."""
    candidates = {Path(__file__).resolve().parents[2], Path(sys.prefix).resolve(),
                  Path(sys.base_prefix).resolve()}
    roots: list[Path] = []
    for path in sorted(p for p in candidates if TMP in p.parents):  # parents sort first
        if not any(root == path or root in path.parents for root in roots):
            roots.append(path)
    return roots


def enter_disk(disk: str) -> None:
    """Bind ``disk`` over /tmp in this (already private) mount namespace, make HOME and the
    working directory on it, and move there. Code under /tmp (:func:`code_roots`) is bound
    back at its own path, so the host runs the same installation."""
    # Held open across the mount that hides them: /proc/self/fd/N still names them.
    kept = [(root, os.open(root, os.O_PATH | os.O_DIRECTORY)) for root in code_roots()]
    # `unshare --propagation private` did this already; again in case it was run without,
    # since a mount that propagated back would cover every host's /tmp.
    _mount(None, "/", MS_REC | MS_PRIVATE)
    _mount(disk, str(TMP), MS_BIND)
    for root, fd in kept:
        root.mkdir(parents=True, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", str(root), MS_BIND | MS_REC)
        os.close(fd)
    for directory in (HOME, WORK):
        directory.mkdir(mode=0o700, exist_ok=True)
    os.chdir(WORK)
    os.environ.update({"HOME": str(HOME), "TMPDIR": str(TMP), "PWD": str(WORK)})


def main(argv: list[str]) -> int:
    if argv == ["check"]:
        try:
            _mount(None, "/", MS_REC | MS_PRIVATE)
        except OSError as err:
            print(f"cannot mount a private /tmp: {err}", file=sys.stderr)
            return 1
        return 0
    try:
        disk, command = split_argv(argv)
        enter_disk(disk)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    except OSError as err:
        print(f"cannot give the host its disk {argv[0]} as /tmp: {err}", file=sys.stderr)
        return 1
    program = shutil.which(command[0]) or command[0]
    os.execv(program, command)
    return 1  # not reached: execv replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

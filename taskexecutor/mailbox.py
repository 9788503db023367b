"""The mailbox of a task: how other threads hand work to its thread.

The task thread owns its operators, reader, gates and writers. Other threads (RPC, network,
timers, async operators) never touch them: they put a *mail* — a callable the task thread
runs at its next turn — or only set the wake-up flag.

Example:
    >>> mailbox = Mailbox(capacity=1)
    >>> mailbox.put(lambda: None)
    >>> mailbox.put(lambda: None, timeout=0)
    Traceback (most recent call last):
    ...
    weir.core.errors.MailboxFullError: task mailbox is full
    >>> len(mailbox.drain()), mailbox.wakeup.is_set()
    (1, True)
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable

from weir.core.errors import MailboxFullError

#: Mails a task's mailbox holds before ``put`` waits.
MAILBOX_CAPACITY = 1024


class Mailbox:
    """Bounded queue of mails plus the flag that wakes the task thread."""

    def __init__(self, capacity: int = MAILBOX_CAPACITY) -> None:
        self._mails: deque[Callable[[], None]] = deque()
        self._capacity = capacity
        self._lock = threading.Lock()
        #: Set by :meth:`put` (and by anyone with news for the task); the task thread
        #: clears it before it looks for work and waits on it when it has none.
        self.wakeup = threading.Event()

    def put(self, mail: Callable[[], None], timeout: float = 10.0) -> None:
        """Enqueue ``mail`` and wake the task thread. Any thread but the task's own (which
        would wait for itself). Blocks while the mailbox is full, for at most ``timeout``
        seconds, then raises :class:`~weir.core.errors.MailboxFullError`."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if len(self._mails) < self._capacity:
                    self._mails.append(mail)
                    break
            if time.monotonic() >= deadline:
                msg = "task mailbox is full"
                raise MailboxFullError(msg)
            time.sleep(0.01)
        self.wakeup.set()

    def drain(self) -> list[Callable[[], None]]:
        """Take every mail, oldest first (task thread)."""
        with self._lock:
            mails = list(self._mails)
            self._mails.clear()
        return mails

"""Signals between the parts of a TaskExecutor are WeirErrors, one class per meaning, so
that a caller catches exactly the one it expects and never a stray RuntimeError."""

from __future__ import annotations

import pytest

from weir.core.errors import MailboxFullError, WeirError
from weir.shuffle.external.storage import (
    CorruptPartitionError,
    InvalidRequestError,
    PartitionExistsError,
    ShuffleStorageError,
    UnknownPartitionError,
    WriteAbortedError,
)
from weir.shuffle.pipelined.partition import ProducerFailedError
from weir.shuffle.pipelined.protocol import CorruptFrameError, FrameTooLargeError
from weir.shuffle.pipelined.server import ProtocolError
from weir.taskexecutor.checkpointing import UploadPool, UploadPoolClosedError, UploadPoolFullError
from weir.taskexecutor.mailbox import Mailbox
from weir.taskexecutor.task import TaskCancelledError


def test_a_full_mailbox_raises_its_own_error() -> None:
    mailbox = Mailbox(capacity=1)
    mailbox.put(lambda: None)
    with pytest.raises(MailboxFullError, match="task mailbox is full") as raised:
        mailbox.put(lambda: None, timeout=0.05)
    assert not isinstance(raised.value, RuntimeError)
    assert len(mailbox.drain()) == 1
    mailbox.put(lambda: None, timeout=0)                  # room again


def test_a_full_upload_pool_raises_its_own_error() -> None:
    pool = UploadPool(threads=1, capacity=1)
    try:
        pool._slots.acquire()                             # every slot taken
        with pytest.raises(UploadPoolFullError, match="full") as raised:
            pool.submit(lambda: None, timeout=0.01)
        assert not isinstance(raised.value, RuntimeError)
        pool._slots.release()
    finally:
        pool.shutdown()


def test_a_shut_down_upload_pool_raises_its_own_error() -> None:
    pool = UploadPool(threads=1, capacity=1)
    pool.shutdown()
    with pytest.raises(UploadPoolClosedError, match="shut down") as raised:
        pool.submit(lambda: None, timeout=0.01)
    assert not isinstance(raised.value, RuntimeError)
    assert pool._slots.acquire(timeout=0)                 # the slot was given back


@pytest.mark.parametrize("error", [
    MailboxFullError, UploadPoolFullError, UploadPoolClosedError, TaskCancelledError,
    ProducerFailedError, CorruptFrameError, FrameTooLargeError, ProtocolError,
    ShuffleStorageError, InvalidRequestError, PartitionExistsError, UnknownPartitionError,
    WriteAbortedError, CorruptPartitionError,
])
def test_every_signal_is_a_weir_error_and_none_a_runtime_error(error: type) -> None:
    assert issubclass(error, WeirError) and not issubclass(error, RuntimeError)


def test_a_broken_frame_still_breaks_the_connection() -> None:
    # Readers close a connection on ConnectionError/OSError: a corrupt or oversized frame
    # makes it as unusable as a reset does.
    assert issubclass(CorruptFrameError, ConnectionError)
    assert issubclass(FrameTooLargeError, CorruptFrameError)
    assert not issubclass(ProtocolError, OSError)         # the server refuses it by name

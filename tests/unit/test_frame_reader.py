"""FrameReader: frames cut out of one receive buffer, whatever the chunking of the stream."""

from __future__ import annotations

import socket
import threading

import pytest

from weir.shuffle.pipelined import protocol


def _frames_read(chunks: list[bytes], buffer_size: int,
                 max_frame: int = 1 << 20) -> list[tuple[int, bytes]]:
    left, right = socket.socketpair()

    def send() -> None:
        for chunk in chunks:
            left.sendall(chunk)
        left.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        reader = protocol.FrameReader(right, buffer_size, max_frame)
        got: list[tuple[int, bytes]] = []
        while (frames := reader.read()) is not None:
            got.extend((kind, bytes(payload)) for kind, payload in frames)
        return got
    finally:
        sender.join(timeout=10)
        left.close()
        right.close()


def test_frames_split_across_receives_and_larger_than_the_buffer_arrive_whole():
    frames = [(protocol.ADD_CREDIT, b"a" * 10), (protocol.BUFFER, bytes(range(256)) * 40),
              (protocol.CLOSE, b""), (protocol.ERROR, b"z" * 3000)]
    stream = b"".join(protocol.frame(kind, payload) for kind, payload in frames)
    chunks = [stream[i:i + 7] for i in range(0, len(stream), 7)]  # headers cut in two
    assert _frames_read(chunks, buffer_size=64) == frames


def test_a_stream_that_ends_inside_a_frame_is_an_error():
    stream = protocol.frame(protocol.BUFFER, b"x" * 100)
    with pytest.raises(ConnectionError, match="middle of a frame"):
        _frames_read([stream[:50]], buffer_size=1024)


def test_a_corrupt_length_is_an_error():
    with pytest.raises(ConnectionError, match="corrupt data frame"):
        _frames_read([b"\x00\x00\x00\x00\x03"], buffer_size=1024)


def test_a_frame_over_the_limit_is_refused_before_anything_is_allocated():
    import tracemalloc

    huge = b"\x40\x00\x00\x01\x03" + b"x" * 20     # announces 1 GiB of BUFFER: 25 bytes
    tracemalloc.start()
    try:
        with pytest.raises(protocol.FrameTooLargeError, match="1,073,741,825 bytes"):
            _frames_read([huge], buffer_size=1024, max_frame=protocol.max_data_frame(32768))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
    # a frame exactly at the limit still arrives
    payload = b"y" * (protocol.max_data_frame(32768) - 1)
    assert _frames_read([protocol.frame(protocol.BUFFER, payload)], 1024,
                        protocol.max_data_frame(32768)) == [(protocol.BUFFER, payload)]

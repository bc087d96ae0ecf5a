"""State segment: pure layout, writer/reader, and seqlock consistency across processes."""

from __future__ import annotations

import multiprocessing as mp
import os
import time

import numpy as np
import pytest

from shmq.errors import BrokerGoneError, BrokerNotFoundError, StateLayoutError
from shmq.ring.state import HEADER_BYTES, StateLayout, StateReader, StateView, StateWriter, format_state, read_layout

ctx = mp.get_context("fork")


def test_layout_is_pure_and_aligned():
    layout = StateLayout(topics=4, queues=16, groups=2, members=4, offsets=8, clients=4)
    places = layout.places()
    assert [p for _, _, p in places.values()] == sorted(p for _, _, p in places.values())
    assert all(p % 64 == 0 for _, _, p in places.values())
    buf = bytearray(layout.size)
    format_state(buf, layout, "/var/lib/shmq", 11, 22, 33)
    assert read_layout(buf) == layout
    view = StateView(buf, layout)
    assert view.header["store_dir"][0] == b"/var/lib/shmq"
    view.topics[1] = (1, 6, 2, 3, 5, 0, 0, 0, 0, b"Orders")
    view.queues[5:8]["max_offset"] = [10, 20, 30]
    assert view.topic_slot("Orders") == 1 and view.topic_slot("Nope") is None
    assert list(view.topic_queues(1)["max_offset"]) == [10, 20, 30]
    view.groups[0] = (1, 0, 2, 7, b"cg", 0)
    view.members[:3] = [(1, 0, 99), (1, 0, 42), (0, 0, 5)]
    assert view.group_slot("cg") == 0 and view.group_members(0) == [42, 99]


def test_bad_segments_rejected():
    layout = StateLayout(topics=1, queues=1, groups=1, members=1, offsets=1, clients=1)
    with pytest.raises(StateLayoutError, match="magic"):
        read_layout(bytearray(layout.size))
    with pytest.raises(StateLayoutError, match="shorter"):
        read_layout(bytearray(10))
    buf = bytearray(layout.size)
    format_state(buf, layout, "/x", 1, 2, 3)
    with pytest.raises(StateLayoutError, match="smaller"):
        read_layout(buf[: HEADER_BYTES + 8])
    buf[8] = 9
    with pytest.raises(StateLayoutError, match="version"):
        read_layout(buf)


def test_reader_treats_a_state_being_created_as_no_broker_yet(broker_name):
    """shm_open, ftruncate and the header are three steps; a reader between them sees no broker."""
    import posix_ipc

    from shmq.ring.state import state_name

    shm = posix_ipc.SharedMemory(state_name(broker_name), posix_ipc.O_CREX, size=0)
    try:
        with pytest.raises(BrokerNotFoundError):  # named, not sized
            StateReader.open(broker_name)
        os.ftruncate(shm.fd, StateLayout().size)
        with pytest.raises(BrokerNotFoundError, match="still starting"):  # sized, header not yet written
            StateReader.open(broker_name)
    finally:
        shm.close_fd()
        shm.unlink()


def test_reader_sees_writer(broker_name):
    with pytest.raises(BrokerNotFoundError):
        StateReader.open(broker_name)
    writer = StateWriter.create(broker_name, "/tmp/store", 5, 6)
    try:
        reader = StateReader.open(broker_name)
        seq = reader.seq
        with writer.update() as view:
            view.topics[0] = (1, 6, 4, 4, 0, 0, 0, 0, 0, b"T")
            assert reader.seq == seq + 1
        assert reader.seq == seq + 2
        assert reader.read(lambda v: v.topic_slot("T")) == 0
        snap = reader.snapshot()
        assert snap.topic_slot("T") == 0 and int(snap.header["control_key"][0]) == 5
        with pytest.raises(ValueError):
            reader.view.topics["perm"][0] = 1
        reader.close()
    finally:
        writer.close()
        writer.unlink()


def test_stuck_writer_reads_as_broker_gone(broker_name):
    writer = StateWriter.create(broker_name, "/tmp/store", 5, 6, StateLayout(topics=1, queues=1))
    reader = StateReader.open(broker_name)
    try:
        updating = writer.update()
        updating.__enter__()
        with pytest.raises(BrokerGoneError):
            reader.read(lambda v: 1, timeout=0.05)
        updating.__exit__(None, None, None)
        assert reader.read(lambda v: 1) == 1
    finally:
        reader.close()
        writer.close()
        writer.unlink()


def _write_forever(broker: str, ready, stop) -> None:
    writer = StateWriter(*_attach_writer(broker))
    ready.set()
    k = 0
    while not stop.is_set():
        k += 1
        with writer.update() as view:
            for field in ("msgs_in", "bytes_in", "msgs_out", "bytes_out"):
                view.topics[field] = k
            view.queues["min_offset"] = k
            view.queues["max_offset"] = k
        time.sleep(0.0001)  # a broker publishes once per pass, never back to back
    writer.close()


def _attach_writer(broker):
    from shmq.ring.shm import Segment
    from shmq.ring.state import read_layout, state_name

    segment = Segment.open(state_name(broker))
    return segment, read_layout(segment.buf)


def test_seqlock_readers_never_see_torn_tables(broker_name):
    layout = StateLayout(topics=64, queues=1024)
    writer = StateWriter.create(broker_name, "/tmp/store", 1, 2, layout)
    writer.close()
    ready, stop = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_write_forever, args=(broker_name, ready, stop))
    proc.start()
    reader = StateReader.open(broker_name)
    try:
        assert ready.wait(10)
        seen = set()
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            snap = reader.read(
                lambda v: (
                    v.topics[["msgs_in", "bytes_in", "msgs_out", "bytes_out"]].copy(),
                    v.queues[["min_offset", "max_offset"]].copy(),
                )
            )
            values = np.concatenate(
                [snap[0][f].astype(np.int64) for f in snap[0].dtype.names] + [snap[1][f] for f in snap[1].dtype.names]
            )
            assert (values == values[0]).all(), "torn read under the seqlock"
            seen.add(int(values[0]))
        assert len(seen) > 3
    finally:
        stop.set()
        proc.join(10)
        reader.close()
        writer.unlink()
    assert proc.exitcode == 0


def _format_again_and_again(broker: str, rounds: int) -> None:
    """A broker starting over and over: create the segment, write its header (magic last), remove it."""
    layout = StateLayout(topics=4, queues=16, groups=2, members=4, offsets=8, clients=4)
    for _ in range(rounds):
        w = StateWriter.create(broker, "/x", 1, 2, layout=layout)
        w.close()
        w.unlink()
    os._exit(0)


def test_a_reader_racing_a_starting_broker_sees_it_starting_never_a_wrong_magic(broker_name):
    """The header may be written between the reader's look at the magic and its second look:
    that is a broker that just finished starting (a wrong magic was raised once in 56 restarts)."""
    writer = ctx.Process(target=_format_again_and_again, args=(broker_name, 10000))
    writer.start()
    seen = {"starting": 0, "open": 0, "none": 0}
    try:
        while writer.is_alive():
            try:
                StateReader.open(broker_name).close()
                seen["open"] += 1
            except BrokerNotFoundError as e:
                seen["starting" if "starting" in str(e) else "none"] += 1
    finally:
        writer.join(60)
    assert writer.exitcode == 0
    assert seen["starting"] and seen["open"], seen

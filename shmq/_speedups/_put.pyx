# cython: language_level=3
"""Compiled twins of the broker's send path (frame layout: docs/FORMAT.md section 11).

``decode_send_batch`` is ``shmq.codec.frames.decode_send_batch``: the SEND_BATCH frame a
producer wrote into its request ring, decoded into the store's ``EncodedBatch``. The reference
spends ~10 us per frame of 100 records on a struct unpack, a numpy copy-and-cast of the four
arrays and five small numpy reductions for the checks (measured: 0.1 us of the broker's CPU per
100 B message of the batch load); here it is one copy of the frame and one pass per check.

The frame comes from shared memory a client can write at any time: the whole payload is copied
first and every field is read from that private copy, each length checked against the copy's
size before anything is read past the fixed header. Errors are the reference's, same type
(CorruptFrameError) and text, in the same order.
"""
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

import numpy as np

cdef extern from *:
    """
    #if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
    #error "shmq._speedups._put reads little-endian frames with memcpy: little-endian hosts only"
    #endif
    enum { SHMQ_BATCH_HEADER = 40, SHMQ_MAX_TOPIC_LENGTH = 127 };
    """
    enum:
        BATCH_HEADER "SHMQ_BATCH_HEADER"
        MAX_TOPIC_LENGTH "SHMQ_MAX_TOPIC_LENGTH"

LAYOUT = {"_BATCH.size": BATCH_HEADER, "MAX_TOPIC_LENGTH": MAX_TOPIC_LENGTH}
"""The constants compiled in, checked against the Python reference by the tests."""

cdef object _SendBatch = None
cdef object _EncodedBatch = None
cdef object _Corrupt = None


cdef int _bind() except -1:
    """The result and error classes, looked up once (shmq.codec.frames imports this module)."""
    global _SendBatch, _EncodedBatch, _Corrupt
    from shmq.codec.frames import SendBatch
    from shmq.codec.record import EncodedBatch
    from shmq.errors import CorruptFrameError
    _SendBatch, _EncodedBatch, _Corrupt = SendBatch, EncodedBatch, CorruptFrameError
    return 0


def decode_send_batch(payload):
    """A SEND_BATCH payload as ``SendBatch``; raises CorruptFrameError as the reference does."""
    if _SendBatch is None:
        _bind()
    cdef bytes data = bytes(payload)  # the private copy every field is read from
    cdef const char* p = PyBytes_AS_STRING(data)
    cdef Py_ssize_t size = PyBytes_GET_SIZE(data)
    cdef uint64_t req_id
    cdef int64_t enq
    cdef int32_t qid
    cdef uint32_t flags, count, n, blen
    cdef uint16_t t
    if size < BATCH_HEADER:
        raise _Corrupt("SEND_BATCH frame shorter than its header")
    memcpy(&req_id, p, 8)
    memcpy(&enq, p + 8, 8)
    memcpy(&qid, p + 16, 4)
    memcpy(&flags, p + 20, 4)
    memcpy(&t, p + 24, 2)
    memcpy(&count, p + 28, 4)
    memcpy(&n, p + 32, 4)
    memcpy(&blen, p + 36, 4)
    if t == 0 or t > MAX_TOPIC_LENGTH or count == 0:
        raise _Corrupt(f"SEND_BATCH topic length {t}, count {count}")
    cdef int64_t at = BATCH_HEADER + ((t + 7) & ~7)
    cdef int64_t expected = at + 16 * <int64_t>count + 16 * <int64_t>n + blen
    if size != expected:
        raise _Corrupt(f"SEND_BATCH frame is {size} bytes, its fields say {expected}")
    try:
        topic = data[BATCH_HEADER:BATCH_HEADER + t].decode("ascii")
    except UnicodeDecodeError:
        raise _Corrupt("SEND_BATCH topic is not ASCII") from None
    cdef Py_ssize_t words = 2 * <Py_ssize_t>count + 2 * <Py_ssize_t>n
    arrays = np.empty(words, np.int64)
    cdef int64_t[::1] view = arrays
    cdef int64_t* a = &view[0]  # count >= 1: at least two words
    memcpy(a, p + at, words * 8)
    cdef int64_t* keyrec = a + 2 * <Py_ssize_t>count + n
    cdef Py_ssize_t i
    for i in range(n):
        if keyrec[i] < 0 or keyrec[i] >= count:
            raise _Corrupt("SEND_BATCH key record numbers out of range")
    # np.diff wraps around on int64: the same wrapping subtraction, so the same frames pass
    if a[0] != 0 or a[count - 1] >= blen:
        raise _Corrupt("SEND_BATCH record starts do not fit the records")
    for i in range(1, count):
        if <int64_t>(<uint64_t>a[i] - <uint64_t>a[i - 1]) <= 0:
            raise _Corrupt("SEND_BATCH record starts do not fit the records")
    c, k = <Py_ssize_t>count, <Py_ssize_t>n
    body = memoryview(data)[at + 8 * words:]
    return _SendBatch(req_id, enq, qid, flags, topic,
                      _EncodedBatch(body, arrays[:c], arrays[c:2 * c], arrays[2 * c:2 * c + k], arrays[2 * c + k:]))


def send_batch_arrays(payload, Py_ssize_t topic_len, Py_ssize_t count, Py_ssize_t n):
    """See ``shmq.codec.frames.send_batch_arrays``: one copy of the four columns, then the
    decoder's checks on that copy (the ring may change under the broker)."""
    cdef const unsigned char[::1] src
    cdef int64_t[::1] view
    cdef int64_t* a
    cdef Py_ssize_t at = BATCH_HEADER + ((topic_len + 7) & ~7), words = 2 * (count + n), i, blen
    try:
        src = payload
    except (ValueError, TypeError, BufferError):
        return _reference_arrays(payload, topic_len, count, n)
    if count < 1 or n < 0 or topic_len < 0 or src.shape[0] < at + 8 * words + 1:
        return None
    blen = src.shape[0] - at - 8 * words
    arrays = np.empty(words, np.int64)
    view = arrays
    a = &view[0]
    memcpy(a, &src[at], words * 8)
    for i in range(n):
        if a[2 * count + n + i] < 0 or a[2 * count + n + i] >= count:
            return None
    if a[0] != 0 or a[count - 1] >= blen:
        return None
    for i in range(1, count):  # np.diff's wrapping subtraction, as in decode_send_batch
        if <int64_t>(<uint64_t>a[i] - <uint64_t>a[i - 1]) <= 0:
            return None
    return arrays


cdef object _reference_arrays(payload, Py_ssize_t topic_len, Py_ssize_t count, Py_ssize_t n):
    from shmq import _speedups
    return _speedups.reference("_put", "send_batch_arrays")(payload, topic_len, count, n)

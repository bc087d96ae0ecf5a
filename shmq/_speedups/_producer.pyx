# cython: language_level=3
"""Compiled twin of the producer's batch encoder (shmq.client.producer.encoder.pack_uniform).

A batch whose messages share topic, tags and keys and carry no user properties (every
``MessageBatch``, and what auto_batch gathers from ``send_async``/``send_oneway``) differs per
record only in body, BODYCRC and UNIQ_KEY. The reference builds it from numpy columns and one
``bytes.join`` (~0.6 us a message, the producer's largest cost in a profile of the batch run);
here one pass writes each record's header, body and tail into the output buffer, with the body
CRC and the UNIQ_KEY's index hash computed as it goes, the GIL released. Layout: docs/FORMAT.md
section 3; UNIQ_KEY: shmq.codec.ids.UniqKeyGenerator.
"""
import numpy as np

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from shmq._speedups._crc cimport crc32

cdef extern from *:
    """
    #define SHMQ_MESSAGE_MAGIC 0xDAA320A7u
    enum { SHMQ_OFF_BODYCRC = 8, SHMQ_OFF_FLAG = 16, SHMQ_OFF_SYSFLAG = 36, SHMQ_OFF_BORNTIMESTAMP = 40,
           SHMQ_OFF_BORNHOST = 48, SHMQ_OFF_BODYLEN = 84, SHMQ_OFF_BODY = 88,
           SHMQ_UNIQ_LEN = 32, SHMQ_UNIQ_COUNTER = 24 };
    """
    const uint32_t MESSAGE_MAGIC "SHMQ_MESSAGE_MAGIC"
    enum:
        OFF_BODYCRC "SHMQ_OFF_BODYCRC"
        OFF_FLAG "SHMQ_OFF_FLAG"
        OFF_SYSFLAG "SHMQ_OFF_SYSFLAG"
        OFF_BORNTIMESTAMP "SHMQ_OFF_BORNTIMESTAMP"
        OFF_BORNHOST "SHMQ_OFF_BORNHOST"
        OFF_BODYLEN "SHMQ_OFF_BODYLEN"
        OFF_BODY "SHMQ_OFF_BODY"
        UNIQ_LEN "SHMQ_UNIQ_LEN"
        UNIQ_COUNTER "SHMQ_UNIQ_COUNTER"

LAYOUT = {"MESSAGE_MAGIC": MESSAGE_MAGIC, "OFF_BODYCRC": OFF_BODYCRC, "OFF_FLAG": OFF_FLAG,
          "OFF_SYSFLAG": OFF_SYSFLAG, "OFF_BORNTIMESTAMP": OFF_BORNTIMESTAMP, "OFF_BORNHOST": OFF_BORNHOST,
          "OFF_BODYLEN": OFF_BODYLEN, "OFF_BODY": OFF_BODY, "UNIQ_LEN": UNIQ_LEN, "UNIQ_COUNTER": UNIQ_COUNTER}
"""The constants compiled in, checked against shmq.codec.record and the encoder by the tests."""

cdef const char* _HEX = b"0123456789ABCDEF"


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef inline void _put64(uint8_t* p, uint64_t v) noexcept nogil:
    _put32(p, <uint32_t>(v >> 32))
    _put32(p + 4, <uint32_t>v)


cdef bytes _as_bytes(b):
    """A body that is not ``bytes`` copied (what the reference's join copies); zlib's error for a non-buffer."""
    try:
        return bytes(memoryview(b))
    except TypeError:
        raise TypeError(f"a bytes-like object is required, not '{type(b).__name__}'") from None


def pack_uniform(bytes topic_b, bodies, bytes head, bytes end, bytes prefix, uint64_t first, flags, sysflags,
                 born_timestamp, born_host):
    """(records, starts, UNIQ_KEYs as S32, UNIQ_KEY index hashes): see the reference."""
    cdef Py_ssize_t n = len(bodies)
    cdef Py_ssize_t i, total = 0, size, head_len = len(head), end_len = len(end)
    cdef Py_ssize_t tail_len = head_len + UNIQ_LEN + end_len  # head: topic part, properties length, up to the UNIQ_KEY
    if len(prefix) != UNIQ_COUNTER:
        raise ValueError(f"a UNIQ_KEY prefix is {UNIQ_COUNTER} hex digits, got {len(prefix)}")
    keep = [b if type(b) is bytes else _as_bytes(b) for b in bodies]  # a bytearray cannot change size under us
    # the header's integer fields take the values the reference's numpy assignment would (same casts, same errors)
    fl = np.zeros(n, np.int32)
    fl[...] = flags
    sf = np.zeros(n, np.int32)
    if sysflags is not None:
        sf[...] = sysflags
    stamps = np.array([born_timestamp, born_host], np.int64)
    cdef const int32_t[::1] flv = fl
    cdef const int32_t[::1] sfv = sf
    cdef int64_t born_ts = stamps[0], host = stamps[1]
    cdef const uint8_t** ptrs = <const uint8_t**>PyMem_Malloc(max(n, 1) * sizeof(uint8_t*))
    cdef Py_ssize_t* lens = <Py_ssize_t*>PyMem_Malloc(max(n, 1) * sizeof(Py_ssize_t))
    if ptrs == NULL or lens == NULL:
        PyMem_Free(ptrs)
        PyMem_Free(lens)
        raise MemoryError()
    try:
        for i in range(n):
            b = keep[i]
            ptrs[i] = <const uint8_t*>PyBytes_AS_STRING(b)
            lens[i] = PyBytes_GET_SIZE(b)
            size = OFF_BODY + lens[i] + tail_len
            if size > 0x7FFFFFFF:
                raise OverflowError(f"record {i} would be {size} bytes")
            total += size
        buf = PyBytes_FromStringAndSize(NULL, total)
        starts = np.empty(n, np.int64)
        uniq = np.empty(n, "S32")
        hashes = np.empty(n, np.int64)
        _fill(<uint8_t*>PyBytes_AS_STRING(buf), ptrs, lens, n, <const uint8_t*>PyBytes_AS_STRING(topic_b),
              len(topic_b), <const uint8_t*>PyBytes_AS_STRING(head), head_len,
              <const uint8_t*>PyBytes_AS_STRING(end), end_len, <const uint8_t*>PyBytes_AS_STRING(prefix), first,
              &flv[0] if n else NULL, &sfv[0] if n else NULL, born_ts, host, starts, uniq.view(np.uint8), hashes)
    finally:
        PyMem_Free(ptrs)
        PyMem_Free(lens)
    return buf, starts, uniq, hashes


cdef void _fill(uint8_t* out, const uint8_t** bodies, const Py_ssize_t* lens, Py_ssize_t n,
                const uint8_t* topic, Py_ssize_t topic_len, const uint8_t* head, Py_ssize_t head_len,
                const uint8_t* end, Py_ssize_t end_len, const uint8_t* prefix, uint64_t first,
                const int32_t* flags, const int32_t* sysflags, int64_t born_ts, int64_t host,
                int64_t[::1] starts, uint8_t[::1] uniq, int64_t[::1] hashes):
    """Each record in turn: header (broker-owned fields zero), body, tail with its UNIQ_KEY."""
    cdef Py_ssize_t i, pos = 0, size
    cdef uint8_t* r
    cdef uint8_t* u
    cdef uint32_t counter
    cdef int j
    cdef unsigned long seed = 0
    seed = crc32(seed, topic, topic_len)
    seed = crc32(seed, <const unsigned char*>b"#", 1)
    seed = crc32(seed, prefix, UNIQ_COUNTER)
    with nogil:
        for i in range(n):
            size = OFF_BODY + lens[i] + head_len + UNIQ_LEN + end_len
            r = out + pos
            starts[i] = pos
            memset(r, 0, OFF_BODY)
            _put32(r, <uint32_t>size)
            _put32(r + 4, MESSAGE_MAGIC)
            _put32(r + OFF_BODYCRC, crc32(0, bodies[i], lens[i]) & 0x7FFFFFFFu)
            _put32(r + OFF_FLAG, <uint32_t>flags[i])
            _put32(r + OFF_SYSFLAG, <uint32_t>sysflags[i])
            _put64(r + OFF_BORNTIMESTAMP, <uint64_t>born_ts)
            _put64(r + OFF_BORNHOST, <uint64_t>host)
            _put32(r + OFF_BODYLEN, <uint32_t>lens[i])
            memcpy(r + OFF_BODY, bodies[i], lens[i])
            r += OFF_BODY + lens[i]
            memcpy(r, head, head_len)
            u = r + head_len
            memcpy(u, prefix, UNIQ_COUNTER)
            counter = <uint32_t>(first + <uint64_t>i)  # the low 32 bits, as the reference's & 0xFFFFFFFF
            for j in range(8):
                u[UNIQ_COUNTER + j] = _HEX[(counter >> (28 - 4 * j)) & 0xF]
            memcpy(&uniq[i * UNIQ_LEN], u, UNIQ_LEN)
            hashes[i] = <int64_t>(crc32(seed, u + UNIQ_COUNTER, UNIQ_LEN - UNIQ_COUNTER) & 0x7FFFFFFFul)
            memcpy(u + UNIQ_LEN, end, end_len)
            pos += size


def uniform_columns(msgs, message_type, Py_ssize_t limit):
    """(topic, bodies, tags, keys, flags) of a batch pack_uniform can encode; None for any other: see the reference."""
    cdef Py_ssize_t i, n = len(msgs)
    cdef object m, topic, tags, keys, body, flag
    if n == 0:
        return None
    first = msgs[0]
    if type(first) is not message_type:
        return None
    topic, tags, keys = first.topic, first.tags, first.keys
    if not (tags is None or type(tags) is str) or not (keys is None or type(keys) is str):
        return None
    bodies = [None] * n
    flags = np.empty(n, np.int64)
    cdef int64_t[::1] fv = flags
    for i in range(n):
        m = msgs[i]
        if type(m) is not message_type:
            return None
        body = m.body
        if type(body) is not bytes or len(<bytes>body) > limit:
            return None
        t = m.topic
        if t is not topic and t != topic:
            return None
        t = m.tags
        if t is not tags and t != tags:
            return None
        t = m.keys
        if t is not keys and t != keys:
            return None
        if m.properties or m.delay_level or m.deliver_at is not None or m.delay is not None:
            return None
        flag = m.flag
        if type(flag) is not int or not -2**63 <= flag < 2**63:
            return None
        fv[i] = flag
        bodies[i] = body
    return topic, bodies, tags, keys, flags


def bodies_fit(bodies, Py_ssize_t limit):
    """Whether every body is exactly bytes, bytearray or memoryview and none is longer than ``limit``: see the reference."""
    cdef Py_ssize_t i, n = len(bodies), size
    cdef object b
    cdef type t
    for i in range(n):
        b = bodies[i]
        t = type(b)
        if t is bytes:
            size = PyBytes_GET_SIZE(b)
        elif t is bytearray or t is memoryview:
            size = len(b)
        else:
            return False
        if size > limit:
            return False
    return True

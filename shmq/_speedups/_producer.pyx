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
from libc.string cimport memcpy

from shmq._speedups._crc cimport crc32
from shmq._speedups._layout cimport (FIXED_OVERHEAD, MESSAGE_MAGIC, OFF_BODY, OFF_BODYCRC, OFF_BODYLEN, OFF_BORNHOST,
                                    OFF_BORNTIMESTAMP, OFF_FLAG, OFF_SYSFLAG, UNIQ_COUNTER, UNIQ_LEN,
                                    put_record_head, put_uniq_counter)

cdef enum:
    SEND_HEADER_BYTES = 40  # shmq.codec.frames' SEND header "<QqiIqHHI"

LAYOUT = {"SEND_HEADER_BYTES": SEND_HEADER_BYTES, "FIXED_OVERHEAD": FIXED_OVERHEAD, "MESSAGE_MAGIC": MESSAGE_MAGIC, "OFF_BODYCRC": OFF_BODYCRC, "OFF_FLAG": OFF_FLAG,
          "OFF_SYSFLAG": OFF_SYSFLAG, "OFF_BORNTIMESTAMP": OFF_BORNTIMESTAMP, "OFF_BORNHOST": OFF_BORNHOST,
          "OFF_BODYLEN": OFF_BODYLEN, "OFF_BODY": OFF_BODY, "UNIQ_LEN": UNIQ_LEN, "UNIQ_COUNTER": UNIQ_COUNTER}
"""The constants compiled in, checked against shmq.codec.record and the encoder by the tests."""


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
    cdef unsigned long seed = 0
    seed = crc32(seed, topic, topic_len)
    seed = crc32(seed, <const unsigned char*>b"#", 1)
    seed = crc32(seed, prefix, UNIQ_COUNTER)
    with nogil:
        for i in range(n):
            size = OFF_BODY + lens[i] + head_len + UNIQ_LEN + end_len
            r = out + pos
            starts[i] = pos
            r = put_record_head(r, size, crc32(0, bodies[i], lens[i]) & 0x7FFFFFFFu, <uint32_t>flags[i],
                                <uint32_t>sysflags[i], born_ts, host, bodies[i], lens[i])
            memcpy(r, head, head_len)
            u = r + head_len
            memcpy(u, prefix, UNIQ_COUNTER)
            put_uniq_counter(u, first + <uint64_t>i)
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


cdef void _put_le32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = v & 0xFF
    p[1] = (v >> 8) & 0xFF
    p[2] = (v >> 16) & 0xFF
    p[3] = (v >> 24) & 0xFF


cdef void _put_le64(uint8_t* p, uint64_t v) noexcept nogil:
    _put_le32(p, <uint32_t>(v & 0xFFFFFFFFu))
    _put_le32(p + 4, <uint32_t>(v >> 32))


def pack_send(buf, req_id, enqueue_ns, queue_id, flags, tags_code, topic_b, key_hashes, body, props_b, crc, flag,
              sysflag, born_timestamp, born_host):
    """shmq.codec.frames.pack_send in one pass. Anything the fast path does not take as it is (a
    value out of its field's range, a buffer too short or read-only, a body that is not a
    contiguous byte buffer) goes to the reference, which then writes it or raises its error."""
    cdef uint8_t[::1] out
    cdef const uint8_t[::1] b
    cdef uint64_t rid
    cdef int64_t ens, tc, bts, bh
    cdef int32_t qid, c, fl, sf
    cdef uint32_t frame_flags
    cdef Py_ssize_t t, n, i, p, body_len, props_len, record_len, need
    cdef uint8_t* r
    try:
        if type(topic_b) is not bytes or type(props_b) is not bytes:
            raise TypeError
        for v in (req_id, enqueue_ns, queue_id, flags, tags_code, crc, flag, sysflag, born_timestamp, born_host):
            if type(v) is not int:  # a C conversion would take a float's or an __int__'s value
                raise TypeError
        out = buf
        b = body
        rid = req_id
        ens = enqueue_ns
        qid = queue_id
        frame_flags = flags
        tc = tags_code
        c = crc
        fl = flag
        sf = sysflag
        bts = born_timestamp
        bh = born_host
        n = len(key_hashes)
        t = len(topic_b)
        body_len = b.shape[0]
        props_len = len(props_b)
        record_len = FIXED_OVERHEAD + body_len + t + props_len
        need = SEND_HEADER_BYTES + ((t + 7) & ~7) + 8 * n + record_len
        if t > 0xFF or n > 0xFFFF or props_len > 0xFFFF or record_len > 0x7FFFFFFF or out.shape[0] < need:
            raise ValueError
        p = SEND_HEADER_BYTES + ((t + 7) & ~7)
        for i in range(n):
            k = key_hashes[i]
            if type(k) is not int:
                raise TypeError
            _put_le64(&out[p + 8 * i], <uint64_t>(<int64_t>k))
    except Exception:
        return _reference()(buf, req_id, enqueue_ns, queue_id, flags, tags_code, topic_b, key_hashes, body,
                                    props_b, crc, flag, sysflag, born_timestamp, born_host)
    _put_le64(&out[0], rid)
    _put_le64(&out[8], <uint64_t>ens)
    _put_le32(&out[16], <uint32_t>qid)
    _put_le32(&out[20], frame_flags)
    _put_le64(&out[24], <uint64_t>tc)
    out[32] = <uint8_t>t
    out[33] = 0
    out[34] = n & 0xFF
    out[35] = (n >> 8) & 0xFF
    _put_le32(&out[36], <uint32_t>record_len)
    memcpy(&out[SEND_HEADER_BYTES], PyBytes_AS_STRING(topic_b), t)  # its padding left as it is, as the reference
    p = SEND_HEADER_BYTES + ((t + 7) & ~7) + 8 * n
    r = put_record_head(&out[p], record_len, <uint32_t>c, <uint32_t>fl, <uint32_t>sf, bts, bh,
                        &b[0] if body_len else <const uint8_t*>b"", body_len)
    r[0] = <uint8_t>t
    memcpy(r + 1, PyBytes_AS_STRING(topic_b), t)
    r += 1 + t
    r[0] = (props_len >> 8) & 0xFF
    r[1] = props_len & 0xFF
    memcpy(r + 2, PyBytes_AS_STRING(props_b), props_len)


cdef object _reference_pack_send = None


cdef object _reference():
    """The Python pack_send (registered by shmq.codec.frames when it picked this twin)."""
    global _reference_pack_send
    if _reference_pack_send is None:
        from shmq import _speedups
        _reference_pack_send = _speedups.reference("_producer", "pack_send")
    return _reference_pack_send

# cython: language_level=3
"""Compiled twin of the producer's SEND_MULTI encoder (shmq.client.producer.encoder.encode_mixed).

The accumulator's small groups of many topics (10,000 queues of 1,250 topics: ~one record per
topic per frame) go out as SEND_MULTI, encoded by ``encode_mixed``. Its reference runs a Python
loop per record (tail bytes, the UNIQ_KEY's index hash, list appends) and gathers seven
attributes per message through tuples: ~1.2 us a record, the producer's largest cost at 10,000
queues. Here one C pass reads each message's fields, a second writes the records (header, body,
tail with the UNIQ_KEY) with their body CRCs and UNIQ_KEY hashes, the GIL released. What differs
per distinct value, not per record, stays in the reference's own Python helpers (topic check,
tail parts, tag hash, key hashes), so the bytes are the reference's by construction.

Only the usual messages take this path: exactly ``Message``, ``bytes`` bodies within the
encoder's limit (no compression), tags and keys ``str`` or None, no user properties, int flags
in int64 range. Anything else, and any input the reference would refuse, is handed to the
reference unchanged before anything is taken (UNIQ_KEYs included), so errors are the
reference's. Layout: docs/FORMAT.md section 3.
"""
import numpy as np

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

from shmq import _speedups

from shmq._speedups._crc cimport crc32

cdef extern from *:
    """
    #define SHMQ_MIXED_MAGIC 0xDAA320A7u
    enum { SHMQ_MIXED_OFF_BODYCRC = 8, SHMQ_MIXED_OFF_FLAG = 16, SHMQ_MIXED_OFF_BORNTIMESTAMP = 40,
           SHMQ_MIXED_OFF_BORNHOST = 48, SHMQ_MIXED_OFF_BODYLEN = 84, SHMQ_MIXED_OFF_BODY = 88,
           SHMQ_MIXED_UNIQ_LEN = 32, SHMQ_MIXED_UNIQ_COUNTER = 24 };
    """
    const uint32_t MESSAGE_MAGIC "SHMQ_MIXED_MAGIC"
    enum:
        OFF_BODYCRC "SHMQ_MIXED_OFF_BODYCRC"
        OFF_FLAG "SHMQ_MIXED_OFF_FLAG"
        OFF_BORNTIMESTAMP "SHMQ_MIXED_OFF_BORNTIMESTAMP"
        OFF_BORNHOST "SHMQ_MIXED_OFF_BORNHOST"
        OFF_BODYLEN "SHMQ_MIXED_OFF_BODYLEN"
        OFF_BODY "SHMQ_MIXED_OFF_BODY"
        UNIQ_LEN "SHMQ_MIXED_UNIQ_LEN"
        UNIQ_COUNTER "SHMQ_MIXED_UNIQ_COUNTER"

LAYOUT = {"MESSAGE_MAGIC": MESSAGE_MAGIC, "OFF_BODYCRC": OFF_BODYCRC, "OFF_FLAG": OFF_FLAG,
          "OFF_BORNTIMESTAMP": OFF_BORNTIMESTAMP, "OFF_BORNHOST": OFF_BORNHOST, "OFF_BODYLEN": OFF_BODYLEN,
          "OFF_BODY": OFF_BODY, "UNIQ_LEN": UNIQ_LEN, "UNIQ_COUNTER": UNIQ_COUNTER}
"""The constants compiled in, checked against shmq.codec.record and the encoder by the tests."""

cdef const char* _HEX = b"0123456789ABCDEF"
cdef dict _ref = {}  # the encoder module's names, looked up once (it imports this module)


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef inline void _put64(uint8_t* p, uint64_t v) noexcept nogil:
    _put32(p, <uint32_t>(v >> 32))
    _put32(p + 4, <uint32_t>v)


cdef inline bint _int64(object v):
    return type(v) is int and -0x8000000000000000 <= v <= 0x7FFFFFFFFFFFFFFF


cdef dict _names():
    if not _ref:
        from shmq.client.producer import encoder
        from shmq.codec import record
        from shmq.model.message import Message
        _ref.update(Message=Message, check_topic=record.check_topic, tags_code=record.tags_code,
                    EncodedBatch=record.EncodedBatch, EncodedMixed=encoder.EncodedMixed,
                    tail_parts=encoder._tail_parts, keys_hashes=encoder._keys_hashes,
                    reference=_speedups.reference("_mixed", "encode_mixed"))
    return _ref


cdef struct Row:
    const uint8_t* body
    Py_ssize_t body_len
    const uint8_t* topic
    Py_ssize_t topic_len
    const uint8_t* head
    Py_ssize_t head_len
    const uint8_t* end
    Py_ssize_t end_len
    int32_t flag


def encode_mixed(encoder, msgs, born_timestamp, born_host):
    """Checked messages of any topics as one SEND_MULTI batch: see the reference."""
    cdef dict ref = _names()
    cdef Py_ssize_t i, n = len(msgs)
    cdef Py_ssize_t limit
    cdef object m, body, topic, tags, keys, props, flag
    message_type = ref["Message"]
    if n == 0 or not _int64(born_timestamp) or not _int64(born_host):
        return ref["reference"](encoder, msgs, born_timestamp, born_host)
    limit = encoder._limit()
    # pass 1, no side effects: every message is one this path encodes exactly as the reference
    cols = [None] * n
    for i in range(n):
        m = msgs[i]
        if type(m) is not message_type:
            return ref["reference"](encoder, msgs, born_timestamp, born_host)
        body, topic, tags, keys, props, flag = m.body, m.topic, m.tags, m.keys, m.properties, m.flag
        if type(body) is not bytes or PyBytes_GET_SIZE(body) > limit or type(topic) is not str:
            return ref["reference"](encoder, msgs, born_timestamp, born_host)
        if not (tags is None or type(tags) is str) or not (keys is None or type(keys) is str):
            return ref["reference"](encoder, msgs, born_timestamp, born_host)
        if not (props is None or (type(props) is dict and not props)) or not _int64(flag):
            return ref["reference"](encoder, msgs, born_timestamp, born_host)
        cols[i] = (body, topic, tags, keys, flag)
    # the topic table in order of first use, checked in that order (the reference's errors)
    cdef dict table = {}
    idx = np.empty(n, np.int64)
    cdef int64_t[::1] idxv = idx
    for i in range(n):
        topic = (<tuple>cols[i])[1]
        k = table.get(topic)
        if k is None:
            k = table[topic] = len(table)
        idxv[i] = k
    check_topic = ref["check_topic"]
    names_b = [check_topic(t) for t in table]
    prefix, first = encoder.uniq.reserve(n)
    if type(prefix) is not bytes or PyBytes_GET_SIZE(prefix) != UNIQ_COUNTER:
        raise ValueError(f"a UNIQ_KEY prefix is {UNIQ_COUNTER} hex digits, got {prefix!r}")
    cdef uint64_t counter0 = <uint64_t>(first & 0xFFFFFFFF)
    tail_parts, tags_code, keys_hashes = ref["tail_parts"], ref["tags_code"], ref["keys_hashes"]
    cdef dict tag_codes = {}
    tags_codes = np.empty(n, np.int64)
    cdef int64_t[::1] tcv = tags_codes
    keep = [None] * n  # (tail head, tail end) of each record, alive while their bytes are read
    extra = None  # (record, key hashes) of records with keys, in order
    cdef Row* rows = <Row*>PyMem_Malloc(n * sizeof(Row))
    if rows == NULL:
        raise MemoryError()
    cdef Py_ssize_t total = 0, size
    try:
        for i in range(n):
            body, topic, tags, keys, flag = <tuple>cols[i]
            topic_b = <bytes>names_b[idxv[i]]
            parts = tail_parts(topic_b, tags, keys)
            head, end = parts
            if type(head) is not bytes or type(end) is not bytes:
                raise TypeError("tail parts must be bytes")
            keep[i] = parts
            if keys:
                if extra is None:
                    extra = []
                extra.append((i, keys_hashes(topic, keys)))
            rows[i].body = <const uint8_t*>PyBytes_AS_STRING(body)
            rows[i].body_len = PyBytes_GET_SIZE(body)
            rows[i].topic = <const uint8_t*>PyBytes_AS_STRING(topic_b)
            rows[i].topic_len = PyBytes_GET_SIZE(topic_b)
            rows[i].head = <const uint8_t*>PyBytes_AS_STRING(head)
            rows[i].head_len = PyBytes_GET_SIZE(head)
            rows[i].end = <const uint8_t*>PyBytes_AS_STRING(end)
            rows[i].end_len = PyBytes_GET_SIZE(end)
            rows[i].flag = <int32_t>(<int64_t>flag)  # the low 32 bits, as numpy's cast into the int32 field
            size = OFF_BODY + rows[i].body_len + rows[i].head_len + UNIQ_LEN + rows[i].end_len
            if size > 0x7FFFFFFF:
                raise OverflowError(f"record {i} would be {size} bytes")
            total += size
        buf = PyBytes_FromStringAndSize(NULL, total)
        starts = np.empty(n, np.int64)
        uniq = np.empty(n * UNIQ_LEN, np.uint8)
        hashes = np.empty(n, np.int64)
        _fill(<uint8_t*>PyBytes_AS_STRING(buf), rows, n, <const uint8_t*>PyBytes_AS_STRING(prefix), counter0,
              <int64_t>born_timestamp, <int64_t>born_host, starts, uniq, hashes)
    finally:
        PyMem_Free(rows)
    for i in range(n):  # after the records, as the reference computes them
        tags = (<tuple>cols[i])[2]
        code = tag_codes.get(tags, None) if tags is not None else 0
        if code is None:
            code = tag_codes[tags] = tags_code(tags)
        tcv[i] = code
    uniq_keys = uniq.view("S32").astype(str).tolist()
    if extra is None:
        key_hashes, key_records = hashes, np.arange(n, dtype=np.int64)
    else:
        hl, rl = [], []
        j = 0
        hashes_l = hashes.tolist()
        for i in range(n):
            hl.append(hashes_l[i])
            rl.append(i)
            if j < len(extra) and extra[j][0] == i:
                more = extra[j][1]
                hl.extend(more)
                rl.extend([i] * len(more))
                j += 1
        key_hashes, key_records = np.array(hl, np.int64), np.array(rl, np.int64)
    batch = ref["EncodedBatch"](buf, starts, tags_codes, key_hashes, key_records)
    return ref["EncodedMixed"](names_b, idx, batch, uniq_keys)


cdef void _fill(uint8_t* out, const Row* rows, Py_ssize_t n, const uint8_t* prefix, uint64_t first,
                int64_t born_ts, int64_t host, int64_t[::1] starts, uint8_t[::1] uniq, int64_t[::1] hashes):
    """Each record in turn: header (broker-owned fields zero), body, tail with its UNIQ_KEY, and
    the UNIQ_KEY's index hash (crc32 of topic '#' UNIQ_KEY)."""
    cdef Py_ssize_t i, pos = 0, size
    cdef uint8_t* r
    cdef uint8_t* u
    cdef uint32_t counter
    cdef int j
    cdef unsigned long seed
    with nogil:
        for i in range(n):
            size = OFF_BODY + rows[i].body_len + rows[i].head_len + UNIQ_LEN + rows[i].end_len
            r = out + pos
            starts[i] = pos
            memset(r, 0, OFF_BODY)
            _put32(r, <uint32_t>size)
            _put32(r + 4, MESSAGE_MAGIC)
            _put32(r + OFF_BODYCRC, <uint32_t>crc32(0, rows[i].body, rows[i].body_len) & 0x7FFFFFFFu)
            _put32(r + OFF_FLAG, <uint32_t>rows[i].flag)
            _put64(r + OFF_BORNTIMESTAMP, <uint64_t>born_ts)
            _put64(r + OFF_BORNHOST, <uint64_t>host)
            _put32(r + OFF_BODYLEN, <uint32_t>rows[i].body_len)
            memcpy(r + OFF_BODY, rows[i].body, rows[i].body_len)
            r += OFF_BODY + rows[i].body_len
            memcpy(r, rows[i].head, rows[i].head_len)
            u = r + rows[i].head_len
            memcpy(u, prefix, UNIQ_COUNTER)
            counter = <uint32_t>(first + <uint64_t>i)  # the low 32 bits, as the reference's & 0xFFFFFFFF
            for j in range(8):
                u[UNIQ_COUNTER + j] = _HEX[(counter >> (28 - 4 * j)) & 0xF]
            memcpy(&uniq[i * UNIQ_LEN], u, UNIQ_LEN)
            seed = crc32(0, rows[i].topic, rows[i].topic_len)
            seed = crc32(seed, <const unsigned char*>b"#", 1)
            hashes[i] = <int64_t>(crc32(seed, u, UNIQ_LEN) & 0x7FFFFFFFul)
            memcpy(u + UNIQ_LEN, rows[i].end, rows[i].end_len)
            pos += size

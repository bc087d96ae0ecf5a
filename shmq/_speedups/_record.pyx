# cython: language_level=3
"""Compiled twins of shmq.codec.record's per-record checks (layout: docs/FORMAT.md section 3).

``check_record`` classifies the bytes at a position during a recovery scan, exactly as the
reference ``shmq.codec.record.check_record`` does (tests/speedups/ compare the two on every
kind of damage). Every length read from the buffer is checked against ``limit`` before it is
used: the bytes may be a torn tail or garbage, never trusted. The body CRC runs with the GIL
released (shmq._speedups._crc's CRC-32).
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

from shmq._speedups._crc cimport crc32

cdef extern from *:
    """
    #define SHMQ_MESSAGE_MAGIC 0xDAA320A7u
    #define SHMQ_BLANK_MAGIC 0xCBD43194u
    enum { SHMQ_MIN_BLANK = 8, SHMQ_OFF_BODYCRC = 8, SHMQ_OFF_PHYSICALOFFSET = 28, SHMQ_OFF_STORETIMESTAMP = 56,
           SHMQ_OFF_BODYLEN = 84, SHMQ_OFF_BODY = 88, SHMQ_FIXED_OVERHEAD = 91,
           SHMQ_RECORD_OK = 0, SHMQ_RECORD_BLANK = 1, SHMQ_RECORD_END = 2, SHMQ_RECORD_BAD_CRC = 3 };
    """
    const uint32_t MESSAGE_MAGIC "SHMQ_MESSAGE_MAGIC"
    const uint32_t BLANK_MAGIC "SHMQ_BLANK_MAGIC"
    enum:
        MIN_BLANK "SHMQ_MIN_BLANK"
        OFF_BODYCRC "SHMQ_OFF_BODYCRC"
        OFF_PHYSICALOFFSET "SHMQ_OFF_PHYSICALOFFSET"
        OFF_STORETIMESTAMP "SHMQ_OFF_STORETIMESTAMP"
        OFF_BODYLEN "SHMQ_OFF_BODYLEN"
        OFF_BODY "SHMQ_OFF_BODY"
        FIXED_OVERHEAD "SHMQ_FIXED_OVERHEAD"
        C_RECORD_OK "SHMQ_RECORD_OK"
        C_RECORD_BLANK "SHMQ_RECORD_BLANK"
        C_RECORD_END "SHMQ_RECORD_END"
        C_RECORD_BAD_CRC "SHMQ_RECORD_BAD_CRC"

RECORD_OK = 0
RECORD_BLANK = 1
RECORD_END = 2
RECORD_BAD_CRC = 3
LAYOUT = {"MESSAGE_MAGIC": MESSAGE_MAGIC, "BLANK_MAGIC": BLANK_MAGIC, "MIN_BLANK": MIN_BLANK,
          "OFF_BODYCRC": OFF_BODYCRC, "OFF_PHYSICALOFFSET": OFF_PHYSICALOFFSET,
          "OFF_STORETIMESTAMP": OFF_STORETIMESTAMP, "OFF_BODYLEN": OFF_BODYLEN, "OFF_BODY": OFF_BODY,
          "FIXED_OVERHEAD": FIXED_OVERHEAD}
"""The constants compiled in, checked against shmq.codec.record by the tests."""


cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline int64_t _i64(const uint8_t* p) noexcept nogil:
    return <int64_t>((<uint64_t>_u32(p) << 32) | <uint64_t>_u32(p + 4))


cdef (int, int64_t) _check(const uint8_t* b, Py_ssize_t pos, Py_ssize_t limit, int64_t expected,
                           bint verify_crc) noexcept nogil:
    cdef Py_ssize_t left = limit - pos
    cdef int32_t size, body_len
    cdef uint32_t magic
    cdef Py_ssize_t p, topic_len, props_len
    if left < MIN_BLANK:
        return C_RECORD_END, 0
    size = <int32_t>_u32(b + pos)
    magic = _u32(b + pos + 4)
    if magic == BLANK_MAGIC:
        if size == left:
            return C_RECORD_BLANK, size
        return C_RECORD_END, 0
    if magic != MESSAGE_MAGIC or size < FIXED_OVERHEAD or size > left:
        return C_RECORD_END, 0
    body_len = <int32_t>_u32(b + pos + OFF_BODYLEN)
    if (_i64(b + pos + OFF_PHYSICALOFFSET) != expected or _i64(b + pos + OFF_STORETIMESTAMP) <= 0
            or body_len < 0 or OFF_BODY + <int64_t>body_len + 3 > size):
        return C_RECORD_END, 0
    p = pos + OFF_BODY + body_len
    topic_len = b[p]
    if p + 1 + topic_len + 2 > pos + size:
        return C_RECORD_END, 0
    props_len = (<Py_ssize_t>b[p + 1 + topic_len] << 8) | b[p + 2 + topic_len]
    if FIXED_OVERHEAD + body_len + topic_len + props_len != size:
        return C_RECORD_END, 0
    if topic_len == 0 or b[p + topic_len] == 0 or (props_len and b[pos + size - 1] != 0x02):
        return C_RECORD_END, 0
    if verify_crc and (crc32(0, b + pos + OFF_BODY, <size_t>body_len) & 0x7FFFFFFFu) != <uint32_t>(<int32_t>_u32(b + pos + OFF_BODYCRC)):
        return C_RECORD_BAD_CRC, size
    return C_RECORD_OK, size


def check_record(buf, Py_ssize_t pos, Py_ssize_t limit, int64_t expected_offset, bint verify_crc=True):
    """(status, size) of the bytes at ``pos`` (no further than ``limit``): see the reference."""
    cdef const uint8_t[::1] view = memoryview(buf).cast("B")
    cdef Py_ssize_t n = view.shape[0]
    cdef int status
    cdef int64_t size
    if pos < 0 or limit > n:
        raise ValueError(f"check_record: position {pos} and limit {limit} must lie within the buffer of {n} bytes")
    with nogil:
        status, size = _check(&view[0] if n else NULL, pos, limit, expected_offset, verify_crc)
    return status, size

# cython: language_level=3
"""The byte layout every compiled module shares: docs/FORMAT.md's record fields (section 3) and
consume-queue entry (section 4) as C constants, and the loads and stores of its big-endian fields.

``from shmq._speedups._layout cimport OFF_BODY, get_i64, ...``: a declaration file only (no module
of its own, nothing imported at run time); the C below is compiled into each module that cimports
it. The values are the Python reference's (shmq.codec.record, shmq.store.consume_queue); each
module still exports the ones it uses in its ``LAYOUT`` dict, and the tests compare those with the
reference. CRC-32 has its own place: shmq._speedups._crc (the record writer below takes the
body's CRC from its caller, so a module that cimports this one does not import _crc).
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

cdef extern from *:
    """
    #ifndef SHMQ_LAYOUT_H
    #define SHMQ_LAYOUT_H
    #include <stdint.h>
    #include <string.h>
    #define SHMQ_MESSAGE_MAGIC 0xDAA320A7u
    #define SHMQ_BLANK_MAGIC 0xCBD43194u
    enum { SHMQ_MIN_BLANK = 8, SHMQ_OFF_MAGIC = 4, SHMQ_OFF_BODYCRC = 8, SHMQ_OFF_QUEUEID = 12, SHMQ_OFF_FLAG = 16,
           SHMQ_OFF_QUEUEOFFSET = 20, SHMQ_OFF_PHYSICALOFFSET = 28, SHMQ_OFF_SYSFLAG = 36,
           SHMQ_OFF_BORNTIMESTAMP = 40, SHMQ_OFF_BORNHOST = 48, SHMQ_OFF_STORETIMESTAMP = 56,
           SHMQ_OFF_STOREHOST = 64, SHMQ_OFF_RECONSUMETIMES = 72, SHMQ_OFF_BODYLEN = 84, SHMQ_OFF_BODY = 88,
           SHMQ_FIXED_OVERHEAD = 91, SHMQ_UNIQ_LEN = 32, SHMQ_UNIQ_COUNTER = 24, SHMQ_CQ_ENTRY_SIZE = 20 };
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    #define SHMQ_BE32(v) (v)
    #define SHMQ_BE64(v) (v)
    #define SHMQ_LE32(v) __builtin_bswap32(v)
    #define SHMQ_LE64(v) __builtin_bswap64(v)
    #else
    #define SHMQ_BE32(v) __builtin_bswap32(v)
    #define SHMQ_BE64(v) __builtin_bswap64(v)
    #define SHMQ_LE32(v) (v)
    #define SHMQ_LE64(v) (v)
    #endif
    /* fields at any alignment: one unaligned move and at most one swap each */
    static inline uint32_t shmq_get_u32(const uint8_t* p) { uint32_t v; memcpy(&v, p, 4); return SHMQ_BE32(v); }
    static inline uint64_t shmq_get_u64(const uint8_t* p) { uint64_t v; memcpy(&v, p, 8); return SHMQ_BE64(v); }
    static inline int32_t shmq_get_i32(const uint8_t* p) { return (int32_t)shmq_get_u32(p); }
    static inline int64_t shmq_get_i64(const uint8_t* p) { return (int64_t)shmq_get_u64(p); }
    static inline void shmq_put_u32(uint8_t* p, uint32_t v) { v = SHMQ_BE32(v); memcpy(p, &v, 4); }
    static inline void shmq_put_u64(uint8_t* p, uint64_t v) { v = SHMQ_BE64(v); memcpy(p, &v, 8); }
    /* little-endian fields: a consume-queue range copied into native order on this host */
    static inline int32_t shmq_get_le_i32(const uint8_t* p) { uint32_t v; memcpy(&v, p, 4); return (int32_t)SHMQ_LE32(v); }
    static inline int64_t shmq_get_le_i64(const uint8_t* p) { uint64_t v; memcpy(&v, p, 8); return (int64_t)SHMQ_LE64(v); }
    #endif
    """
    const uint32_t MESSAGE_MAGIC "SHMQ_MESSAGE_MAGIC"
    const uint32_t BLANK_MAGIC "SHMQ_BLANK_MAGIC"
    enum:
        MIN_BLANK "SHMQ_MIN_BLANK"
        OFF_MAGIC "SHMQ_OFF_MAGIC"
        OFF_BODYCRC "SHMQ_OFF_BODYCRC"
        OFF_QUEUEID "SHMQ_OFF_QUEUEID"
        OFF_FLAG "SHMQ_OFF_FLAG"
        OFF_QUEUEOFFSET "SHMQ_OFF_QUEUEOFFSET"
        OFF_PHYSICALOFFSET "SHMQ_OFF_PHYSICALOFFSET"
        OFF_SYSFLAG "SHMQ_OFF_SYSFLAG"
        OFF_BORNTIMESTAMP "SHMQ_OFF_BORNTIMESTAMP"
        OFF_BORNHOST "SHMQ_OFF_BORNHOST"
        OFF_STORETIMESTAMP "SHMQ_OFF_STORETIMESTAMP"
        OFF_STOREHOST "SHMQ_OFF_STOREHOST"
        OFF_RECONSUMETIMES "SHMQ_OFF_RECONSUMETIMES"
        OFF_BODYLEN "SHMQ_OFF_BODYLEN"
        OFF_BODY "SHMQ_OFF_BODY"
        FIXED_OVERHEAD "SHMQ_FIXED_OVERHEAD"
        UNIQ_LEN "SHMQ_UNIQ_LEN"
        UNIQ_COUNTER "SHMQ_UNIQ_COUNTER"
        CQ_ENTRY_SIZE "SHMQ_CQ_ENTRY_SIZE"
    uint32_t get_u32 "shmq_get_u32"(const uint8_t* p) noexcept nogil
    uint64_t get_u64 "shmq_get_u64"(const uint8_t* p) noexcept nogil
    int32_t get_i32 "shmq_get_i32"(const uint8_t* p) noexcept nogil
    int64_t get_i64 "shmq_get_i64"(const uint8_t* p) noexcept nogil
    void put_u32 "shmq_put_u32"(uint8_t* p, uint32_t v) noexcept nogil
    void put_u64 "shmq_put_u64"(uint8_t* p, uint64_t v) noexcept nogil
    int32_t get_le_i32 "shmq_get_le_i32"(const uint8_t* p) noexcept nogil
    int64_t get_le_i64 "shmq_get_le_i64"(const uint8_t* p) noexcept nogil


cdef inline uint8_t* put_record_head(uint8_t* r, Py_ssize_t size, uint32_t body_crc, uint32_t flag, uint32_t sysflag,
                                     int64_t born_ts, int64_t born_host, const uint8_t* body,
                                     Py_ssize_t body_len) noexcept nogil:
    """A record's header as a producer writes it (the broker-owned fields zero, ``body_crc``
    already masked to 31 bits) and its body; returns where the tail (topic, properties) starts."""
    memset(r, 0, OFF_BODY)
    put_u32(r, <uint32_t>size)
    put_u32(r + OFF_MAGIC, MESSAGE_MAGIC)
    put_u32(r + OFF_BODYCRC, body_crc)
    put_u32(r + OFF_FLAG, flag)
    put_u32(r + OFF_SYSFLAG, sysflag)
    put_u64(r + OFF_BORNTIMESTAMP, <uint64_t>born_ts)
    put_u64(r + OFF_BORNHOST, <uint64_t>born_host)
    put_u32(r + OFF_BODYLEN, <uint32_t>body_len)
    memcpy(r + OFF_BODY, body, <size_t>body_len)
    return r + OFF_BODY + body_len


cdef inline void put_uniq_counter(uint8_t* u, uint64_t n) noexcept nogil:
    """The UNIQ_KEY's last 8 characters: the low 32 bits of its counter ``n`` as upper-case hex
    after the ``UNIQ_COUNTER`` characters of its prefix (shmq.codec.ids.UniqKeyGenerator)."""
    cdef const char* digits = b"0123456789ABCDEF"
    cdef uint32_t counter = <uint32_t>n
    cdef int j
    for j in range(8):
        u[UNIQ_COUNTER + j] = digits[(counter >> (28 - 4 * j)) & 0xF]

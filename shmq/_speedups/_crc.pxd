from libc.stdint cimport uint8_t, uint32_t

cdef uint32_t crc32(uint32_t crc, const uint8_t* p, size_t n) noexcept nogil

# cython: language_level=3
"""CRC-32 with zlib's polynomial for every compiled module (``from shmq._speedups._crc cimport crc32``).

The C is in _crc.h (slicing-by-8 tables; PCLMULQDQ folding where the CPU has it, chosen here
at import). ``crc32(crc, p, n)`` has zlib's semantics: continue ``crc`` (0 to start) over n
bytes. The Python functions below exist for the differential tests (tests/speedups/test_crc.py)
and for forcing a path while debugging.
"""
from libc.stdint cimport uint8_t, uint32_t

cdef extern from "_crc.h" nogil:
    void shmq_crc_init()
    int shmq_crc_set_path(int path)
    uint32_t shmq_crc32(uint32_t crc, const uint8_t* p, size_t n)
    int shmq_crc_path
    int shmq_crc_cpu_has_pclmul()
    enum:
        PATH_TABLE "SHMQ_CRC_PATH_TABLE"
        PATH_PCLMUL "SHMQ_CRC_PATH_PCLMUL"


cdef uint32_t crc32(uint32_t crc, const uint8_t* p, size_t n) noexcept nogil:
    return shmq_crc32(crc, p, n)


shmq_crc_init()

_NAMES = {PATH_TABLE: "table", PATH_PCLMUL: "pclmul"}


def checksum(data, uint32_t value=0):
    """``zlib.crc32(data, value)`` computed by the path in use."""
    cdef const uint8_t[::1] v = memoryview(data).cast("B")
    cdef size_t n = <size_t>v.shape[0]
    with nogil:
        value = shmq_crc32(value, &v[0] if n else NULL, n)
    return value


def paths():
    """The paths this CPU and build can run, fastest last."""
    return ["table", "pclmul"] if shmq_crc_cpu_has_pclmul() else ["table"]


def path():
    """The path in use."""
    return _NAMES[shmq_crc_path]


def set_path(str name):
    """Forces ``name`` ("table" or "pclmul") for every module; ValueError if this CPU lacks it."""
    cdef int code = PATH_PCLMUL if name == "pclmul" else (PATH_TABLE if name == "table" else -1)
    if code < 0 or shmq_crc_set_path(code) != 0:
        raise ValueError(f"CRC-32 path {name!r} is not available here (have {paths()})")

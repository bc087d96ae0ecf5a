/* CRC-32 with zlib's polynomial (docs/FORMAT.md section 3: BODYCRC, tag codes, index key
 * hashes), the one implementation every shmq/_speedups module calls through _crc.pxd.
 *
 * zlib 1.2.13 (this machine's) spends ~650 instructions on a 100-byte body, byte at a time in
 * effect. Two paths here, chosen once at import:
 *  - slicing-by-8 tables (any CPU): 8 bytes per step through eight 256-entry tables (unaligned
 *    loads: x86-64 and arm64 take them at full speed, and short fields are rarely aligned);
 *  - PCLMULQDQ folding (x86-64 with pclmul, checked at run time): 16 bytes per carry-less
 *    multiply step, four accumulators from 80 bytes on; the last 16 folded bytes and the tail
 *    are finished with the tables. The constants are derived, and the folding is modelled
 *    bit-exactly against zlib, by tools/crc32_constants.py.
 * Semantics are zlib's crc32(crc, buf, len): ``crc`` is a previous result (0 to start), the
 * result continues it. Little-endian hosts only (the loads below assume it).
 */
#ifndef SHMQ_CRC_H
#define SHMQ_CRC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shmq's CRC-32 assumes a little-endian host"
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define SHMQ_CRC_HAVE_PCLMUL 1
#include <immintrin.h>
#else
#define SHMQ_CRC_HAVE_PCLMUL 0
#endif

enum { SHMQ_CRC_PATH_TABLE = 0, SHMQ_CRC_PATH_PCLMUL = 1 };

static uint32_t shmq_crc_tab[8][256];

static inline uint32_t shmq_crc_le32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

/* Table 0 is the raw CRC of one byte (reflected polynomial 0xEDB88320); table k is the raw
 * CRC of that byte followed by k zero bytes, so eight lookups advance eight bytes at once. */
static void shmq_crc_make_tables(void) {
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t c = b;
        for (int i = 0; i < 8; i++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
        shmq_crc_tab[0][b] = c;
    }
    for (uint32_t b = 0; b < 256; b++)
        for (int k = 1; k < 8; k++) {
            uint32_t c = shmq_crc_tab[k - 1][b];
            shmq_crc_tab[k][b] = (c >> 8) ^ shmq_crc_tab[0][c & 0xFF];
        }
}

static uint32_t shmq_crc32_table(uint32_t crc, const uint8_t *p, size_t n) {
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t lo = c ^ shmq_crc_le32(p), hi = shmq_crc_le32(p + 4);
        c = shmq_crc_tab[7][lo & 0xFF] ^ shmq_crc_tab[6][(lo >> 8) & 0xFF] ^
            shmq_crc_tab[5][(lo >> 16) & 0xFF] ^ shmq_crc_tab[4][lo >> 24] ^
            shmq_crc_tab[3][hi & 0xFF] ^ shmq_crc_tab[2][(hi >> 8) & 0xFF] ^
            shmq_crc_tab[1][(hi >> 16) & 0xFF] ^ shmq_crc_tab[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ shmq_crc_tab[0][(c ^ *p++) & 0xFF];
    return ~c;
}

#if SHMQ_CRC_HAVE_PCLMUL
#define SHMQ_CRC_TARGET __attribute__((target("sse2,pclmul")))

/* X times x^n (mod P) as a 128-bit value: lane 0 of k multiplies X's high-degree half (weight
 * x^(n+64)), lane 1 its low half (x^n). */
SHMQ_CRC_TARGET static inline __m128i shmq_crc_fold(__m128i x, __m128i k) {
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

SHMQ_CRC_TARGET static uint32_t shmq_crc32_pclmul(uint32_t crc, const uint8_t *p, size_t n) {
    /* _mm_set_epi64x takes (lane 1, lane 0); values from tools/crc32_constants.py */
    const __m128i k_fold1 = _mm_set_epi64x((long long)0x9BA54C6F00000000ull, (long long)0x65673B4600000000ull);
    const __m128i k_fold4 = _mm_set_epi64x((long long)0xCAD38E8F00000000ull, (long long)0x653D982200000000ull);
    const __m128i k_merge3 = _mm_set_epi64x((long long)0x2A28386200000000ull, (long long)0x69CCFC0D00000000ull);
    const __m128i k_merge2 = _mm_set_epi64x((long long)0x01B5FD1D00000000ull, (long long)0x9570D49500000000ull);
    __m128i x;
    uint8_t last[16];
    if (n < 32) return shmq_crc32_table(crc, p, n);
    x = _mm_xor_si128(_mm_loadu_si128((const __m128i *)p), _mm_cvtsi32_si128((int)~crc));
    if (n >= 80) {
        __m128i a1 = _mm_loadu_si128((const __m128i *)(p + 16));
        __m128i a2 = _mm_loadu_si128((const __m128i *)(p + 32));
        __m128i a3 = _mm_loadu_si128((const __m128i *)(p + 48));
        p += 64;
        n -= 64;
        while (n >= 64) {
            x = _mm_xor_si128(shmq_crc_fold(x, k_fold4), _mm_loadu_si128((const __m128i *)p));
            a1 = _mm_xor_si128(shmq_crc_fold(a1, k_fold4), _mm_loadu_si128((const __m128i *)(p + 16)));
            a2 = _mm_xor_si128(shmq_crc_fold(a2, k_fold4), _mm_loadu_si128((const __m128i *)(p + 32)));
            a3 = _mm_xor_si128(shmq_crc_fold(a3, k_fold4), _mm_loadu_si128((const __m128i *)(p + 48)));
            p += 64;
            n -= 64;
        }
        x = _mm_xor_si128(_mm_xor_si128(shmq_crc_fold(x, k_merge3), shmq_crc_fold(a1, k_merge2)),
                          _mm_xor_si128(shmq_crc_fold(a2, k_fold1), a3));
    } else {
        p += 16;
        n -= 16;
    }
    while (n >= 16) {
        x = _mm_xor_si128(shmq_crc_fold(x, k_fold1), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    /* X is congruent to everything so far: its 16 bytes, CRC'd from a zero state, then the tail */
    _mm_storeu_si128((__m128i *)last, x);
    return shmq_crc32_table(shmq_crc32_table(0xFFFFFFFFu, last, 16), p, n);
}

static int shmq_crc_cpu_has_pclmul(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse2");
}
#else
static int shmq_crc_cpu_has_pclmul(void) { return 0; }
#endif

static int shmq_crc_path = SHMQ_CRC_PATH_TABLE;

/* Builds the tables and picks the fastest path this CPU has; once, at import (GIL held). */
static void shmq_crc_init(void) {
    shmq_crc_make_tables();
    shmq_crc_path = shmq_crc_cpu_has_pclmul() ? SHMQ_CRC_PATH_PCLMUL : SHMQ_CRC_PATH_TABLE;
}

/* Forces one path (tests); -1 when this CPU or build lacks it. */
static int shmq_crc_set_path(int path) {
    if (path == SHMQ_CRC_PATH_PCLMUL && !shmq_crc_cpu_has_pclmul()) return -1;
    if (path != SHMQ_CRC_PATH_PCLMUL && path != SHMQ_CRC_PATH_TABLE) return -1;
    shmq_crc_path = path;
    return 0;
}

static inline uint32_t shmq_crc32(uint32_t crc, const uint8_t *p, size_t n) {
#if SHMQ_CRC_HAVE_PCLMUL
    if (shmq_crc_path == SHMQ_CRC_PATH_PCLMUL) return shmq_crc32_pclmul(crc, p, n);
#endif
    return shmq_crc32_table(crc, p, n);
}

#endif

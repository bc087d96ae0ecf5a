"""Derives the CRC-32 folding constants compiled into shmq/_speedups/_crc.h, and checks them.

CRC-32 here is zlib's (IEEE 802.3 polynomial P = 0x104C11DB7, bit-reflected, init and final
xor 0xFFFFFFFF; docs/FORMAT.md section 3). Read bit-reflected, 16 message bytes loaded
little-endian into a 128-bit register hold the polynomial whose x^127 coefficient is bit 0 of
the first byte. Folding keeps a 128-bit value X congruent (mod P) to the message consumed so
far and, for each next 16-byte block B, computes X * x^128 + B from X's two 64-bit halves:
X = H*x^64 + L, so X*x^128 = H*x^192 + L*x^128 = H*(x^192 mod P) + L*(x^128 mod P) (mod P).
PCLMULQDQ of two bit-reflected 64-bit operands gives the bit-reflected 128-bit product times
x, so each constant is x^(n-1) mod P, reflected within 64 bits. Folding by 64 bytes with four
accumulators uses n = 576/512; merging the four uses 448, 320 and 192 (with 384, 256, 128).

Run ``python tools/crc32_constants.py`` to print the constants and to run a bit-exact model of
the C folding path against zlib.crc32 (what the C does, in Python integers).
"""

from __future__ import annotations

import os
import random
import zlib

POLY = 0x104C11DB7  # x^32 + x^26 + ... + 1, bit k = coefficient of x^k


def xpow_mod(n: int) -> int:
    """x^n mod P as an integer whose bit k is the coefficient of x^k."""
    r = 1
    for _ in range(n):
        r <<= 1
        if r >> 32:
            r ^= POLY
    return r


def reflect(v: int, bits: int) -> int:
    return int(format(v, f"0{bits}b")[::-1], 2)


def fold_constant(n: int) -> int:
    """The 64-bit lane that multiplies a half whose weight in the fold is x^n."""
    return reflect(xpow_mod(n - 1), 64)


def byte_table() -> list[int]:
    """Slicing table 0: the raw (zero-init) reflected CRC of each single byte."""
    rpoly = reflect(POLY & 0xFFFFFFFF, 32)  # 0xEDB88320
    out = []
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ (rpoly if c & 1 else 0)
        out.append(c)
    return out


CONSTANTS = {  # name in _crc.h -> (lane 0 multiplies the half of weight x^(n+64), lane 1 x^n)
    "K_FOLD1": (fold_constant(192), fold_constant(128)),
    "K_FOLD4": (fold_constant(576), fold_constant(512)),
    "K_MERGE3": (fold_constant(448), fold_constant(384)),
    "K_MERGE2": (fold_constant(320), fold_constant(256)),
}


def clmul(a: int, b: int) -> int:
    r = 0
    while b:
        if b & 1:
            r ^= a
        a <<= 1
        b >>= 1
    return r


def _fold(x: int, k: tuple[int, int]) -> int:
    lo, hi = x & (2**64 - 1), x >> 64
    return clmul(lo, k[0]) ^ clmul(hi, k[1])


def _table_crc(crc: int, data: bytes) -> int:
    t = byte_table()
    c = crc ^ 0xFFFFFFFF
    for b in data:
        c = (c >> 8) ^ t[(c ^ b) & 0xFF]
    return c ^ 0xFFFFFFFF


def model(crc: int, data: bytes) -> int:
    """The C folding path step for step (for len(data) >= 16)."""
    blk = lambda i: int.from_bytes(data[i : i + 16], "little")  # noqa: E731
    n, p = len(data), 0
    if n >= 64 + 16:
        acc = [blk(0) ^ (crc ^ 0xFFFFFFFF), blk(16), blk(32), blk(48)]
        p = 64
        while n - p >= 64:
            acc = [_fold(acc[i], CONSTANTS["K_FOLD4"]) ^ blk(p + 16 * i) for i in range(4)]
            p += 64
        x = (
            _fold(acc[0], CONSTANTS["K_MERGE3"])
            ^ _fold(acc[1], CONSTANTS["K_MERGE2"])
            ^ _fold(acc[2], CONSTANTS["K_FOLD1"])
            ^ acc[3]
        )
    else:
        x = blk(0) ^ (crc ^ 0xFFFFFFFF)
        p = 16
    while n - p >= 16:
        x = _fold(x, CONSTANTS["K_FOLD1"]) ^ blk(p)
        p += 16
    crc = _table_crc(0xFFFFFFFF, x.to_bytes(16, "little"))
    return _table_crc(crc, data[p:])


def main() -> None:
    for name, (k0, k1) in CONSTANTS.items():
        print(f"{name}: lane0 0x{k0:016X} lane1 0x{k1:016X}")
    t = byte_table()
    assert t[1] == 0x77073096 and t[128] == 0xEDB88320
    rnd = random.Random(15)
    for n in [*range(16, 200), 255, 256, 257, 1000, 4096]:
        data, seed = os.urandom(n), rnd.getrandbits(32)
        assert model(seed, data) == zlib.crc32(data, seed), n
    print("model matches zlib.crc32")


if __name__ == "__main__":
    main()

"""shmq._speedups._crc (the CRC-32 every compiled module uses) against zlib.crc32, on each path.

Both paths (slicing-by-8 tables; PCLMULQDQ folding where the CPU has it) must give zlib's value
for every length, alignment and starting CRC: the 16-byte folding, the 64-byte four-way
folding and the table finish each start at different lengths (32, 80, and the tail), so the
lengths run over all of 0..4 KB. The folding constants come from tools/crc32_constants.py,
whose bit-exact model is checked here too.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.speedups.conftest import compiled_or_skip


@pytest.fixture(params=["table", "pclmul"])
def path(request: pytest.FixtureRequest) -> Iterator[str]:
    """Forces one path for the test, then restores the one chosen at import."""
    compiled_or_skip("_crc", "checksum")
    from shmq._speedups import _crc

    if request.param not in _crc.paths():
        pytest.skip(f"this CPU has no {request.param} path")
    before = _crc.path()
    _crc.set_path(request.param)
    try:
        yield request.param
    finally:
        _crc.set_path(before)


def checksum(data: bytes | memoryview, value: int = 0) -> int:
    from shmq._speedups import _crc

    return int(_crc.checksum(data, value))


BLOB = os.urandom(4096 + 64)


def test_every_length_and_alignment_up_to_4k(path: str) -> None:
    for offset in range(16):
        for n in range(4097 - offset if offset else 4097):
            view = memoryview(BLOB)[offset : offset + n]
            assert checksum(view) == zlib.crc32(view), (path, offset, n)


@settings(max_examples=400, deadline=None)
@given(
    data=st.binary(max_size=4096), seed=st.integers(0, 2**32 - 1), offset=st.integers(0, 15), split=st.integers(0, 4096)
)
def test_seed_alignment_and_continuation(data: bytes, seed: int, offset: int, split: int) -> None:
    compiled_or_skip("_crc", "checksum")
    from shmq._speedups import _crc

    before = _crc.path()
    try:
        for p in _crc.paths():
            _crc.set_path(p)
            view = memoryview(b"\0" * offset + data)[offset:]
            assert checksum(view, seed) == zlib.crc32(data, seed)
            cut = min(split, len(data))
            assert checksum(data[cut:], checksum(data[:cut], seed)) == zlib.crc32(data, seed)
    finally:
        _crc.set_path(before)


def test_known_values(path: str) -> None:
    assert checksum(b"") == 0
    assert checksum(b"123456789") == 0xCBF43926  # the standard CRC-32 check value
    assert checksum(b"hello") & 0x7FFFFFFF == 0x3610A686  # docs/FORMAT.md section 3's example
    assert checksum(b"TagA") == 0x07596A98
    assert checksum(b"\xff" * 100000) == zlib.crc32(b"\xff" * 100000)


def test_buffers_and_errors(path: str) -> None:
    assert checksum(bytearray(b"abc" * 50)) == zlib.crc32(b"abc" * 50)
    import numpy as np

    a = np.arange(100, dtype=np.int32)
    assert checksum(memoryview(a)) == zlib.crc32(a.tobytes())
    with pytest.raises(TypeError):
        checksum("text")  # type: ignore[arg-type]


def test_unknown_path_is_refused() -> None:
    compiled_or_skip("_crc", "checksum")
    from shmq._speedups import _crc

    with pytest.raises(ValueError, match="not available"):
        _crc.set_path("slow")
    assert _crc.path() in _crc.paths()


def test_the_constants_model_matches_zlib() -> None:
    from tools import crc32_constants as k

    for n in (16, 31, 32, 79, 80, 100, 143, 144, 1000):
        data = os.urandom(n)
        assert k.model(0x12345678, data) == zlib.crc32(data, 0x12345678)
    header = Path(os.path.join(os.path.dirname(__file__), "../../shmq/_speedups/_crc.h")).read_text()
    for lane0, lane1 in k.CONSTANTS.values():  # the compiled-in constants are the derived ones
        assert f"_mm_set_epi64x((long long)0x{lane1:016X}ull, (long long)0x{lane0:016X}ull)" in header

"""Body compression rules (pure): threshold, off switch, the probe that skips incompressible bodies."""

from __future__ import annotations

import os
import zlib

import pytest

from shmq.client.producer.compression import compress_body, compress_threshold, worth_compressing
from shmq.codec import record as fmt
from shmq.errors import BadArgumentError

TEXT = b"order shipped to warehouse 7, invoice paid " * 2000


def test_text_over_the_threshold_is_compressed():
    body, flag = compress_body(TEXT, 4096)
    assert flag == fmt.FLAG_COMPRESSED and len(body) < len(TEXT) // 10
    assert zlib.decompress(body) == TEXT


def test_small_or_off_stays_as_it_is():
    assert compress_body(TEXT[:4096], 4096) == (TEXT[:4096], 0)  # not over the threshold
    assert compress_body(TEXT, None) == (TEXT, 0)
    assert compress_threshold(0) is None and compress_threshold(None) is None
    for bad in (-1, True, "4096"):
        with pytest.raises(BadArgumentError):
            compress_threshold(bad)


def test_random_body_is_skipped_by_the_probe():
    body = os.urandom(64 * 1024)
    assert not worth_compressing(body)
    assert compress_body(body, 4096) == (body, 0)


def test_a_body_whose_tail_shrinks_but_head_does_not_is_stored_plain():
    """The probe reads the head only: documented trade-off (a few us instead of a full pass)."""
    body = os.urandom(8192) + b"\0" * 100_000
    assert compress_body(body, 4096) == (body, 0)

"""Names for the byte buffers the codecs and the store pass around, so each signature says which
kind a function takes: bytes it only reads (a record, a frame payload, a batch of records) or a
buffer it writes into in place (a ring slot, a mapped segment's view, a bytearray being filled).

Records and frames arrive as ``memoryview`` slices of a ring or a mapping in the broker and as
``bytes`` in tests and tools; the codecs take either without copying.
"""

from __future__ import annotations

from typing import TypeAlias

ReadBuffer: TypeAlias = bytes | bytearray | memoryview
WriteBuffer: TypeAlias = bytearray | memoryview

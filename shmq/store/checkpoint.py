"""StoreCheckpoint: the store timestamps up to which commitlog, consume queues and index are flushed.

Abnormal recovery starts from the commitlog segment older than all three (minus a margin), so
whatever a crash lost from the page cache is re-read from the commitlog.
"""

from __future__ import annotations

import mmap
import os

from shmq.codec import record as fmt
from shmq.errors import DiskFullError
from shmq.store import files


class StoreCheckpoint:
    """One page, mapped: physic msg ts @0, logics msg ts @8, index msg ts @16."""

    # read with CHECKPOINT.unpack_from
    physic_msg_timestamp: int
    logics_msg_timestamp: int
    index_msg_timestamp: int

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = files.open_file(path)[0]
        if os.fstat(self.fd).st_size != fmt.CHECKPOINT_FILE_SIZE:
            os.ftruncate(self.fd, fmt.CHECKPOINT_FILE_SIZE)
        try:  # its page gets a block now: a flush writing into a hole of a full disk would SIGBUS
            os.posix_fallocate(self.fd, 0, fmt.CHECKPOINT_FILE_SIZE)
        except OSError as e:
            os.close(self.fd)
            raise DiskFullError(
                f"cannot create the store checkpoint {path}: {e.strerror}; free space on its disk "
                "(an existing store has it already)"
            ) from None
        self.mm = mmap.mmap(self.fd, fmt.CHECKPOINT_FILE_SIZE)
        self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp = fmt.CHECKPOINT.unpack_from(
            self.mm, 0
        )

    def min_timestamp(self, include_index: bool = True) -> int:
        ts = min(self.physic_msg_timestamp, self.logics_msg_timestamp)
        return min(ts, self.index_msg_timestamp) if include_index else ts

    def flush(self) -> None:
        fmt.CHECKPOINT.pack_into(
            self.mm, 0, self.physic_msg_timestamp, self.logics_msg_timestamp, self.index_msg_timestamp
        )
        os.fdatasync(self.fd)

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)

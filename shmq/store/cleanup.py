"""Expired-file cleanup and the disk-full guard (RocketMQ's CleanCommitLogService and friends).

Every cleanResourceInterval: measure the disk; past diskSpaceWarningLevelRatio refuse writes
(the store raises DiskFullError, nothing is half-written; DiskSpace also measures before each
new file and, while refusing, every 100 ms). Commitlog segments older than fileReservedTime
are deleted at the deleteWhen hours, or at any time once the disk is over
diskMaxUsedSpaceRatio. Past diskSpaceCleanForciblyRatio the oldest segments go even if not
expired, but only as far as every consumer group has consumed them (shmq.store.read.consumed),
unless cleanFileForciblyEnable asks for RocketMQ's behaviour: then unconsumed messages are
deleted too, and logged. The active segment is never deleted. Consume-queue and index files
that point only below the commitlog's new min offset follow.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Protocol

from shmq.config import BrokerConfig
from shmq.store.commitlog import CommitLog
from shmq.store.consume_queue import ConsumeQueue
from shmq.store.flush import ServiceThread
from shmq.store.index_file import IndexService
from shmq.store.read import consumed
from shmq.store.space import DiskSpace

log = logging.getLogger(__name__)


class CleanableStore(Protocol):
    """What cleanup needs of the message store (a narrow view: the store imports cleanup, not
    the other way round)."""

    config: BrokerConfig
    store_dir: str
    space: DiskSpace
    commitlog: CommitLog

    @property
    def index(self) -> IndexService | None: ...

    def consume_queues(self) -> list[ConsumeQueue]: ...

    def finish_recovery(self) -> None: ...


@dataclass(frozen=True, slots=True)
class CleanDecision:
    """What one round should do, from the clock and the disk (pure: tested alone)."""

    disk_full: bool  # refuse writes
    delete_expired: bool  # delete segments past fileReservedTime
    delete_forcibly: bool  # delete oldest segments even if not expired


def decide(
    used_ratio: float,
    hour: int,
    delete_when: str,
    max_used_percent: int,
    forcibly_ratio: float,
    warning_ratio: float,
    manual: bool = False,
) -> CleanDecision:
    hours = {int(h) for h in delete_when.split(";") if h.strip()}
    over = used_ratio > max_used_percent / 100
    return CleanDecision(
        disk_full=used_ratio > warning_ratio,
        delete_expired=manual or hour in hours or over,
        delete_forcibly=used_ratio > forcibly_ratio,
    )


class CleanupService(ServiceThread):
    """Runs the cleanup rounds for a MessageStore."""

    name = "CleanupService"

    def __init__(self, store: CleanableStore) -> None:
        super().__init__(store.config.clean_resource_interval / 1000)
        self.store = store
        self._manual = False
        self._moved: dict[tuple[str, int], None] = {}  # queues whose min offset moved, for the broker to publish
        self._moved_lock = threading.Lock()
        self.check_disk()

    def take_moved(self) -> list[tuple[str, int]]:
        """(topic, queue id) of the consume queues whose min offset moved since the last call.

        The broker publishes their new min offsets (its state segment has one writer, the broker
        loop), so consumers see at once that the head of a queue is gone."""
        if not self._moved:
            return []
        with self._moved_lock:
            moved, self._moved = list(self._moved), {}
        return moved

    def execute_delete_files_manually(self) -> None:
        """Delete expired files on the next round whatever the hour (an admin command)."""
        self._manual = True
        self.wakeup()

    def check_disk(self) -> CleanDecision:
        cfg = self.store.config
        ratio = self.store.space.measure()  # refuses or accepts writes
        return decide(
            ratio,
            time.localtime().tm_hour,
            cfg.delete_when,
            cfg.disk_max_used_space_ratio,
            cfg.disk_space_clean_forcibly_ratio,
            cfg.disk_space_warning_level_ratio,
            self._manual,
        )

    def _run_once(self) -> None:
        d = self.check_disk()
        self.store.finish_recovery()
        self._manual = False
        deleted = 0
        if d.delete_expired or d.delete_forcibly:
            deleted = self.delete_commitlog_segments(d.delete_forcibly)
        if deleted:
            self.clean_logics()
            self.check_disk()

    def delete_commitlog_segments(self, forcibly: bool) -> int:
        """Delete expired (or, forcibly, the oldest) segments, at most deleteFileBatchMax a round."""
        cfg = self.store.config
        queue = self.store.commitlog.queue
        reserved = cfg.file_reserved_time * 3600
        now = time.time()
        deleted = 0
        protected: int | None = None  # commitlog offset of the oldest unconsumed message, once needed
        floors: consumed.Floors = {}
        while deleted < cfg.delete_file_batch_max:
            with self.store.commitlog.put_lock:
                if len(queue.files) <= 1:
                    break
                oldest = queue.files[0]
                try:
                    age = now - os.stat(oldest.path).st_mtime
                except FileNotFoundError:
                    age = reserved + 1
                if age <= reserved and not forcibly:
                    break
                if age <= reserved:
                    if protected is None:
                        floors = consumed.committed_floors(self.store.store_dir)
                        protected = consumed.protected_offset(
                            self.store.consume_queues(), floors, self.store.commitlog.max_offset
                        )
                    if oldest.file_to_offset > protected and not self._may_lose(
                        oldest.file_from_offset, oldest.file_to_offset, floors
                    ):
                        break
                queue.delete_first(1)
            deleted += 1
            log.info("deleted commitlog segment %s (%s)", oldest.path, "forcibly" if age <= reserved else "expired")
            if forcibly and not self.check_disk().delete_forcibly:
                break
            if deleted < cfg.delete_file_batch_max:
                time.sleep(cfg.delete_commit_log_files_interval / 1000)
        return deleted

    def _may_lose(self, lo: int, hi: int, floors: consumed.Floors) -> bool:
        """Whether the unexpired segment [lo, hi), which holds messages some group has not
        consumed, may go: only with cleanFileForciblyEnable, and then what is lost is logged."""
        if not self.store.config.clean_file_forcibly_enable:
            log.warning(
                "disk of %s over diskSpaceCleanForciblyRatio, but commitlog %d-%d holds unconsumed messages "
                "and is not expired: kept (cleanFileForciblyEnable=false), writes are refused until "
                "consumers catch up, segments expire or space is freed",
                self.store.store_dir,
                lo,
                hi,
            )
            return False
        lost = consumed.unconsumed_between(self.store.consume_queues(), floors, lo, hi)
        log.error(
            "forced cleanup (cleanFileForciblyEnable=true) deletes commitlog %d-%d with %d unconsumed messages: %s",
            lo,
            hi,
            sum(x.end - x.first for x in lost),
            "; ".join(map(str, lost)) or "none",
        )
        return True

    def clean_logics(self) -> None:
        """Drop consume-queue and index files that only point below the commitlog's min offset."""
        min_offset = self.store.commitlog.min_offset
        moved = []
        for cq in self.store.consume_queues():
            with self.store.commitlog.put_lock:
                before = cq.min_offset
                cq.delete_expired(min_offset)
                if cq.min_offset != before:
                    moved.append((cq.topic, cq.queue_id))
        if moved:
            with self._moved_lock:
                self._moved.update(dict.fromkeys(moved))
        if self.store.index is not None:
            with self.store.commitlog.put_lock:
                self.store.index.delete_files_below(min_offset)

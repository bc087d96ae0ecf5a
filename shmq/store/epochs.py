"""config/epochs.json: the store's epoch history, which HA compares to find the shared log.

Every master start opens an epoch (``shmq.ha.protocol.Epoch``: number, first offset, random
id); a replica adopts its master's list. The file is written atomically (temp, fsync, rename:
``config_files.write_json``) because a torn history would make a replica either refuse a master
it shares everything with or, worse, keep a tail it does not share. Garbage is never read as
"no epochs": that would let a store with data look like a fresh one, so it raises
MetadataError naming the file and the fault.
"""

from __future__ import annotations

import logging
import os

from shmq.errors import DiskFullError, MetadataError
from shmq.ha.protocol import Epoch, check_epochs
from shmq.store.config_files import read_json_file, write_json

log = logging.getLogger(__name__)


class EpochFile:
    """The epoch list of one store directory."""

    def __init__(self, store_dir: str) -> None:
        self.path = os.path.join(store_dir, "config", "epochs.json")

    @property
    def entries(self) -> list[Epoch]:
        """The saved list (empty if the store never had one); MetadataError if the file is damaged."""
        try:
            data = read_json_file(self.path)
        except FileNotFoundError:
            return []
        except ValueError as e:  # any damage, nesting too deep for the decoder included
            raise MetadataError(
                f"{self.path} is not valid JSON ({e}); restore it from the master's list "
                "or remove it only if the store holds no data"
            ) from None
        try:
            if not isinstance(data, dict) or not isinstance(data.get("epochs"), list):
                raise ValueError('not a {"epochs": [...]} object')
            epochs = [Epoch.from_json(e) for e in data["epochs"]]
            check_epochs(epochs)
        except ValueError as e:
            raise MetadataError(f"{self.path}: {e}") from None
        return epochs

    def save(self, entries: list[Epoch]) -> None:
        """Replace the list atomically (ValueError if it is out of order)."""
        check_epochs(entries)
        write_json(self.path, {"epochs": [e.to_json() for e in entries]})

    def begin_master_epoch(self, max_offset: int) -> Epoch:
        """Open the epoch of a master start at ``max_offset`` (its commitlog end after recovery):
        the last epoch + 1, or a new id for the last entry when nothing was written in it (it
        starts at ``max_offset`` too), so a list does not grow with restarts that wrote
        nothing. A fresh store gets epoch 1 at 0."""
        entries = self.entries
        top = entries[-1].epoch if entries else 0  # numbers keep rising past dropped entries too
        while entries and entries[-1].start_offset > max_offset:
            # a replica adopts its master's whole list, also an epoch the master began past what
            # reached the replica; promoted, it holds nothing of that epoch: the entry goes
            gone = entries.pop()
            log.warning(
                "%s: epoch %d starts at %d, past the commitlog's end %d: none of it is here; dropped",
                self.path,
                gone.epoch,
                gone.start_offset,
                max_offset,
            )
        if entries and entries[-1].start_offset == max_offset:
            # nothing was written in it: replaced by a higher number (a replica that adopted the
            # old entry then shares the log up to its start, which is all there is)
            entries.pop()
        epoch = Epoch.new(top + 1, max_offset)
        entries.append(epoch)
        self.save(entries)
        return epoch


class PendingEpoch:
    """A put hook while a master's new epoch is not on disk (the disk was full at start).

    Every put is refused as if the disk were full until the epoch is written: a record written
    in an epoch the history does not name would later look shared with a replica that never
    had it. Once written, the hook is one attribute check per put."""

    def __init__(self, epochs: EpochFile, start_offset: int) -> None:
        self._epochs = epochs
        self._start = start_offset
        self.done = False

    def plain_lane(self, req: object) -> bool:
        """Once the epoch is written, puts pass untouched."""
        return self.done

    def before_put(self, req: object) -> None:
        if self.done:
            return
        try:
            self._epochs.begin_master_epoch(self._start)
        except OSError as e:
            raise DiskFullError(
                f"disk full: the master's new epoch cannot be written to {self._epochs.path} "
                f"({e}); writes resume once space is freed"
            ) from None
        self.done = True
        log.warning("the new epoch is written to %s; writes resume", self._epochs.path)


def open_master_epoch(store_dir: str, max_offset: int) -> PendingEpoch | None:
    """Open a master start's epoch; on a full disk log it and return the hook that holds writes
    back until it is written (the broker still starts: reads go on)."""
    epochs = EpochFile(store_dir)
    try:
        epochs.begin_master_epoch(max_offset)
    except MetadataError:
        raise
    except OSError as e:
        log.error("cannot write the new epoch to %s (%s): writes are refused until it can be written", epochs.path, e)
        return PendingEpoch(epochs, max_offset)
    return None

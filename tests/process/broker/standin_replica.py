"""A stand-in replica for SYNC_MASTER tests: ``python standin_replica.py BROKER``.

It does in the HA segment what the HA sender does for a real replica, without TCP: waits for
the broker's sender to be up (its start clears every slot), claims a slot, marks it STREAMING
and writes ``acked_offset`` in a loop, ringing the broker's doorbell while the broker waits,
as the sender does. Commands on stdin, one a line: ``auto`` (ack the master's log end as it
grows, the default), ``hold N`` (ack at most offset N), ``quit``. Prints ``ready SLOT`` once its
slot streams and ``ok`` after each command.
"""

from __future__ import annotations

import os
import select
import sys
import time

from shmq.ha.shared import STREAMING, HASegment
from shmq.procs.ha_sender import BrokerBell
from shmq.ring.state import StateReader


def main(name: str) -> None:
    ha = HASegment.open(name)
    state = StateReader.open(name)
    bell = BrokerBell(name, state)
    deadline = time.monotonic() + 10
    while not int(ha.header["sender_pid"][0]) and time.monotonic() < deadline:
        time.sleep(0.005)
    slot = ha.claim_slot("standin", int(time.time() * 1000))
    row = ha.slot_table[slot : slot + 1]
    row["name"] = b"standin"
    row["acked_offset"] = ha.master_offset
    row["state"] = STREAMING
    print(f"ready {slot}", flush=True)
    limit: int | None = None
    acked = -1
    stdin = sys.stdin.fileno()
    buf = b""
    try:
        while True:
            if select.select([stdin], [], [], 0.0002)[0]:
                data = os.read(stdin, 4096)
                if not data:
                    return
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    words = line.decode().split()
                    if words == ["quit"]:
                        return
                    limit = int(words[1]) if words[0] == "hold" else None
                    print("ok", flush=True)
            target = ha.master_offset if limit is None else min(limit, ha.master_offset)
            if target != acked:
                acked = target
                row["acked_offset"] = acked
                row["report_ms"] = int(time.time() * 1000)
                if ha.header["broker_waiting"][0]:
                    bell.ring()
    finally:
        ha.release_slot(slot)
        bell.close()
        state.close()
        ha.close()


if __name__ == "__main__":
    main(sys.argv[1])

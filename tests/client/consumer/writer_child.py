"""Live-writer child for the reader tests: a MessageStore appending while another process reads.

    python tests/consumer/writer_child.py STORE_DIR

Commands on stdin, one a line; after each, one JSON state line on stdout:
{"max": [max offset of queue 0, 1, ...], "cl_min": commitlog min offset, "segments": count}.

    put N     append N records, spread over the queues in batches, then report
    run N     append N records in batches of 8, reporting after every batch (a free-running writer)
    clean     delete every commitlog segment but the newest, as cleanup does, and report
    quit      shut the store down and exit

Record content is a function of (queue id, queue offset) only (`body_for`, `tags_for`), so the
reader can check every record it sees.
"""

from __future__ import annotations

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from shmq.codec import record as fmt  # noqa: E402
from shmq.store.message_store import MessageStore  # noqa: E402
from shmq.store.write.hooks import PutRequest  # noqa: E402

TOPIC = "Live"
QUEUES = 3
CONFIG = {
    "mappedFileSizeCommitLog": 64 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 64,
    "maxHashSlotNum": 97,
    "maxIndexNum": 4096,
}


def body_for(qid: int, qoff: int) -> bytes:
    return f"{qid}/{qoff}/".encode().ljust(40 + (qoff * 37 + qid * 11) % 900, b"#")


def tags_for(qoff: int) -> str:
    return "Even" if qoff % 2 == 0 else "Odd"


def append(store: MessageStore, qid: int, n: int) -> None:
    first = store.get_max_offset_in_queue(TOPIC, qid)
    offs = range(first, first + n)
    batch = fmt.encode_batch(
        TOPIC, [body_for(qid, o) for o in offs], [fmt.message_properties(tags=tags_for(o), keys=f"k{o}") for o in offs]
    )
    store.put(PutRequest(batch, [TOPIC], None, qid))


def state(store: MessageStore) -> str:
    return json.dumps(
        {
            "max": [store.get_max_offset_in_queue(TOPIC, q) for q in range(QUEUES)],
            "cl_min": store.commitlog.min_offset,
            "segments": len(store.commitlog.queue.files),
        }
    )


def main() -> None:
    store = MessageStore(sys.argv[1], CONFIG).start()
    rr = 0
    for line in sys.stdin:
        cmd, *arg = line.split()
        if cmd == "quit":
            break
        if cmd == "put":
            left = int(arg[0])
            while left:
                k = min(left, 25)
                append(store, rr % QUEUES, k)
                rr += 1
                left -= k
        elif cmd == "run":
            for i in range(int(arg[0]) // 8):
                append(store, i % QUEUES, 8)
                print(state(store), flush=True)
                time.sleep(0.0005)
        elif cmd == "clean":
            with store.commitlog.put_lock:
                store.commitlog.queue.delete_first(len(store.commitlog.queue.files) - 1)
            store.clean_service.clean_logics()
        print(state(store), flush=True)
    store.shutdown()


if __name__ == "__main__":
    main()

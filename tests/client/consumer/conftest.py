import pytest

from shmq.codec import record as fmt
from shmq.store.message_store import MessageStore
from shmq.store.read.reader import StoreReader
from shmq.store.write.hooks import PutRequest

SMALL = {
    "mappedFileSizeCommitLog": 64 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 128,
    "maxHashSlotNum": 97,
    "maxIndexNum": 512,
    "warmMappedFileEnable": False,
}


@pytest.fixture
def store(tmp_path):
    s = MessageStore(str(tmp_path / "store"), dict(SMALL)).start()
    yield s
    if s.running:
        s.shutdown()


@pytest.fixture
def reader(store):
    r = StoreReader(store.store_dir)
    yield r
    r.close()


def put(
    store: MessageStore,
    topic: str,
    queue_id: int,
    body: bytes,
    tags: str | None = None,
    keys: str | None = None,
    uniq_key: str | None = None,
    user: dict | None = None,
    **kw,
):
    props = fmt.message_properties(tags=tags, keys=keys, uniq_key=uniq_key, user=user)
    return store.put(PutRequest.of_records(topic, queue_id, [fmt.encode_message(topic, body, properties=props, **kw)]))


def put_many(
    store: MessageStore, topic: str, queue_id: int, n: int, body_size: int = 100, tags=("TagA", "TagB")
) -> list[bytes]:
    """n records with bodies `<i>:` padded to body_size, tags cycling; returns the bodies."""
    bodies = [f"{i}:".encode().ljust(body_size, b".") for i in range(n)]
    props = [fmt.message_properties(tags=tags[i % len(tags)] if tags else None, uniq_key=f"{i:032X}") for i in range(n)]
    for a in range(0, n, 64):
        store.put(PutRequest(fmt.encode_batch(topic, bodies[a : a + 64], props[a : a + 64]), [topic], None, queue_id))
    return bodies


def delete_commitlog_head(store: MessageStore, count: int) -> int:
    """Delete the oldest `count` commitlog segments as cleanup would; returns the new min offset."""
    with store.commitlog.put_lock:
        store.commitlog.queue.delete_first(count)
    store.clean_service.clean_logics()
    return store.commitlog.min_offset

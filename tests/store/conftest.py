import pytest

from shmq.codec import record as fmt
from shmq.store.message_store import MessageStore
from shmq.store.write.hooks import PutRequest
from shmq.store.write.result import PutMessageResult

SMALL = {
    "mappedFileSizeCommitLog": 64 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 128,
    "maxHashSlotNum": 97,
    "maxIndexNum": 512,
    "flushIntervalCommitLog": 50,
    "flushIntervalConsumeQueue": 50,
    "flushConsumeQueueThoroughInterval": 100,
}


@pytest.fixture
def small_config():
    return dict(SMALL)


@pytest.fixture
def store(tmp_path, small_config):
    s = MessageStore(str(tmp_path / "store"), small_config).start()
    yield s
    s.shutdown()


def record(topic: str, body: bytes, tags: str | None = None, keys: str | None = None, **kw) -> bytes:
    return fmt.encode_message(topic, body, properties=fmt.message_properties(tags=tags, keys=keys), **kw)


def put_one(store: MessageStore, topic: str, queue_id: int, rec: bytes, wait_flush: bool = True) -> PutMessageResult:
    """Put one encoded record (its tag and key hashes found by decoding it)."""
    return store.put(PutRequest.of_records(topic, queue_id, [rec]), wait_flush)


def put_batch(
    store: MessageStore, topic: str, queue_id: int, batch: fmt.EncodedBatch, wait_flush: bool = True
) -> PutMessageResult:
    """Put a user's MessageBatch (all or nothing)."""
    return store.put(PutRequest(batch, [topic], None, queue_id, user_batch=True), wait_flush)


def put_multi(
    store: MessageStore, topics: list[str], queue_ids: list[int], batch: fmt.EncodedBatch
) -> PutMessageResult:
    """Put separate records of several topics and queues together."""
    return store.put(PutRequest.of_routes(topics, queue_ids, batch))

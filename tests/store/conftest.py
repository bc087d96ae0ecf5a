import pytest

from shmq.codec import record as fmt
from shmq.store.message_store import MessageStore

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

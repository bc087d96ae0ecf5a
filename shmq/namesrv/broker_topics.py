"""A registered broker's topics, read by the name server from the broker's own state segment.

A broker does not send its topics: the name server maps the broker's state segment (the one its
clients read) and takes the topic rows from there, again only when the segment's ``meta_gen``
moved (the broker raises it in every section that rewrites topic rows). So a topic created on
the broker is in the routes within one check, and a registration request stays small whatever
the number of topics. Mapping the segment also proves the registration: the pid and liveness
key the broker claims must be the ones its segment names.
"""

from __future__ import annotations

import numpy as np

from shmq.errors import RegistrationError, ShmqError
from shmq.namesrv.routes import MAX_TOPICS, TopicData
from shmq.namesrv.server import Registration
from shmq.ring.liveness import Watch
from shmq.ring.state import META_GEN_WORD, StateReader, StateView


class BrokerTopics:
    """The mapped state segment of one registered broker."""

    def __init__(self, reader: StateReader) -> None:
        self._reader = reader
        self._gen = -1

    @classmethod
    def open(cls, reg: Registration) -> BrokerTopics:
        """Map the state segment of ``reg.attach_name``; RegistrationError unless it names the
        registering process (its pid and liveness key) and that process holds the key."""
        try:
            reader = StateReader.open(reg.attach_name)
        except ShmqError as e:
            raise RegistrationError(f"broker {reg.attach_name!r} has no readable state segment ({e})") from None
        h = reader.view.header[0]
        pid, alive_key = int(h["broker_pid"]), int(h["alive_key"])
        if (pid, alive_key) != (reg.pid, reg.alive_key) or Watch(alive_key).holder_pid() != reg.pid:
            reader.close()
            raise RegistrationError(
                f"broker {reg.attach_name!r}'s state segment names pid {pid} and liveness key {alive_key}, "
                f"not the pid {reg.pid} and key {reg.alive_key} the registration claims"
            )
        return cls(reader)

    def changed(self) -> bool:
        """Whether the topic rows may have changed since the last ``read`` (one word's load)."""
        return bool(self._reader.words[META_GEN_WORD] != self._gen)

    def read(self) -> tuple[TopicData, ...]:
        """The broker's topics now, sorted by name (at most ``MAX_TOPICS``)."""
        gen = self._reader.words[META_GEN_WORD]
        topics = self._reader.read(_topics)
        self._gen = gen
        return topics

    def close(self) -> None:
        self._reader.close()


def _topics(view: StateView) -> tuple[TopicData, ...]:
    rows = view.topics[np.flatnonzero(view.topics["used"] != 0)]
    out = [
        TopicData(
            bytes(r["name"]).rstrip(b"\0").decode(errors="replace"),
            int(r["read_queues"]),
            int(r["write_queues"]),
            int(r["perm"]),
        )
        for r in rows[:MAX_TOPICS]
    ]
    return tuple(sorted(out, key=lambda t: t.name))

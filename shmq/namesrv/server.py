"""The name server's core: which brokers are registered, and the route table they make.

Pure, no I/O: the process (``shmq.procs.namesrv``) decodes requests, asks this core, and
publishes the table it returns. Whether a broker lives, and which topics it holds, come in as
functions and values, so the rules can be tested alone:

- a registration is checked field by field (``parse_registration``): anyone on the host can
  write to the control queue;
- a (broker name, broker id) registered by a live process is refused to any other process
  (RocketMQ lets the last registration win, which hides a second broker started by mistake);
  the same process registering again replaces its entry (a broker re-registers after a name
  server restart, or when it finds itself missing);
- the same attach name may be registered by one live (broker name, id) only;
- a broker whose liveness is gone leaves the table at the next ``prune``;
- at most ``MAX_BROKERS`` entries.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from shmq.errors import RegistrationError
from shmq.namesrv.routes import MAX_BROKER_ID, MAX_BROKERS, ROLES, BrokerData, RouteTable, TopicData

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_PID = 2**22
MAX_KEY = 2**32 - 1
MAX_PATH = 4096
REGISTER_FIELDS = ("broker_name", "attach_name", "cluster", "broker_id", "role", "pid", "alive_key", "store_dir")
UNREGISTER_FIELDS = ("broker_name", "broker_id", "pid")


@dataclass(frozen=True)
class Registration:
    """What one broker process asks to be registered as (a ``BrokerData`` without its topics)."""

    broker_name: str
    attach_name: str
    cluster: str
    broker_id: int
    role: str
    pid: int
    alive_key: int
    store_dir: str

    def to_args(self) -> dict[str, Any]:
        """The ``register_broker`` request's arguments."""
        return {f: getattr(self, f) for f in REGISTER_FIELDS}

    @property
    def key(self) -> tuple[str, int]:
        return self.broker_name, self.broker_id


def parse_registration(args: Mapping[str, Any]) -> Registration:
    """The registration ``args`` describe; RegistrationError (one line) naming the first bad field."""
    _only(args, REGISTER_FIELDS)
    role = args.get("role")
    if role not in ROLES:
        raise RegistrationError(f"role {role!r} is not one of {', '.join(ROLES)}")
    broker_id = _int(args, "broker_id", 0, MAX_BROKER_ID)
    if (role == "SLAVE") != (broker_id >= 1):
        raise RegistrationError(f"role {role} does not go with brokerId {broker_id}: a replica has id >= 1, a master 0")
    store_dir = args.get("store_dir")
    if not isinstance(store_dir, str) or not 0 < len(store_dir) <= MAX_PATH or "\0" in store_dir:
        raise RegistrationError(f"store_dir must be a path of 1..{MAX_PATH} characters")
    return Registration(
        broker_name=_name(args, "broker_name"),
        attach_name=_name(args, "attach_name"),
        cluster=_name(args, "cluster"),
        broker_id=broker_id,
        role=role,
        pid=_int(args, "pid", 1, MAX_PID),
        alive_key=_int(args, "alive_key", 1, MAX_KEY),
        store_dir=store_dir,
    )


def parse_unregistration(args: Mapping[str, Any]) -> tuple[str, int, int]:
    """(broker name, broker id, pid) of an ``unregister_broker`` request; RegistrationError if bad."""
    _only(args, UNREGISTER_FIELDS)
    return _name(args, "broker_name"), _int(args, "broker_id", 0, MAX_BROKER_ID), _int(args, "pid", 1, MAX_PID)


def _only(args: Mapping[str, Any], fields: tuple[str, ...]) -> None:
    if not isinstance(args, Mapping):
        raise RegistrationError("the request's args must be an object")
    extra = sorted(set(args) - set(fields))
    if extra:
        raise RegistrationError(f"unknown field {extra[0]!r} (expected {', '.join(fields)})")


def _name(args: Mapping[str, Any], key: str) -> str:
    v = args.get(key)
    if not isinstance(v, str) or not _NAME.fullmatch(v):
        raise RegistrationError(f"{key} {v!r} is not a name: use 1-64 letters, digits, '_' or '-'")
    return v


def _int(args: Mapping[str, Any], key: str, lo: int, hi: int) -> int:
    v = args.get(key)
    if type(v) is not int or not lo <= v <= hi:
        raise RegistrationError(f"{key} must be an integer in {lo}..{hi}, got {v!r}")
    return v


class NameServerCore:
    """The registered brokers of one name server process, and the table they make.

    ``alive(b)`` says whether a registered broker's process still lives (the process passes
    ``shmq.namesrv.segment.broker_alive``); ``clock_ms`` stamps registrations.
    """

    def __init__(
        self,
        namesrv: str,
        incarnation: int,
        alive: Callable[[BrokerData], bool],
        clock_ms: Callable[[], int],
        max_brokers: int = MAX_BROKERS,
    ) -> None:
        self.table = RouteTable(namesrv, incarnation, 0, ())
        self._alive = alive
        self._clock_ms = clock_ms
        self._max = max_brokers

    def register(self, reg: Registration, topics: tuple[TopicData, ...]) -> BrokerData:
        """Add (or renew) ``reg`` with ``topics``; RegistrationError if another live process holds
        its (broker name, id) or its attach name, or the table is full."""
        for b in self.table.brokers:
            same_key = (b.broker_name, b.broker_id) == reg.key
            if b.pid == reg.pid or not (same_key or b.attach_name == reg.attach_name) or not self._alive(b):
                continue
            if same_key:
                raise RegistrationError(
                    f"broker {reg.broker_name!r} id {reg.broker_id} is already registered by live pid {b.pid} "
                    f"(attach name {b.attach_name!r}, store {b.store_dir}); "
                    "stop that broker, or register under another name or id"
                )
            raise RegistrationError(
                f"attach name {reg.attach_name!r} is already registered by live pid {b.pid} "
                f"as broker {b.broker_name!r} id {b.broker_id}"
            )
        mine = [b for b in self.table.brokers if b.pid == reg.pid and (b.broker_name, b.broker_id) != reg.key]
        table = self.table
        for b in mine:  # one process is one registration: a re-registration under a new name replaces the old
            table = table.without_broker(b.broker_name, b.broker_id)
        old = table.broker(*reg.key)
        if old is None and len(table.brokers) >= self._max:
            table = table.without_dead(self._alive)
            if len(table.brokers) >= self._max:
                raise RegistrationError(f"the name server holds its maximum of {self._max} brokers")
        entry = BrokerData(
            broker_name=reg.broker_name,
            attach_name=reg.attach_name,
            cluster=reg.cluster,
            broker_id=reg.broker_id,
            role=reg.role,
            pid=reg.pid,
            alive_key=reg.alive_key,
            store_dir=reg.store_dir,
            registered_ms=self._clock_ms(),
            topics=tuple(sorted(topics, key=lambda t: t.name)),
        )
        self.table = table.with_broker(entry)
        return entry

    def unregister(self, broker_name: str, broker_id: int, pid: int) -> bool:
        """Remove the entry if ``pid`` registered it (another process cannot remove it); whether it went."""
        b = self.table.broker(broker_name, broker_id)
        if b is None or b.pid != pid:
            return False
        self.table = self.table.without_broker(broker_name, broker_id)
        return True

    def prune(self) -> list[BrokerData]:
        """Remove every broker whose process is gone; those removed."""
        dead = [b for b in self.table.brokers if not self._alive(b)]
        for b in dead:
            self.table = self.table.without_broker(b.broker_name, b.broker_id)
        return dead

    def set_topics(self, broker_name: str, broker_id: int, topics: tuple[TopicData, ...]) -> bool:
        """Replace a registered broker's topics; whether the table changed."""
        b = self.table.broker(broker_name, broker_id)
        ordered = tuple(sorted(topics, key=lambda t: t.name))
        if b is None or b.topics == ordered:
            return False
        self.table = self.table.with_broker(replace(b, topics=ordered))
        return True

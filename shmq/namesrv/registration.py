"""A broker's side of registration, the pure part: what it registers as, and when it (re)sends.

A broker with ``namesrvAddr`` registers once at start, then looks at the name server's route
table every ``LOOK_S`` (off its loop, ``shmq.procs.ns_link``): whenever a live name server's
table lacks this process's entry (a name server that started after the broker, or restarted
under the same name with a new incarnation and an empty table) it registers again, so routes
are whole again within a look and a round trip of a name server restart.

What a broker registers as (RocketMQ's brokerName / brokerId):

- a master: ``masterBrokerName`` if set (a replica promoted to master keeps its config and so
  takes over its old master's broker name), else its own name; id 0;
- a replica (brokerRole=SLAVE): ``masterBrokerName``, the broker name of the master it follows
  (a replica on this host has a name of its own, the one clients attach with, since every IPC
  object is named after it); id ``brokerId``, 1 when left at 0.
"""

from __future__ import annotations

from shmq.config import BrokerConfig
from shmq.errors import ConfigError
from shmq.namesrv.routes import RouteTable
from shmq.namesrv.server import Registration

LOOK_S = 0.1  # how often a broker looks at the name server's table
RETRY_NS = 100_000_000  # after a failed send (no answer, queue gone)
REFUSED_RETRY_NS = 1_000_000_000  # after a refusal (another live process holds the name)


def registration_for(config: BrokerConfig, name: str, pid: int, alive_key: int, store_dir: str) -> Registration:
    """What the broker ``name`` (pid, liveness key, store) registers as under ``config``."""
    if config.is_master:
        broker_name, broker_id, role = config.master_broker_name or name, 0, config.broker_role
    else:
        if not config.master_broker_name:
            raise ConfigError(
                "a replica in a cluster (namesrvAddr) needs masterBrokerName: the brokerName of the master it follows"
            )
        broker_name, broker_id, role = config.master_broker_name, config.broker_id or 1, "SLAVE"
    return Registration(
        broker_name=broker_name,
        attach_name=name,
        cluster=config.broker_cluster_name,
        broker_id=broker_id,
        role=role,
        pid=pid,
        alive_key=alive_key,
        store_dir=store_dir,
    )


def registered(table: RouteTable, reg: Registration) -> bool:
    """Whether ``table`` holds ``reg``'s entry, registered by this very process."""
    b = table.broker(reg.broker_name, reg.broker_id)
    return b is not None and b.pid == reg.pid and b.attach_name == reg.attach_name


class Schedule:
    """When to send the next registration: the table lacks us, and the last try is old enough."""

    def __init__(self) -> None:
        self._next_ns = 0

    def due(self, table: RouteTable | None, server_alive: bool, reg: Registration, now_ns: int) -> bool:
        """Whether to register now, given the last table read (None: none ever) and the server's liveness."""
        if not server_alive or now_ns < self._next_ns:
            return False
        return table is None or not registered(table, reg)

    def sent(self, outcome: str, now_ns: int) -> None:
        """Note a try's outcome: "ok", "refused" or "failed" (no answer)."""
        wait = {"ok": RETRY_NS, "refused": REFUSED_RETRY_NS}.get(outcome, RETRY_NS)
        self._next_ns = now_ns + wait

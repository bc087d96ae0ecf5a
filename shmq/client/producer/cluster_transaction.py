"""ClusterTransactionProducer: ``TransactionProducer(..., namesrv=)`` over a name server's cluster.

Each master gets its own ``TransactionProducer`` of the group, with the user's ``check``: a
half goes to one broker (round robin, retried on another broker while nothing has run yet),
its END goes to that broker, and that broker's check reaches the producer attached to it and
is answered there (RocketMQ's checks come from the broker holding the half, too).
"""

from __future__ import annotations

from typing import Any

from shmq.client.producer.cluster import ClusterProducer
from shmq.client.producer.producer import Producer
from shmq.client.producer.transaction import Check, Execute, TransactionProducer, TransactionSendResult
from shmq.errors import ArgumentTypeError
from shmq.model.message import Message


class ClusterTransactionProducer(ClusterProducer, TransactionProducer):
    """A transaction producer over a cluster; the API of ``TransactionProducer``."""

    def __init__(
        self,
        group: str,
        broker: str | None = None,
        *,
        check: Check,
        check_threads: int = 1,
        namesrv: str | None = None,
        **options: Any,
    ) -> None:
        if not callable(check):
            raise ArgumentTypeError(f"check must be a callable taking a MessageExt, got {type(check).__name__}")
        self.check = check
        self.check_threads = check_threads
        super().__init__(group, broker, namesrv=namesrv, **options)

    def _make_broker_producer(self, broker: str) -> Producer:
        return TransactionProducer(
            self.group, broker, check=self.check, check_threads=self.check_threads, **self._broker_options
        )

    def __enter__(self) -> ClusterTransactionProducer:
        self.start()
        return self

    def send_in_transaction(
        self, msg: Message, execute: Execute, arg: Any = None, timeout: float | None = None
    ) -> TransactionSendResult:
        """As ``TransactionProducer.send_in_transaction``; the half goes to the next broker. A
        failed half is sent to another broker (``execute`` runs once, after a stored half)."""
        if not isinstance(msg, Message):
            raise ArgumentTypeError(f"send_in_transaction takes a Message, got {type(msg).__name__}")

        def half(p: Producer, left: float) -> TransactionSendResult:
            assert isinstance(p, TransactionProducer)  # what _make_broker_producer makes
            return p.send_in_transaction(msg, execute, arg, left)

        return self._retrying(msg.topic, timeout, half)

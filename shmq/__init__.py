"""shmq: a RocketMQ-style message broker for one machine."""

from shmq.client.admin import Admin, ResendResult, TopicInfo
from shmq.client.consumer.lite_pull import LitePullConsumer
from shmq.client.consumer.pull import PullConsumer
from shmq.client.consumer.push import PushConsumer
from shmq.client.consumer.simple import SimpleConsumer
from shmq.client.hooks import ConsumeMessageContext, ConsumeMessageHook, SendMessageContext, SendMessageHook
from shmq.client.msg_lookup import MessageTrack
from shmq.client.producer.producer import Producer
from shmq.client.producer.selectors import SelectMessageQueueByHash, SelectMessageQueueByRandom
from shmq.client.producer.transaction import TransactionProducer, TransactionSendResult, TransactionStatus
from shmq.cluster import Cluster, NameServer
from shmq.errors import (
    ArgumentTypeError,
    BadArgumentError,
    BadExpressionError,
    BadMessageError,
    BadPropertiesError,
    BadTopicError,
    BrokerBusyError,
    BrokerDiskFullError,
    BrokerError,
    BrokerGoneError,
    BrokerNotFoundError,
    BrokerStartError,
    ConfigError,
    ControlProtocolError,
    ControlTimeoutError,
    CorruptFrameError,
    CorruptRecordError,
    DiskFullError,
    ForeignOwnerError,
    HADivergedError,
    HAProtocolError,
    MessageNotFoundError,
    MessageTooLargeError,
    MetadataError,
    NameServerNotFoundError,
    NotAStoreError,
    ReceiptError,
    RegistrationError,
    ReplicaReadOnlyError,
    RouteTableError,
    SendTimeoutError,
    SharedMemoryFullError,
    ShmqError,
    StateLayoutError,
    StoreClosedError,
    StoreLockedError,
    TopicNotReadableError,
)
from shmq.filter.sql import SqlFilter, sql
from shmq.launcher import Broker
from shmq.log import MessageHandler
from shmq.model.consumer_types import ConsumeContext, ConsumeFrom, ConsumeResult, MessageModel, PullResult, PullStatus
from shmq.model.message import Message, MessageBatch, MessageQueue, SendResult, SendStatus
from shmq.model.message_ext import MessageExt, ReceiptHandle
from shmq.trace.record import TraceRecord

__version__ = "0.1.0"
__all__ = [
    "Admin",
    "ArgumentTypeError",
    "BadArgumentError",
    "BadExpressionError",
    "BadMessageError",
    "BadPropertiesError",
    "BadTopicError",
    "Broker",
    "BrokerBusyError",
    "BrokerDiskFullError",
    "BrokerError",
    "BrokerGoneError",
    "BrokerNotFoundError",
    "BrokerStartError",
    "Cluster",
    "ConfigError",
    "ConsumeContext",
    "ConsumeFrom",
    "ConsumeMessageContext",
    "ConsumeMessageHook",
    "ConsumeResult",
    "ControlProtocolError",
    "ControlTimeoutError",
    "CorruptFrameError",
    "CorruptRecordError",
    "DiskFullError",
    "ForeignOwnerError",
    "HADivergedError",
    "HAProtocolError",
    "LitePullConsumer",
    "Message",
    "MessageBatch",
    "MessageExt",
    "MessageHandler",
    "MessageModel",
    "MessageNotFoundError",
    "MessageQueue",
    "MessageTooLargeError",
    "MessageTrack",
    "MetadataError",
    "NameServer",
    "NameServerNotFoundError",
    "NotAStoreError",
    "Producer",
    "PullConsumer",
    "PullResult",
    "PullStatus",
    "PushConsumer",
    "ReceiptError",
    "ReceiptHandle",
    "RegistrationError",
    "ReplicaReadOnlyError",
    "ResendResult",
    "RouteTableError",
    "SelectMessageQueueByHash",
    "SelectMessageQueueByRandom",
    "SendMessageContext",
    "SendMessageHook",
    "SendResult",
    "SendStatus",
    "SendTimeoutError",
    "SharedMemoryFullError",
    "ShmqError",
    "SimpleConsumer",
    "SqlFilter",
    "StateLayoutError",
    "StoreClosedError",
    "StoreLockedError",
    "TopicInfo",
    "TopicNotReadableError",
    "TraceRecord",
    "TransactionProducer",
    "TransactionSendResult",
    "TransactionStatus",
    "sql",
]


def __getattr__(name: str) -> object:
    """`shmq.spark` on first use: it imports pyspark and pyarrow (the `spark` extra), which a
    program that never touches Spark should not pay for or need."""
    if name == "spark":
        import importlib

        return importlib.import_module("shmq.spark")
    if name == "aio":  # asyncio twins: asyncio is loaded only by programs that use them
        import importlib

        return importlib.import_module("shmq.aio")
    raise AttributeError(f"module 'shmq' has no attribute {name!r}")

"""shmq: a RocketMQ-style message broker for one machine."""
from shmq.broker import Broker
from shmq.consumer_types import (ConsumeContext, ConsumeFrom, ConsumeResult, MessageModel, PullResult,
                                 PullStatus)
from shmq.message import Message, MessageBatch, MessageQueue, SendResult, SendStatus
from shmq.message_ext import MessageExt
from shmq.producer import Producer
from shmq.pull_consumer import PullConsumer
from shmq.push_consumer import PushConsumer

__version__ = "0.1.0"
__all__ = ["Broker", "ConsumeContext", "ConsumeFrom", "ConsumeResult", "Message", "MessageBatch", "MessageExt",
           "MessageModel", "MessageQueue", "Producer", "PullConsumer", "PullResult", "PullStatus", "PushConsumer", "SendResult",
           "SendStatus"]

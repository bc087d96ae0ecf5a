"""shmq: a RocketMQ-style message broker for one machine."""
from shmq.launcher import Broker
from shmq.model.consumer_types import (ConsumeContext, ConsumeFrom, ConsumeResult, MessageModel, PullResult,
                                 PullStatus)
from shmq.model.message import Message, MessageBatch, MessageQueue, SendResult, SendStatus
from shmq.model.message_ext import MessageExt
from shmq.client.producer.producer import Producer
from shmq.client.consumer.pull import PullConsumer
from shmq.client.consumer.push import PushConsumer

__version__ = "0.1.0"
__all__ = ["Broker", "ConsumeContext", "ConsumeFrom", "ConsumeResult", "Message", "MessageBatch", "MessageExt",
           "MessageModel", "MessageQueue", "Producer", "PullConsumer", "PullResult", "PullStatus", "PushConsumer", "SendResult",
           "SendStatus"]

"""shmq: a RocketMQ-style message broker for one machine."""
from shmq.broker import Broker
from shmq.message import Message, MessageQueue, SendResult, SendStatus
from shmq.producer import Producer

__version__ = "0.1.0"
__all__ = ["Broker", "Message", "MessageQueue", "Producer", "SendResult", "SendStatus"]

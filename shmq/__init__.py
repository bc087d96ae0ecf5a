"""shmq: a RocketMQ-style message broker for one machine."""
__version__ = "0.1.0"

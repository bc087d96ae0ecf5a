"""The name server: the routes of a cluster of brokers on one host (RocketMQ's NameServer)."""

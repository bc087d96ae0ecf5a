"""Message trace (RocketMQ's msgtrace): hooks on the clients write trace records to a trace topic."""

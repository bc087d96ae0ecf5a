"""Master/replica replication: the wire protocol (pure), the HA segment, the sender and the replica client."""

"""The store's write side: ``LogWriter`` (the one writer of commitlog, consume queues and
index), its doors (``put``, the replica's ``ReplicaAppender``, recovery's ``redispatch``), the
put hooks it runs after, the dispatchers and the compiled plain lane."""

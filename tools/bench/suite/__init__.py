"""Benchmark suite: shmq against the messaging options a Python user would pick instead.

``python -m tools.bench.suite`` (``make bench``; ``make bench QUICK=1`` for the one-minute
smoke run that tests/bench runs) installs what is missing (apt-get: redis-server,
nats-server; pip: the project's ``bench`` extra), starts each system, and runs:

- throughput 1->1 and 4->2 processes, 100 B and 1 KiB, per-message and batch API, end to end
  (the consumer has received and, where the peer acks, acked every message);
- round trip of one synchronous send (p50 / p99 / p99.9);
- durability: 8 senders, each message acked only once on disk (shmq SYNC_FLUSH, Redis
  appendfsync always, NATS sync_interval: always);
- replication: the same 8 senders on a master with one replica, acked once the replica has it
  (shmq SYNC_MASTER + ``shmq replica``; Redis ``replicaof`` + ``WAIT 1 0``) and without waiting
  (ASYNC_MASTER; plain XADD), with each system's sync / async ratio;
- shmq only: send throughput with 8 / 1,000 / 10,000 queues, and a backlog written unconsumed
  then drained.

Every run spawns fresh producer and consumer processes (multiprocessing, spawn) released
together; runs are interleaved across systems and repeated (3 in full, medians and min-max).
A run stops at its message count or its deadline, whichever first ("time-capped" in the
table). Results: a rich table, ``bench/results/<date>-<host>.json`` and a markdown page.
Layout: ``core`` (System interface, process driver), ``peers/`` (one module per system),
``runner`` (interleaving, stats), ``report`` (tables), ``install``, ``machine``, ``settings``.
"""

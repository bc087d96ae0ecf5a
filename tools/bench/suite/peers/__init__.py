"""One module per peer: a ``System`` subclass plus the worker functions its processes run."""

from __future__ import annotations


def all_systems() -> list:
    from . import fifo, iox, mpqueue, natsjs, plaincopy, redisstreams, shmqpeer, zmqipc

    return [
        shmqpeer.Shmq(),
        plaincopy.PlainCopy(),
        mpqueue.MpQueue(),
        fifo.FasterFifo(),
        zmqipc.ZmqIpc(),
        iox.Iceoryx2(),
        redisstreams.RedisStreams(),
        natsjs.NatsJetStream(),
    ]

"""iceoryx2: zero-copy shared-memory publish/subscribe and request/response (Rust, Python bindings).

The no-persistence shared-memory reference: no broker process, no file, nothing kept. Each
message is a loaned ``Slice[c_uint8]`` sample: the producer copies its ``bytes`` into the loan
and sends it, the consumer copies the payload out into a ``bytes`` object (what a Python
program holds after a receive) and returns the sample.

Delivery is lossless: safe overflow is off (iceoryx2's default drops the oldest sample), the
publishers' backpressure strategy is RetryUntilDelivered, and a producer sends a message again
when ``send()`` says no subscriber took it: with two publishers on a full subscriber buffer,
0.10.0 returned 0 for about 0.3 % of the samples in 4 -> 2 (measured: those were exactly the
messages missing at the consumers). Pub/sub fans out to every
subscriber, so 4 -> 2 gives each consumer its own service and producer i publishes to
consumer i % 2 (as the plain-copy reference does). iceoryx2 has no batch call: the batch row
sends one sample carrying 100 messages back to back and the consumer cuts it into 100
``bytes``. Waiting is busy polling with ``sched_yield`` (iceoryx2's own receive never blocks;
its event service would add a syscall per message), both sides of the round trip included.

The parent process creates each run's services (so both ends open them with one
configuration, without a create race) and holds them until the run is cleaned up.
"""

from __future__ import annotations

import ctypes
import os
import time

from ..core import System, body, timed_loop

BUFFER = 1024  # samples a subscriber (or the response queue) holds before the sender retries
STOP = b"\0"  # a round-trip request of another length than the workload's ends the echo server


def _iox():
    import iceoryx2 as iox2

    iox2.set_log_level(iox2.LogLevel.Error)  # its Info-level notices on service creation are noise here
    return iox2


def _node(iox2):
    return iox2.NodeBuilder.new().create(iox2.ServiceType.Ipc)


def _name(run_id: str, what: str) -> str:
    return f"shmq-bench/{os.getpid()}/{run_id}/{what}"


class Iceoryx2(System):
    name = "iceoryx2"
    title = "iceoryx2 publish/subscribe, request/response (zero-copy shared memory)"
    how = (
        "loan_slice_uninit + memmove + send / receive + string_at, lossless (no safe overflow, "
        "RetryUntilDelivered, resent when send() reports 0 subscribers); "
        "batch = one 100-message sample cut into 100 bytes; busy polling; "
        "round trip = request/response"
    )
    persistence = "none"
    broker = False
    note = "no persistence, no broker (zero-copy shared memory)"
    latency_server = True

    def install(self):
        try:
            _iox()
        except ImportError as e:
            return f"iceoryx2 not importable: {e}"
        return None

    def versions(self):
        from importlib.metadata import version

        return {"iceoryx2": version("iceoryx2")}

    def start(self, workdir):
        self.node = _node(_iox())
        self.held: dict[str, list] = {}

    def stop(self):
        self.held.clear()
        self.node = None

    def tput_context(self, spec):
        iox2 = _iox()
        names, factories = [], []
        per_consumer = [sum(1 for p in range(spec.producers) if p % spec.consumers == c) for c in range(spec.consumers)]
        for c in range(spec.consumers):
            name = _name(spec.run_id, f"c{c}")
            factories.append(_pubsub(iox2, self.node, name).max_publishers(per_consumer[c]).max_subscribers(1).create())
            names.append(name)
        self.held[spec.run_id] = factories
        return names

    def tput_cleanup(self, spec, ctx):
        self.held.pop(spec.run_id, None)

    def latency_context(self, spec):
        iox2 = _iox()
        name = _name(spec.run_id, "rr")
        self.held[spec.run_id] = [_reqres(iox2, self.node, name).create()]
        return name

    def latency_cleanup(self, spec, ctx):
        self.held.pop(spec.run_id, None)


def _pubsub(iox2, node, name):
    return (
        node.service_builder(iox2.ServiceName.new(name))
        .publish_subscribe(iox2.Slice[ctypes.c_uint8])
        .enable_safe_overflow(False)
        .history_size(0)
        .subscriber_max_buffer_size(BUFFER)
    )


def _reqres(iox2, node, name):
    u8 = iox2.Slice[ctypes.c_uint8]
    return (
        node.service_builder(iox2.ServiceName.new(name))
        .request_response(u8, u8)
        .enable_safe_overflow_for_requests(False)
        .enable_safe_overflow_for_responses(False)
        .max_clients(1)
        .max_servers(1)
    )


def _wait_connected(port_is_ready, deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while not port_is_ready() and time.monotonic() < end:
        time.sleep(0.002)


def tput_producer(names, spec, idx, n, sync):
    iox2 = _iox()
    node = _node(iox2)
    service = _pubsub(iox2, node, names[idx % spec.consumers]).open()
    length = spec.size * (spec.batch if spec.api == "batch" else 1)
    pub = (
        service.publisher_builder()
        .initial_max_slice_len(length)
        .backpressure_strategy(iox2.BackpressureStrategy.RetryUntilDelivered)
        .create()
    )
    # a sample sent before the subscriber exists is lost (no history): wait for it
    _wait_connected(lambda: service.dynamic_config.number_of_subscribers >= 1)
    data = body(spec.size)
    memmove = ctypes.memmove
    loan = pub.loan_slice_uninit
    yield_ = os.sched_yield
    sync.ready()
    sent = 0
    if spec.api == "batch":
        chunk = [data] * spec.batch
        while sent < n:
            k = min(spec.batch, n - sent)
            block = b"".join(chunk if k == spec.batch else chunk[:k])
            while True:
                sample = loan(len(block))
                memmove(sample.payload_ptr, block, len(block))
                if sample.assume_init().send():
                    break
                yield_()
            sent += k
            if sync.expired():
                break
    else:
        size = spec.size
        while sent < n:
            sample = loan(size)
            memmove(sample.payload_ptr, data, size)
            if not sample.assume_init().send():
                yield_()
                continue
            sent += 1
            if sent & 255 == 0 and sync.expired():
                break
    sync.sent(sent)
    sync.wait_consumed()  # dropping the publisher would take its undelivered samples with it
    return sent


def tput_consumer(names, spec, idx, sync):
    iox2 = _iox()
    node = _node(iox2)
    service = _pubsub(iox2, node, names[idx]).open()
    sub = service.subscriber_builder().buffer_size(BUFFER).create()
    receive = sub.receive
    string_at = ctypes.string_at
    size = spec.size
    yield_ = os.sched_yield
    sync.ready()
    idle_since = None
    done = False
    while not done:
        sample = receive()
        if sample is not None:
            idle_since = None
            payload = string_at(sample.payload_ptr, sample.header.number_of_elements)
            sample.delete()
            if spec.api == "batch":
                msgs = [payload[i : i + size] for i in range(0, len(payload), size)]
                done = sync.got(len(msgs))
            else:
                done = sync.got(1)
            continue
        now = time.perf_counter()
        if idle_since is None:
            idle_since = now
        elif now - idle_since > 0.01:
            done = sync.idle()
            idle_since = now
        yield_()


def latency_server(name, spec, sync):
    iox2 = _iox()
    node = _node(iox2)
    service = _reqres(iox2, node, name).open()
    server = service.server_builder().initial_max_slice_len(spec.size).create()
    receive = server.receive
    string_at = ctypes.string_at
    memmove = ctypes.memmove
    sync.ready()
    while True:
        request = receive()
        if request is None:
            continue
        m = string_at(request.payload_ptr, request.header.number_of_elements)
        response = request.loan_slice_uninit(len(m))
        memmove(response.payload_ptr, m, len(m))
        response.assume_init().send()
        request.delete()
        if len(m) != spec.size:  # the client's stop request
            return None


def latency_client(name, spec, sync):
    iox2 = _iox()
    node = _node(iox2)
    service = _reqres(iox2, node, name).open()
    client = service.client_builder().initial_max_slice_len(spec.size).create()
    data = body(spec.size)
    memmove = ctypes.memmove
    string_at = ctypes.string_at
    sync.ready()
    _wait_connected(lambda: service.dynamic_config.number_of_servers >= 1)

    def once(payload: bytes = data) -> bytes:
        request = client.loan_slice_uninit(len(payload))
        memmove(request.payload_ptr, payload, len(payload))
        pending = request.assume_init().send()
        while True:
            response = pending.receive()
            if response is not None:
                out = string_at(response.payload_ptr, len(payload))
                response.delete()
                pending.delete()
                return out

    for _ in range(50):
        once()
    lat = timed_loop(sync, once, spec.rounds)
    once(STOP)
    return lat

# cython: language_level=3
"""Compiled twin of ``accumulate`` / ``accumulate_oneway`` (shmq.client.producer.accumulator).

``send_async`` of a plain message was a dozen Python calls (the API wrapper, queue choice,
``delivery_rules``, ``MessageEncoder.check``, ``ProduceAccumulator.add``, the future's
``__init__``); here it is one C function doing the same steps in the same order under the
accumulator's lock: the same batches, futures and errors as the Python reference (the
accumulator tests run both ways, tests/speedups/test_accumulate.py compares them). Nothing is
read from shared memory: only the caller's objects.

The accumulator module imports this one while it is itself being imported, so its classes
and constants are looked up at the first call.
"""
import sys

from cpython.object cimport PyObject, PyTypeObject

from shmq.codec.record import check_topic
from shmq.errors import ShmqError
from shmq.model.message import Message
from shmq._speedups._message cimport MessageFields

cdef object _Message = Message
cdef bint _slotted = issubclass(Message, MessageFields)  # False with extensions off (tests call this anyway)
cdef object _checked_topic = None  # the last topic check_topic passed (a str: the same object passes again)
cdef object _PendingSend = None
cdef PyTypeObject* _future_type = NULL  # PendingSend, made by its tp_new (object's) with no call
cdef tuple _no_args = ()
cdef Py_ssize_t _record_overhead = 0
cdef Py_ssize_t _max_batch_messages = 0


cdef class Batch:
    """Compiled twin of the accumulator's ``Batch`` (same fields, same constructor): ``_add``
    reads and writes its fields in C instead of looking up a Python object's attributes, which
    was most of the C ``_add``'s instructions."""
    cdef public object key
    cdef public object accumulator
    cdef public object condition
    cdef public list msgs
    cdef public list futures
    cdef public Py_ssize_t size
    cdef public bint sent

    def __init__(self, key, accumulator, condition):
        self.key = key
        self.accumulator = accumulator
        self.condition = condition
        self.msgs = []
        self.futures = []
        self.size = 0
        self.sent = False


cdef int _bind() except -1:
    global _PendingSend, _future_type, _record_overhead, _max_batch_messages
    mod = sys.modules["shmq.client.producer.accumulator"]
    if mod.PendingSend.__new__ is not object.__new__:  # as before: made without __init__, by object's tp_new
        raise TypeError("PendingSend must keep object's __new__")
    _PendingSend = mod.PendingSend
    _future_type = <PyTypeObject*>_PendingSend
    _record_overhead = mod.RECORD_OVERHEAD
    _max_batch_messages = mod.MAX_BATCH_MESSAGES
    return 0


cdef bint _plain(object msg, Py_ssize_t limit) except -1:
    """As the reference ``_plain``: a Message with nothing to check but topic and body. Its
    fields are read as C slots (``MessageFields``), and a topic is checked once while it stays
    the same object: eight attribute lookups and the lru-cached ``check_topic`` call were most
    of this function's instructions."""
    global _checked_topic
    cdef MessageFields m
    if type(msg) is not _Message:
        return False
    if _slotted:
        m = <MessageFields>msg
        if m.tags or m.keys or m.properties or m.delay_level or m.deliver_at is not None or m.delay is not None:
            return False
        body, topic = m.body, m.topic
    else:
        if msg.tags or msg.keys or msg.properties or msg.delay_level or msg.deliver_at is not None \
                or msg.delay is not None:
            return False
        body, topic = msg.body, msg.topic
    if type(body) is not bytes or len(<bytes>body) > limit:
        return False
    if type(topic) is not str:
        return False
    if topic is not _checked_topic:
        try:
            check_topic(topic)
        except ShmqError:
            return False
        _checked_topic = topic
    return True


cdef object _add(object acc, object msg, bint oneway):
    """``ProduceAccumulator.add(msg, -1, oneway)``, step for step."""
    cdef Batch b
    if _PendingSend is None:
        _bind()
    topic = (<MessageFields>msg).topic if _slotted else msg.topic
    key = (topic, -1)
    lock = acc._lock
    lock.acquire()
    try:
        if acc._closed:
            raise ShmqError("the producer was shut down")
        found = (<dict?>acc._batches).get(key)
        b = <Batch?>(acc._new_batch(key) if found is None else found)
        if oneway:
            future = None
        else:
            future = _future_type.tp_new(<type>_PendingSend, <PyObject*>_no_args, NULL)
            future._condition = b.condition
            future._batch = b
        b.msgs.append(msg)
        b.futures.append(future)
        b.size += len(<bytes>((<MessageFields>msg).body if _slotted else msg.body)) + _record_overhead
        if b.size >= <Py_ssize_t>acc.max_bytes or len(b.msgs) >= _max_batch_messages:
            acc._send_full(b)
    finally:
        lock.release()
    return future


def accumulate(acc, msg, Py_ssize_t limit):
    """Queue a plain message (``_plain``) for the broker to pick its queue: its future, or
    None (not queued: the caller takes the general path)."""
    if not _plain(msg, limit):
        return None
    return _add(acc, msg, False)


def accumulate_oneway(acc, msg, Py_ssize_t limit):
    """``accumulate`` for ``send_oneway``: True if ``msg`` was queued."""
    if not _plain(msg, limit):
        return False
    _add(acc, msg, True)
    return True


from concurrent.futures._base import FINISHED as _FINISHED, RUNNING as _RUNNING


def settle_shared(futures, results, error):
    """As the reference ``_settle_shared`` (shmq.client.producer.accumulator): when every future
    (None skipped) shares one Condition, finish them under it, notify once, and return those
    with callbacks to run; None, having done nothing, when the Conditions differ. The futures'
    fields are read and stored in their ``__dict__`` (no data descriptors there: the same as
    the reference's attribute stores), without a bytecode loop or an (index, future) tuple per
    message."""
    cdef list finished = []
    cdef dict own
    cdef Py_ssize_t i
    cdef list fs = list(futures)  # our own copy: indexed unchecked below while Python code runs
    cond = None
    for f in fs:
        if f is not None:
            c = f._condition
            if cond is None:
                cond = c
            elif c is not cond:
                return None
    if cond is None:
        return finished
    with cond:
        for i in range(len(fs)):
            f = fs[i]
            if f is None:
                continue
            own = f.__dict__
            state = own.get("_state")  # absent: the class's PENDING
            if state is None or (state is not _RUNNING and state != _RUNNING):
                continue
            if error is not None:
                failed = error
            else:
                r = results[i]
                failed = r if isinstance(r, BaseException) else None
            if failed is not None:
                own["_exception"] = failed
            else:
                own["_result"] = r
            own["_state"] = _FINISHED
            waiters = own.get("_waiters")
            if waiters:  # concurrent.futures.wait / as_completed
                for w in waiters:
                    if failed is not None:
                        w.add_exception(f)
                    else:
                        w.add_result(f)
            if own.get("_done_callbacks"):
                finished.append(f)
        cond.notify_all()
    return finished

# cython: language_level=3, auto_pickle=False
"""Compiled twins of ``shmq.model.message._Fields`` (the storage and ``__init__`` of ``Message``)
and ``_ResultFields`` (the storage of ``SendResult``, filled by ``split_results``).

``shmq.Message(topic, body)`` was a Python ``__init__`` (argument binding, a frame, three
checks, nine dict stores): ~5,000 instructions, as much as the rest of an auto-batched
``send_async``. Here the fields are C slots and a message with no delay, no delivery time and
keys given as a str (or none) is stored without a Python frame. Anything else goes through the
reference checks (``_checked`` in shmq.model.message), so every error and every normalised
value is the reference's by construction. Nothing here reads shared memory.
"""

cdef object _checked = None
cdef object _UNSET = None


cdef inline object _reference_checks():
    """shmq.model.message imports this module while it is being imported: look it up once, later."""
    global _checked
    if _checked is None:
        from shmq.model.message import _checked as fn
        _checked = fn
    return _checked


cdef class MessageFields:
    """The nine fields of a Message as C slots, declared in _message.pxd (``Message`` adds the
    dataclass methods)."""

    def __init__(self, topic, body, tags=None, keys=None, properties=None, flag=0, delay_level=0,
                 deliver_at=None, delay=None):
        if delay_level or deliver_at is not None or delay is not None or (keys is not None and type(keys) is not str):
            delay_level, deliver_at, delay, keys = _reference_checks()(delay_level, deliver_at, delay, keys)
        self.topic = topic
        self.body = body
        self.tags = tags
        self.keys = keys
        self.properties = properties
        self.flag = flag
        self.delay_level = delay_level
        self.deliver_at = deliver_at
        self.delay = delay


cdef class SendResultFields:
    """The ten slots of a SendResult as C slots (``SendResult`` adds equality, repr, the lazy
    ids and pickling). ``split_results`` fills them with C stores: a result made with
    ``object.__new__`` and ten generic attribute stores cost ~3,400 instructions, most of the
    reader thread's work per auto-batched message. Declared in _message.pxd."""


cdef object _SendResult = None
cdef object _reference_split = None
cdef bint _compiled_base = False


def split_results(cls, status, uniqs, queue, queue_offset, store_timestamp, phys_offsets, store_host):
    """As the reference ``_split_results``: a SendResult per message, its slots stored in C
    (what ``SendResult.__init__`` stores for a str id and no offset id), without a Python
    ``__init__`` frame per message. Another ``cls`` (a subclass may have an ``__init__`` of its
    own), a SendResult on the Python base (extensions off) and a non-str id take the reference path."""
    global _UNSET, _SendResult, _reference_split, _compiled_base
    if _SendResult is None:
        from shmq.model import message as model
        _UNSET, _SendResult, _reference_split = model.UNSET, model.SendResult, model._split_results
        _compiled_base = issubclass(_SendResult, SendResultFields)
    if cls is not _SendResult or not _compiled_base:
        return _reference_split(cls, status, uniqs, queue, queue_offset, store_timestamp, phys_offsets, store_host)
    cdef list out = []
    cdef Py_ssize_t i = 0
    cdef SendResultFields r
    for uniq, p in zip(uniqs, phys_offsets):
        if type(uniq) is not str:
            out.append(cls(status, uniq, None, queue, queue_offset + i, store_timestamp, 1, [p], store_host))
        else:
            r = SendResultFields.__new__(cls)
            r.status = status
            r.queue = queue
            r.queue_offset = queue_offset + i
            r.store_timestamp = store_timestamp
            r.count = 1
            r.phys_offsets = [p]
            r.store_host = store_host
            r._msg_id = uniq
            r._make_msg_id = None
            r._offset_msg_id = _UNSET
            out.append(r)
        i += 1
    return out

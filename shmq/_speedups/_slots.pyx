# cython: language_level=3
"""Compiled twins of the put over many queues through the queue table (``shmq.store.write.multi_put``;
table layout: ``shmq.store.queue_slots``; entry layout: docs/FORMAT.md section 4).

``plan`` gives each record its queue's row and queue offset and says which rows lack room;
``write_entries`` writes the consume-queue entries through the rows' cached file addresses,
in ``ConsumeQueue.put``'s order (offset, tags code, size last, then the file's
``wrote_position`` and the row's max offset and max physical end). A record's queue costs one
64-byte row and its entry's bytes: no Python object of the queue is read.
"""
from cpython.object cimport PyObject
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy

from shmq._speedups._layout cimport CQ_ENTRY_SIZE, put_u32, put_u64

cdef extern from *:
    """
    enum { SHMQ_SLOT_WIDTH = 8, SHMQ_S_MAX_OFFSET = 0, SHMQ_S_MAX_PHYS_END = 1, SHMQ_S_FILE_FROM = 2,
           SHMQ_S_FILE_LIMIT = 3, SHMQ_S_FILE_ADDR = 4, SHMQ_S_PENDING = 5 };
    #define SHMQ_S_MAX_QOFF (((long long)1) << 58)
    """
    enum:
        WIDTH "SHMQ_SLOT_WIDTH"
        MAX_OFFSET "SHMQ_S_MAX_OFFSET"
        MAX_PHYS_END "SHMQ_S_MAX_PHYS_END"
        FILE_FROM "SHMQ_S_FILE_FROM"
        FILE_LIMIT "SHMQ_S_FILE_LIMIT"
        FILE_ADDR "SHMQ_S_FILE_ADDR"
        PENDING "SHMQ_S_PENDING"
    const int64_t MAX_QOFF "SHMQ_S_MAX_QOFF"

LAYOUT = {"WIDTH": WIDTH, "MAX_OFFSET": MAX_OFFSET, "MAX_PHYS_END": MAX_PHYS_END, "FILE_FROM": FILE_FROM,
          "FILE_LIMIT": FILE_LIMIT, "FILE_ADDR": FILE_ADDR, "PENDING": PENDING, "CQ_ENTRY_SIZE": CQ_ENTRY_SIZE}
"""The constants compiled in, checked against the Python reference by the tests."""


def plan(list tslots, topic_idx, queue_ids, enters, table, slots_out, qoffs_out, spare_out):
    """See ``shmq.store.multi_put.plan``."""
    cdef const int64_t[:] tix = topic_idx
    cdef const int64_t[:] qid = queue_ids
    cdef const uint8_t[:] ent
    cdef int64_t[:, ::1] t = table
    cdef int64_t[::1] slots = slots_out
    cdef int64_t[::1] qoffs = qoffs_out
    cdef int64_t[::1] spare = spare_out
    cdef Py_ssize_t n = tix.shape[0], i, m = 0, rows = t.shape[0], ntopics = PyList_GET_SIZE(tslots)
    cdef int64_t k, q, s, start, end
    cdef int32_t s32
    cdef object packed
    cdef bint all_enter = enters is None
    if not all_enter:
        ent = enters
        if ent.shape[0] != n:
            raise ValueError("enters is not one flag per record")
    if qid.shape[0] != n or slots.shape[0] < n or qoffs.shape[0] < n or spare.shape[0] < n or t.shape[1] != WIDTH:
        raise ValueError("columns of another length than the records")
    for i in range(n):
        if not all_enter and not ent[i]:
            slots[i] = -1
            qoffs[i] = 0
            continue
        k = tix[i]
        q = qid[i]
        s = -1
        if 0 <= k < ntopics and q >= 0:
            packed = <object>PyList_GET_ITEM(tslots, k)
            if type(packed) is bytes and (q + 1) * 4 <= PyBytes_GET_SIZE(packed):
                memcpy(&s32, PyBytes_AS_STRING(packed) + q * 4, 4)
                s = s32
        if s < 0 or s >= rows:
            spare[m] = i
            m += 1
            slots[i] = -1
            continue
        t[s, PENDING] += 1
        slots[i] = s
        qoffs[i] = t[s, MAX_OFFSET] + t[s, PENDING] - 1
    if m:
        for i in range(n):
            if slots[i] >= 0:
                t[slots[i], PENDING] = 0
        return 2, m
    for i in range(n):
        s = slots[i]
        if s < 0 or t[s, PENDING] == 0:
            continue
        start = t[s, MAX_OFFSET] * CQ_ENTRY_SIZE - t[s, FILE_FROM]
        end = start + t[s, PENDING] * CQ_ENTRY_SIZE
        if (t[s, FILE_ADDR] == 0 or start < 0 or end > t[s, FILE_LIMIT] or t[s, MAX_OFFSET] < 0
                or t[s, MAX_OFFSET] + t[s, PENDING] >= MAX_QOFF):
            spare[m] = s
            m += 1
        t[s, PENDING] = 0
    return (1 if m else 0), m


def write_entries(slots_in, qoffs_in, phys_in, sizes_in, tags_in, table, list files):
    """See ``shmq.store.multi_put.write_entries``."""
    cdef const int64_t[:] slots = slots_in
    cdef const int64_t[:] qoffs = qoffs_in
    cdef const int64_t[:] ph = phys_in
    cdef const int64_t[:] sz = sizes_in
    cdef const int64_t[:] tg = tags_in
    cdef int64_t[:, ::1] t = table
    cdef Py_ssize_t n = slots.shape[0], i, rows = t.shape[0]
    cdef int64_t s, pos, size
    cdef uint8_t* e
    if qoffs.shape[0] != n or ph.shape[0] != n or sz.shape[0] != n or tg.shape[0] != n:
        raise ValueError("columns of another length than the records")
    cdef str problem = None
    for i in range(n):  # every entry checked before any byte is written
        s = slots[i]
        if s < 0:
            continue
        if s >= rows or s >= PyList_GET_SIZE(files):
            problem = f"record {i}: no queue row {s}"
            break
        pos = qoffs[i] * CQ_ENTRY_SIZE - t[s, FILE_FROM]
        size = sz[i]
        if t[s, FILE_ADDR] == 0 or pos < 0 or pos + CQ_ENTRY_SIZE > t[s, FILE_LIMIT] or not 0 <= size <= 0x7FFFFFFF:
            problem = f"record {i}: its entry is outside its queue's attached file"
            break
        t[s, PENDING] += 1
        if qoffs[i] != t[s, MAX_OFFSET] + t[s, PENDING] - 1:
            problem = f"record {i}: queue offset {qoffs[i]} is not its queue's next"
            break
    for i in range(n):
        s = slots[i]
        if 0 <= s < rows:
            t[s, PENDING] = 0
    if problem is not None:
        raise ValueError(problem)
    for i in range(n):
        s = slots[i]
        if s < 0:
            continue
        pos = qoffs[i] * CQ_ENTRY_SIZE - t[s, FILE_FROM]
        e = <uint8_t*><size_t>t[s, FILE_ADDR] + pos
        put_u64(e, <uint64_t>ph[i])
        put_u64(e + 12, <uint64_t>tg[i])
        put_u32(e + 8, <uint32_t>sz[i])  # last: recovery takes a non-zero size as a whole entry
        mf = <object>PyList_GET_ITEM(files, s)
        mf.wrote_position = pos + CQ_ENTRY_SIZE
        t[s, MAX_OFFSET] = qoffs[i] + 1
        t[s, MAX_PHYS_END] = ph[i] + sz[i]

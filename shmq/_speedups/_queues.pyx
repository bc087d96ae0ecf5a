# cython: language_level=3
"""Compiled twin of the consume-queue dispatch of a put over many queues (entry layout:
docs/FORMAT.md section 4).

``reserve_each`` is ``shmq.store.consume_queue.reserve_each`` and ``put_rows`` is
``shmq.store.write.dispatch.put_rows``. With 1,250 topics sending, a put of 256
records touches 256 queues with one record each, and the reference's ``ConsumeQueue.put`` (a
method call, ``last_file``, three ``struct.pack_into``) cost more per record than the rest of
the put. Here a queue's entry is written directly into its last file when that file has room
and the entry is the queue's next one (the case of every put but a file's first or last entry);
otherwise, and for queues with more than two records, the same Python calls as the reference
run. Same write order as ``ConsumeQueue.put``: offset, tags code, then size (recovery takes a
non-zero size as a whole entry), then ``wrote_position``, ``max_offset``, ``max_phys_end``.
"""
from cpython.buffer cimport PyBUF_WRITABLE, PyObject_GetBuffer, PyBuffer_Release
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

from shmq._speedups._layout cimport CQ_ENTRY_SIZE, put_u32, put_u64

import numpy as np

cdef extern from *:
    """
    #define SHMQ_MAX_QOFF (((long long)1) << 58)
    #define SHMQ_MAX_FIELD (((long long)1) << 62)
    """
    const int64_t MAX_QOFF "SHMQ_MAX_QOFF"
    const int64_t MAX_FIELD "SHMQ_MAX_FIELD"

LAYOUT = {"CQ_ENTRY_SIZE": CQ_ENTRY_SIZE}
"""The constants compiled in, checked against the Python reference by the tests."""


cdef inline bint _small(object x):
    """An int the fast paths may take into int64 arithmetic without overflow (else: the reference's calls)."""
    return type(x) is int and 0 <= x < MAX_FIELD


cdef bint _put_fast(object q, int64_t phys, int64_t size, int64_t tags, int64_t qoff) except -1:
    """Write the entry like ``ConsumeQueue.put`` if it is the queue's next and its last file has
    reserved room for it; False (nothing changed) where the reference would do anything else."""
    cdef Py_buffer buf
    cdef int64_t from_, fsize, pos
    if q.max_offset != qoff:
        return False
    files = q.queue.files
    if type(files) is not list or not files:
        return False
    mf = (<list>files)[len(<list>files) - 1]  # wraparound is off: no negative index
    fsize_o, wrote_o, from_o, reserved_o = mf.size, mf.wrote_position, mf.file_from_offset, mf.reserved_position
    if not (_small(fsize_o) and _small(wrote_o) and _small(from_o) and _small(reserved_o)):
        return False
    fsize = fsize_o
    if <int64_t>wrote_o >= fsize:  # last_file would start the next file
        return False
    from_ = from_o
    pos = qoff * CQ_ENTRY_SIZE - from_
    if pos < 0 or pos + CQ_ENTRY_SIZE > fsize or pos + CQ_ENTRY_SIZE > <int64_t>reserved_o:
        return False
    PyObject_GetBuffer(mf.view, &buf, PyBUF_WRITABLE)
    try:
        if buf.len < pos + CQ_ENTRY_SIZE:
            return False
        put_u64(<uint8_t*>buf.buf + pos, <uint64_t>phys)
        put_u64(<uint8_t*>buf.buf + pos + 12, <uint64_t>tags)
        put_u32(<uint8_t*>buf.buf + pos + 8, <uint32_t>size)
    finally:
        PyBuffer_Release(&buf)
    mf.wrote_position = pos + CQ_ENTRY_SIZE
    q.max_offset = qoff + 1
    q.max_phys_end = phys + size
    return True


cdef bint _int64_column(object c):
    return type(c) is np.ndarray and c.dtype == np.int64 and c.ndim == 1


def put_rows(queues, rows, firsts, phys, sizes, tags):
    """See ``shmq.store.write.dispatch.put_rows``; any input the fast path does not take (columns
    that are not int64 arrays, rows outside them, sizes or offsets out of the entry's range)
    goes through the reference's own calls, so results and errors are the reference's."""
    cdef const int64_t[::1] ph, sz, tg
    cdef Py_ssize_t n, k, nr
    cdef int64_t i, s, p
    if not (_int64_column(phys) and _int64_column(sizes) and _int64_column(tags)):
        from shmq import _speedups
        return _speedups.reference("_queues", "put_rows")(queues, rows, firsts, phys, sizes, tags)
    ph, sz, tg = phys, sizes, tags
    n = min(len(ph), len(sz), len(tg))
    for q, r, first_o in zip(queues, rows, firsts):
        nr = len(r)
        if nr > 2:
            q.put_batch(phys[r], sizes[r], tags[r], first_o)
            continue
        idx = r.tolist()
        for k in range(nr):
            i_o = idx[k]
            qoff_o = first_o + k
            if type(i_o) is int and type(qoff_o) is int and 0 <= i_o < n and 0 <= qoff_o < MAX_QOFF:
                i = i_o
                s = sz[i]
                p = ph[i]
                if 0 <= s <= 0x7FFFFFFF and _put_fast(q, p, s, tg[i], qoff_o):
                    continue
            q.put(int(phys[i_o]), int(sizes[i_o]), int(tags[i_o]), qoff_o)


def reserve_each(queues):
    """See ``shmq.store.consume_queue.reserve_each``: where the queue's last file already has
    reserved room for ``count`` more entries (``ConsumeQueue.reserve``'s first test) nothing is
    called; any other case, or values outside the fast path's range, calls ``cq.reserve``."""
    cdef int64_t end, from_
    for cq, count in queues:
        mo = cq.max_offset
        if type(count) is int and type(mo) is int and 0 <= count < MAX_QOFF and 0 <= mo < MAX_QOFF:
            end = (<int64_t>mo + <int64_t>count) * CQ_ENTRY_SIZE
            files = cq.queue.files
            if type(files) is list and files:
                mf = (<list>files)[len(<list>files) - 1]  # wraparound is off: no negative index
                from_o, size_o, reserved_o = mf.file_from_offset, mf.size, mf.reserved_position
                if _small(from_o) and _small(size_o) and _small(reserved_o):
                    from_ = from_o
                    if end <= from_ + <int64_t>size_o and end - from_ <= <int64_t>reserved_o:
                        continue
        cq.reserve(count)


def flush_queues(queues, least_pages):
    """``cq.flush(least_pages)`` for each queue that would flush: see the reference. A queue's
    dirty pages (``MappedFileQueue.dirty_pages``: its two last files' unflushed pages) are
    counted here when the queue and its files are the store's own types with int positions;
    any other queue, and every queue when ``least_pages`` is 0, gets the call itself."""
    from shmq.store.consume_queue import ConsumeQueue
    from shmq.store.mapped_file import PAGE_SIZE, MappedFile, MappedFileQueue
    cdef Py_ssize_t k, nf
    cdef int64_t dirty, page = PAGE_SIZE, diff
    cdef bint fast
    if type(least_pages) is not int or not 0 < least_pages < MAX_FIELD:
        for cq in queues:
            cq.flush(least_pages)
        return
    cdef int64_t least = least_pages
    for cq in queues:
        fast = type(cq) is ConsumeQueue
        if fast:
            mfq = (<object>cq).queue
            fast = type(mfq) is MappedFileQueue and type(mfq.files) is list
        if fast:
            files = <list>mfq.files
            nf = len(files)
            dirty = 0
            for k in range(nf - 2 if nf > 2 else 0, nf):
                mf = files[k]
                w, f = mf.wrote_position, mf.flushed_position
                if type(mf) is not MappedFile or not _small(w) or not _small(f):
                    fast = False
                    break
                diff = <int64_t>w - <int64_t>f
                dirty += diff // page if diff >= 0 else -((-diff + page - 1) // page)  # Python's floor division
            if fast and dirty < least:
                continue
        cq.flush(least_pages)

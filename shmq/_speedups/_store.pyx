# cython: language_level=3
"""Compiled twins of the store's per-record loops (index layout: docs/FORMAT.md section 5).

``put_entries`` is ``shmq.store.index_file.put_entries``: one pass over a batch writes the
index entries (chaining records of the same slot within the batch through a small hash table
instead of numpy's sort and temporaries), then the header's index count, then the slots, the
same write order as the reference (the crash contract of shmq.store.index_file). Every bound is
checked before any byte is written, with the GIL released for the loops.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc

from shmq._speedups._layout cimport (CQ_ENTRY_SIZE, FIXED_OVERHEAD, MESSAGE_MAGIC, MIN_BLANK, OFF_BODY, OFF_BODYCRC,
                                    OFF_BODYLEN, OFF_MAGIC, OFF_PHYSICALOFFSET, OFF_QUEUEID, OFF_QUEUEOFFSET,
                                    OFF_STOREHOST, OFF_STORETIMESTAMP, OFF_SYSFLAG, get_i32, get_u32, put_u32, put_u64)

cdef extern from *:
    """
    enum { SHMQ_INDEX_HEADER_SIZE = 40, SHMQ_INDEX_SLOT_SIZE = 4, SHMQ_INDEX_ENTRY_SIZE = 20,
           SHMQ_H_COUNT = 36 };
    #define SHMQ_MAX_DIFF 0x7FFFFFFFLL
    """
    void prefetch_w "__builtin_prefetch"(const void* p, int rw, int locality) nogil
    enum:
        INDEX_HEADER_SIZE "SHMQ_INDEX_HEADER_SIZE"
        INDEX_SLOT_SIZE "SHMQ_INDEX_SLOT_SIZE"
        INDEX_ENTRY_SIZE "SHMQ_INDEX_ENTRY_SIZE"
        H_COUNT "SHMQ_H_COUNT"
    const int64_t MAX_DIFF "SHMQ_MAX_DIFF"

LAYOUT = {"INDEX_HEADER_SIZE": INDEX_HEADER_SIZE, "INDEX_SLOT_SIZE": INDEX_SLOT_SIZE,
          "INDEX_ENTRY_SIZE": INDEX_ENTRY_SIZE, "_H_COUNT": H_COUNT, "_MAX_DIFF": MAX_DIFF}
"""The constants compiled in, checked against the Python reference by the tests."""


cdef int64_t _write(uint8_t* mm, int64_t slot_num, Py_ssize_t entry_base, int64_t first, int64_t begin_ts,
                    const int64_t[:] hashes, const int64_t[:] phys, const int64_t[:] ts, Py_ssize_t n,
                    int64_t* keys, int32_t* last, int32_t* old, uint64_t mask) noexcept nogil:
    """Entries, count, slots; ``keys`` (slot + 1, 0 = free), ``last``, ``old``: a zeroed
    open-addressing table of mask + 1 >= 2n buckets. Returns how many slots were empty."""
    cdef Py_ssize_t i
    cdef uint64_t b
    cdef int64_t slot, diff, num
    cdef int32_t prev
    cdef uint8_t* e
    cdef uint8_t* slots = mm + INDEX_HEADER_SIZE
    cdef int64_t emptied = 0
    for i in range(n):  # the slots are one random 4-byte word each in a table of MBs: load them all at once
        slot = hashes[i] % slot_num
        prefetch_w(slots + (slot + slot_num if slot < 0 else slot) * INDEX_SLOT_SIZE, 1, 3)
    for i in range(n):
        slot = hashes[i] % slot_num
        if slot < 0:
            slot += slot_num  # numpy's (Python's) modulo: the sign of the divisor
        b = (<uint64_t>slot * 0x9E3779B97F4A7C15ULL) >> 32 & mask
        while keys[b] != 0 and keys[b] != slot + 1:
            b = (b + 1) & mask
        if keys[b] == 0:
            keys[b] = slot + 1
            old[b] = get_i32(slots + slot * INDEX_SLOT_SIZE)
            prev = old[b]
        else:
            prev = last[b]
        num = first + i
        last[b] = <int32_t>num
        diff = ts[i] - begin_ts
        diff = diff // 1000 if diff >= 0 else 0  # clamped to [0, MAX_DIFF] like the reference
        if diff > MAX_DIFF:
            diff = MAX_DIFF
        e = mm + entry_base + num * INDEX_ENTRY_SIZE
        put_u32(e, <uint32_t>hashes[i])
        put_u64(e + 4, <uint64_t>phys[i])
        put_u32(e + 12, <uint32_t>diff)
        put_u32(e + 16, <uint32_t>prev)
    put_u32(mm + H_COUNT, <uint32_t>(first + n - 1))
    for b in range(mask + 1):
        if keys[b] != 0:
            put_u32(slots + (keys[b] - 1) * INDEX_SLOT_SIZE, <uint32_t>last[b])
            emptied += old[b] == 0
    return emptied


def put_entries(mm, int64_t slot_num, Py_ssize_t entry_base, int64_t first, int64_t begin_ts,
                const int64_t[:] hashes, const int64_t[:] phys, const int64_t[:] ts):
    """See the reference ``shmq.store.index_file.put_entries``."""
    cdef uint8_t[::1] view = memoryview(mm).cast("B")
    cdef Py_ssize_t size = view.shape[0], n = hashes.shape[0]
    cdef uint64_t buckets = 2
    cdef int64_t* keys
    cdef int32_t* last
    cdef int32_t* old
    cdef int64_t emptied
    if n < 1 or phys.shape[0] != n or ts.shape[0] != n:
        raise ValueError(f"put_entries: {n} hashes, {phys.shape[0]} phys offsets, {ts.shape[0]} timestamps")
    # the first three bounds keep the C arithmetic of the others from overflowing (the reference
    # reaches the same verdict through the last two alone)
    if slot_num < 1 or first < 1 or slot_num > size or first > size or entry_base > size \
            or INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE > entry_base \
            or entry_base + (first + n) * INDEX_ENTRY_SIZE > size:
        raise ValueError(f"put_entries: entries {first}..{first + n - 1} at {entry_base} or {slot_num} slots "
                         f"do not fit a file of {size} bytes")
    while buckets < <uint64_t>(2 * n):
        buckets <<= 1
    keys = <int64_t*>calloc(buckets, sizeof(int64_t))
    last = <int32_t*>calloc(buckets, sizeof(int32_t))
    old = <int32_t*>calloc(buckets, sizeof(int32_t))
    try:
        if keys == NULL or last == NULL or old == NULL:
            raise MemoryError()
        with nogil:
            emptied = _write(&view[0], slot_num, entry_base, first, begin_ts, hashes, phys, ts, n,
                             keys, last, old, buckets - 1)
    finally:
        free(keys)
        free(last)
        free(old)
    return emptied


# ---------------------------------------------------------------------------- records of a put
# The compiled paths below take the usual case (int64 arrays, every position inside the buffer)
# and hand anything else to the Python reference, which then gives its own result or error: the
# same behaviour by construction, with the bounds checked here before any byte is read or written.

import numpy as np

RECORD_LAYOUT = {"MESSAGE_MAGIC": MESSAGE_MAGIC, "OFF_MAGIC": OFF_MAGIC, "OFF_BODYCRC": OFF_BODYCRC,
                 "OFF_QUEUEID": OFF_QUEUEID, "OFF_QUEUEOFFSET": OFF_QUEUEOFFSET,
                 "OFF_PHYSICALOFFSET": OFF_PHYSICALOFFSET, "OFF_SYSFLAG": OFF_SYSFLAG,
                 "OFF_STORETIMESTAMP": OFF_STORETIMESTAMP, "OFF_STOREHOST": OFF_STOREHOST,
                 "OFF_BODYLEN": OFF_BODYLEN, "OFF_BODY": OFF_BODY, "FIXED_OVERHEAD": FIXED_OVERHEAD}
"""The record layout compiled in, checked against shmq.codec.record by the tests."""


cdef object _reference(str name):
    from shmq import _speedups
    return _speedups.reference("_store", name)


cdef bint _inside(const int64_t[:] pos, Py_ssize_t size, Py_ssize_t span) noexcept nogil:
    """Every position p has 0 <= p and p + span <= size."""
    cdef Py_ssize_t i
    for i in range(pos.shape[0]):
        if pos[i] < 0 or pos[i] > size - span:
            return False
    return True


def gather_header_fields(src, starts):
    """See ``shmq.codec.record.gather_header_fields``."""
    cdef const uint8_t[::1] s
    cdef const int64_t[:] at
    cdef int64_t[:, ::1] out
    cdef Py_ssize_t i, n
    cdef const uint8_t* p
    try:
        s, at = src, starts
    except (ValueError, TypeError):  # another dtype or layout: the reference's business
        return _reference("gather_header_fields")(src, starts)
    n = at.shape[0]
    if s.shape[0] < OFF_BODYLEN + 4 or not _inside(at, s.shape[0], OFF_BODYLEN + 4):
        return _reference("gather_header_fields")(src, starts)
    fields = np.empty((n, 5), np.int64)
    out = fields
    with nogil:
        for i in range(n):
            p = &s[0] + at[i]
            out[i, 0] = get_i32(p)
            out[i, 1] = get_u32(p + OFF_MAGIC)
            out[i, 2] = get_i32(p + OFF_BODYCRC)
            out[i, 3] = get_i32(p + OFF_SYSFLAG)
            out[i, 4] = get_i32(p + OFF_BODYLEN)
    return fields


def patch_owned_fields(dst, positions, queue_id, store_timestamp, store_host, first_queue_offset, first_phys):
    """See ``shmq.codec.record.patch_owned_fields``: queue id, store timestamp and host of every
    record first, then QUEUEOFFSET + PHYSICALOFFSET of every record (the reference's order)."""
    cdef uint8_t[::1] d
    cdef const int64_t[:] at
    cdef const int64_t[:] qids
    cdef const int64_t[:] qoffs
    cdef int32_t qid = 0
    cdef int64_t ts, host, qoff0 = 0, phys0, base
    cdef bint per_qid = isinstance(queue_id, np.ndarray), per_qoff = isinstance(first_queue_offset, np.ndarray)
    cdef Py_ssize_t i, n
    cdef uint8_t* p
    try:
        d, at = dst, positions
        n = at.shape[0]
        if per_qid:
            qids = queue_id
        else:
            qid = queue_id
        if per_qoff:
            qoffs = first_queue_offset
        else:
            qoff0 = first_queue_offset
            if qoff0 > (<int64_t>1 << 62) or qoff0 < -(<int64_t>1 << 62):
                raise OverflowError
        ts, host, phys0 = store_timestamp, store_host, first_phys
        if n == 0 or (per_qid and qids.shape[0] != n) or (per_qoff and qoffs.shape[0] != n) \
                or d.shape[0] < OFF_STOREHOST + 8 or not _inside(at, d.shape[0], OFF_STOREHOST + 8):
            raise ValueError
    except (ValueError, TypeError, OverflowError):  # the reference gives its result or error
        return _reference("patch_owned_fields")(dst, positions, queue_id, store_timestamp, store_host,
                                                first_queue_offset, first_phys)
    with nogil:
        if per_qid:  # a scatter of its own in the reference
            for i in range(n):
                put_u32(&d[0] + at[i] + OFF_QUEUEID, <uint32_t>qids[i])
        for i in range(n):
            p = &d[0] + at[i]
            if not per_qid:
                put_u32(p + OFF_QUEUEID, <uint32_t>qid)
            put_u64(p + OFF_STORETIMESTAMP, <uint64_t>ts)
            put_u64(p + OFF_STOREHOST, <uint64_t>host)
        base = <int64_t>(<uint64_t>phys0 - <uint64_t>at[0])
        for i in range(n):
            p = &d[0] + at[i]
            put_u64(p + OFF_QUEUEOFFSET, <uint64_t>(qoffs[i] if per_qoff else qoff0 + i))
            put_u64(p + OFF_PHYSICALOFFSET, <uint64_t>at[i] + <uint64_t>base)
    return None


cdef bint _pass(const uint8_t* src, Py_ssize_t length, const int64_t[:] starts, const int64_t[:] sizes,
                const int64_t[:, :] header, const int64_t[:] ids, const uint8_t* names,
                const Py_ssize_t* name_at, int64_t max_body, int64_t max_record) noexcept nogil:
    """The reference's masks record by record, its clamped reads included (``last``)."""
    cdef Py_ssize_t i, k, last = length - 1, t, topic_pos, props_at
    cdef int64_t size, body, props_len
    cdef const uint8_t* name
    for i in range(starts.shape[0]):
        size, body = sizes[i], header[i, 4]
        if header[i, 0] != size or header[i, 1] != MESSAGE_MAGIC or body < 0 or body > size - FIXED_OVERHEAD \
                or body > max_body or (max_record >= 0 and size > max_record):
            return False
        name = names + name_at[ids[i]]
        t = name_at[ids[i] + 1] - name_at[ids[i]]
        topic_pos = starts[i] + OFF_BODY + body
        if topic_pos > last:
            topic_pos = last
        if src[topic_pos] != t:
            return False
        for k in range(1, t + 1):
            if src[topic_pos + k if topic_pos + k < last else last] != name[k - 1]:
                return False
        props_at = topic_pos + t + 1
        if props_at > length - 2:
            props_at = length - 2
        props_len = <int64_t>src[props_at] * 256 + src[props_at + 1]
        if FIXED_OVERHEAD + body + t + props_len != size:
            return False
    return True


def records_pass(buf, starts, sizes, header, ids, topics, max_body, max_record):
    """See ``shmq.store.write.hooks.records_pass``."""
    cdef const uint8_t[::1] src
    cdef const int64_t[:] at, sz, tid
    cdef const int64_t[:, :] head
    cdef int64_t mb, mr
    cdef Py_ssize_t i, n, ntopics
    cdef Py_ssize_t* name_at = NULL
    cdef bytes names
    cdef const uint8_t* name_bytes
    cdef bint ok
    try:
        src = memoryview(buf).cast("B")
        at, sz, head, tid = starts, sizes, header, ids
        mb, mr = max_body, max_record
        n, ntopics = at.shape[0], len(topics)
        encoded = [t.encode("ascii", "replace") for t in topics]
        if src.shape[0] < 2 or n == 0 or sz.shape[0] != n or head.shape[0] != n or head.shape[1] != 5 \
                or tid.shape[0] != n or ntopics == 0 or max(map(len, encoded)) > 255:
            raise ValueError
        for i in range(n):  # the reference would index outside its arrays, or wrap a negative index
            if tid[i] < 0 or tid[i] >= ntopics or at[i] < 0 or at[i] >= src.shape[0]:
                raise ValueError
    except (ValueError, TypeError, OverflowError, AttributeError):
        return _reference("records_pass")(buf, starts, sizes, header, ids, topics, max_body, max_record)
    names = b"".join(encoded)
    name_bytes = names
    name_at = <Py_ssize_t*>malloc((ntopics + 1) * sizeof(Py_ssize_t))
    if name_at == NULL:
        raise MemoryError()
    try:
        name_at[0] = 0
        for i in range(ntopics):
            name_at[i + 1] = name_at[i] + len(encoded[i])
        with nogil:
            ok = _pass(&src[0], src.shape[0], at, sz, head, tid, name_bytes, name_at, mb, mr)
    finally:
        free(name_at)
    return ok


# ---------------------------------------------------------------------------- the plain put, fused
# ``put_plain`` is ``shmq.store.write.plain_put.put_plain``: a put of one queue that no hook changes,
# with every file's room already reserved (the usual MessageBatch). Everything that could make
# the reference do something else (a refusal, a missing body CRC, a hidden transaction record,
# a segment or file roll, a reservation) is found before the first byte is written, and the
# answer is then -1: the caller takes today's path, which gives the reference's result or
# error. Writes keep the reference's order: commitlog bytes; queue id, store time and host of
# every record; QUEUEOFFSET + PHYSICALOFFSET of every record; consume-queue offsets, tags, sizes;
# index begin (a new file), entries, count, slots, then slots used, end phys, end ts.

from libc.string cimport memcpy, memset

cdef extern from *:
    """
    enum { SHMQ_P_HIDDEN_TX = 0x4, SHMQ_P_TX_MASK = 0xC,
           SHMQ_H_BEGIN_TS = 0, SHMQ_H_END_TS = 8, SHMQ_H_BEGIN_PHYS = 16, SHMQ_H_END_PHYS = 24,
           SHMQ_H_SLOTS_USED = 32 };
    """
    enum:
        HIDDEN_TX "SHMQ_P_HIDDEN_TX"
        TX_MASK "SHMQ_P_TX_MASK"
        H_BEGIN_TS "SHMQ_H_BEGIN_TS"
        H_END_TS "SHMQ_H_END_TS"
        H_BEGIN_PHYS "SHMQ_H_BEGIN_PHYS"
        H_END_PHYS "SHMQ_H_END_PHYS"
        H_SLOTS_USED "SHMQ_H_SLOTS_USED"

PUT_LAYOUT = {"MIN_BLANK": MIN_BLANK, "CQ_ENTRY_SIZE": CQ_ENTRY_SIZE, "HIDDEN_TX": HIDDEN_TX,
              "TRANSACTION_MASK": TX_MASK, "_H_BEGIN_TS": H_BEGIN_TS, "_H_END_TS": H_END_TS,
              "_H_BEGIN_PHYS": H_BEGIN_PHYS, "_H_END_PHYS": H_END_PHYS, "_H_SLOTS_USED": H_SLOTS_USED}
"""The constants of ``put_plain``, checked against the Python reference by the tests."""


cdef bint _plain_records(const uint8_t* src, Py_ssize_t length, const int64_t[:] starts, const uint8_t* topic,
                         Py_ssize_t t, int64_t max_body, int64_t max_record, bint user_batch) noexcept nogil:
    """Every record passes RecordCheck with exact (never clamped) reads, has its body CRC, enters
    the consume queue, and is not transactional in a user's batch: then the reference stores
    the batch as it is. False: the reference decides."""
    cdef Py_ssize_t i, k, n = starts.shape[0], p
    cdef int64_t at, size, body, sysflag
    if length < FIXED_OVERHEAD * n or starts[0] != 0 or starts[n - 1] > length - FIXED_OVERHEAD:
        return False
    for i in range(n):
        at = starts[i]
        size = (starts[i + 1] if i + 1 < n else length) - at
        if size < FIXED_OVERHEAD:  # also the order of the starts (FIXED_OVERHEAD > 0)
            return False
        body = get_i32(src + at + OFF_BODYLEN)
        sysflag = get_i32(src + at + OFF_SYSFLAG)
        if get_i32(src + at) != size or get_u32(src + at + OFF_MAGIC) != MESSAGE_MAGIC or body < 0 \
                or body > size - FIXED_OVERHEAD or body > max_body or (max_record >= 0 and size > max_record) \
                or get_u32(src + at + OFF_BODYCRC) == 0 or sysflag & HIDDEN_TX or (user_batch and sysflag & TX_MASK):
            return False
        p = at + OFF_BODY + body
        if p + 1 + t + 2 > at + size or src[p] != t:
            return False
        for k in range(t):
            if src[p + 1 + k] != topic[k]:
                return False
        if FIXED_OVERHEAD + body + t + ((<int64_t>src[p + 1 + t] << 8) | src[p + 2 + t]) != size:
            return False
    return True


cdef bint _room(Py_ssize_t cl_size, Py_ssize_t cl_pos, Py_ssize_t cl_limit, Py_ssize_t length, Py_ssize_t cq_size,
                Py_ssize_t cq_pos, Py_ssize_t cq_limit, Py_ssize_t n, Py_ssize_t ix_size, Py_ssize_t nkeys,
                int64_t slot_num, int64_t idx_count, Py_ssize_t idx_limit, Py_ssize_t entry_base) noexcept nogil:
    """The rooms the reference's reservations would find (no roll, no reservation), inside each
    map: ``length`` bytes of log, ``n`` consume-queue entries, ``nkeys`` index entries."""
    if cl_pos < 0 or cl_limit > cl_size or cl_pos > cl_limit - length \
            or cq_pos < 0 or cq_limit > cq_size or n > (cq_limit - cq_pos) // CQ_ENTRY_SIZE:
        return False
    return not nkeys or not (slot_num < 1 or idx_count < 0 or slot_num > ix_size or idx_count > ix_size
                             or idx_limit > ix_size or entry_base > ix_size
                             or INDEX_HEADER_SIZE + slot_num * INDEX_SLOT_SIZE > entry_base
                             or nkeys > (idx_limit - entry_base) // INDEX_ENTRY_SIZE - idx_count - 1)


def put_plain(buf, starts, tags, key_hashes, key_records, bytes topic, int64_t max_body, int64_t max_record,
              bint user_batch, cl_mm, Py_ssize_t cl_pos, int64_t cl_from, Py_ssize_t cl_limit, int32_t qid,
              int64_t qoff, int64_t ts, int64_t host, cq_mm, Py_ssize_t cq_pos, Py_ssize_t cq_limit,
              idx_mm, int64_t slot_num, Py_ssize_t entry_base, int64_t idx_count, int64_t begin_ts,
              int64_t slots_used, Py_ssize_t idx_limit, int64_t end_phys, phys_out):
    """See ``shmq.store.write.plain_put.put_plain``. Returns the index slots newly used; -1 when
    nothing was written and the reference path must take the put; -2 when nothing was written
    because a file lacks the room (the caller reserves, as the reference would, and asks again)."""
    cdef const uint8_t[::1] src
    cdef const int64_t[:] at, tg, kh, kr
    cdef int64_t[::1] phys
    cdef uint8_t[::1] cl, cq
    cdef uint8_t[::1] ix
    cdef Py_ssize_t n, nkeys, i, length, t = len(topic)
    cdef const uint8_t* name = topic
    cdef bint ok
    try:  # bytes-like of format "B" (bytes, mmap, their memoryviews), int64 arrays: else the reference's
        src, at, tg, kh, kr, phys = buf, starts, tags, key_hashes, key_records, phys_out
        cl, cq = cl_mm, cq_mm
        if idx_mm is not None:
            ix = idx_mm
    except (ValueError, TypeError, BufferError):
        return -1
    n, nkeys, length = at.shape[0], kh.shape[0], src.shape[0]
    if n < 2 or tg.shape[0] != n or phys.shape[0] != n or kr.shape[0] != nkeys or t > 255 \
            or (user_batch and length > max_body) or (nkeys and idx_mm is None):
        return -1
    if nkeys:
        if cl_from + cl_pos <= end_phys:  # keys of records the index has (the reference skips them)
            return -1
        for i in range(nkeys):
            if kr[i] < 0 or kr[i] >= n:
                return -1
    with nogil:
        ok = _plain_records(&src[0], length, at, name, t, max_body, max_record, user_batch)
    if not ok:
        return -1
    if not _room(cl.shape[0], cl_pos, cl_limit, length, cq.shape[0], cq_pos, cq_limit, n,
                 ix.shape[0] if nkeys else 0, nkeys, slot_num, idx_count, idx_limit, entry_base):
        return -2
    with nogil:
        memcpy(&cl[0] + cl_pos, &src[0], length)
    if not nkeys:
        ix = None
    return _store_copied(&cl[0] + cl_pos, at, tg, kh, kr, phys, length, cl_from + cl_pos, qid, qoff, ts, host,
                         &cq[0] + cq_pos, ix, slot_num, entry_base, idx_count, begin_ts, slots_used)


# ``put_frame`` is ``shmq.store.write.plain_put.put_frame``: the plain put of a SEND_BATCH frame
# (docs/FORMAT.md section 11) straight from the client's request ring. The ring is shared
# memory its client may write at any time: the frame's arrays come as the private copy
# ``send_batch_arrays`` made and checked, and the records are copied once, into the commitlog,
# and checked there; records that fail are zeroed again and the answer is -1, as for any other
# way out: the reference path then decodes the frame and gives its result or error.

cdef extern from *:
    """
    enum { SHMQ_BATCH_HEADER = 40 };
    """
    enum:
        BATCH_HEADER "SHMQ_BATCH_HEADER"

FRAME_LAYOUT = {"_BATCH.size": BATCH_HEADER}
"""The SEND_BATCH header size compiled in, checked against shmq.codec.frames by the tests."""


def put_frame(payload, arrays, bytes topic, int64_t max_body, int64_t max_record, cl_mm, Py_ssize_t cl_pos,
              int64_t cl_from, Py_ssize_t cl_limit, int32_t qid, int64_t qoff, int64_t ts, int64_t host, cq_mm,
              Py_ssize_t cq_pos, Py_ssize_t cq_limit, idx_mm, int64_t slot_num, Py_ssize_t entry_base,
              int64_t idx_count, int64_t begin_ts, int64_t slots_used, Py_ssize_t idx_limit, int64_t end_phys,
              phys_out):
    """See ``shmq.store.write.plain_put.put_frame``: the index slots newly used, or -1 / -2 with
    nothing written (as ``put_plain``)."""
    cdef const uint8_t[::1] src
    cdef const int64_t[::1] w
    cdef int64_t[::1] phys
    cdef uint8_t[::1] cl, cq
    cdef uint8_t[::1] ix
    cdef Py_ssize_t size, t = len(topic), count, nkeys, blen, i
    cdef const uint8_t* name = topic
    cdef uint8_t* d
    cdef bint ok
    try:
        src, w, phys = payload, arrays, phys_out
        cl, cq = cl_mm, cq_mm
        if idx_mm is not None:
            ix = idx_mm
    except (ValueError, TypeError, BufferError):
        return -1
    count = phys.shape[0]
    nkeys = (w.shape[0] - 2 * count) // 2
    if count < 2 or t > 255 or nkeys < 0 or w.shape[0] != 2 * (count + nkeys):
        return -1
    size = src.shape[0]
    blen = size - BATCH_HEADER - ((t + 7) & ~7) - 8 * w.shape[0]  # the records: the frame's tail
    if blen < 1 or blen > max_body:
        return -1
    for i in range(nkeys):
        if w[2 * count + nkeys + i] < 0 or w[2 * count + nkeys + i] >= count:
            return -1
    if idx_mm is None:
        nkeys = 0
    elif nkeys and cl_from + cl_pos <= end_phys:  # keys of records the index has (the reference skips them)
        return -1
    if not _room(cl.shape[0], cl_pos, cl_limit, blen, cq.shape[0], cq_pos, cq_limit, count,
                 ix.shape[0] if nkeys else 0, nkeys, slot_num, idx_count, idx_limit, entry_base):
        return -2
    d = &cl[0] + cl_pos
    with nogil:
        memcpy(d, &src[size - blen], blen)
        ok = _plain_records(d, blen, w[:count], name, t, max_body, max_record, True)
        if not ok:
            memset(d, 0, blen)
    if not ok:
        return -1
    if not nkeys:
        ix = None
    return _store_copied(d, w[:count], w[count:2 * count], w[2 * count:2 * count + nkeys],
                         w[2 * count + nkeys:2 * count + 2 * nkeys], phys, blen, cl_from + cl_pos, qid, qoff, ts,
                         host, &cq[0] + cq_pos, ix, slot_num, entry_base, idx_count, begin_ts, slots_used)


cdef int64_t _store_copied(uint8_t* d, const int64_t[:] at, const int64_t[:] tg, const int64_t[:] kh,
                           const int64_t[:] kr, int64_t[::1] phys, Py_ssize_t length, int64_t base, int32_t qid,
                           int64_t qoff, int64_t ts, int64_t host, uint8_t* c, uint8_t[::1] ix, int64_t slot_num,
                           Py_ssize_t entry_base, int64_t idx_count, int64_t begin_ts, int64_t slots_used) except -3:
    """The writes after the records' bytes are in the commitlog at ``d`` (log offset ``base``),
    every check passed: the owned fields, the consume-queue entries at ``c``, the index
    entries (``ix`` None: no keys). Returns the index slots newly used."""
    cdef Py_ssize_t n = at.shape[0], nkeys = kh.shape[0], i
    cdef uint8_t* e
    cdef int64_t emptied = 0
    cdef uint64_t buckets = 2
    cdef int64_t* keys = NULL
    cdef int32_t* last = NULL
    cdef int32_t* old = NULL
    if nkeys:
        while buckets < <uint64_t>(2 * nkeys):
            buckets <<= 1
        keys = <int64_t*>calloc(buckets, sizeof(int64_t))
        last = <int32_t*>calloc(buckets, sizeof(int32_t))
        old = <int32_t*>calloc(buckets, sizeof(int32_t))
        if keys == NULL or last == NULL or old == NULL:
            free(keys)
            free(last)
            free(old)
            raise MemoryError()
        kphys = np.empty(nkeys, np.int64)
        kts = np.empty(nkeys, np.int64)
    try:
        with nogil:
            for i in range(n):
                e = d + at[i]
                put_u32(e + OFF_QUEUEID, <uint32_t>qid)
                put_u64(e + OFF_STORETIMESTAMP, <uint64_t>ts)
                put_u64(e + OFF_STOREHOST, <uint64_t>host)
            for i in range(n):
                e = d + at[i]
                phys[i] = base + at[i]
                put_u64(e + OFF_QUEUEOFFSET, <uint64_t>(qoff + i))
                put_u64(e + OFF_PHYSICALOFFSET, <uint64_t>phys[i])
            for i in range(n):
                put_u64(c + i * CQ_ENTRY_SIZE, <uint64_t>phys[i])
            for i in range(n):
                put_u64(c + i * CQ_ENTRY_SIZE + 12, <uint64_t>tg[i])
            for i in range(n):  # last: recovery takes a non-zero size as a whole entry
                put_u32(c + i * CQ_ENTRY_SIZE + 8, <uint32_t>(at[i + 1] - at[i] if i + 1 < n else length - at[i]))
        if nkeys:
            _plain_index(ix, kh, kr, phys, kphys, kts, slot_num, entry_base, idx_count, begin_ts, ts,
                         keys, last, old, buckets - 1, &emptied, slots_used)
    finally:
        free(keys)
        free(last)
        free(old)
    return emptied


cdef void _plain_index(uint8_t[::1] ix, const int64_t[:] kh, const int64_t[:] kr, int64_t[::1] phys,
                       int64_t[::1] kphys, int64_t[::1] kts, int64_t slot_num, Py_ssize_t entry_base,
                       int64_t count, int64_t begin_ts, int64_t ts, int64_t* keys, int32_t* last, int32_t* old,
                       uint64_t mask, int64_t* emptied, int64_t slots_used) noexcept:
    """IndexFile.put_batch's writes for keys of records just written (all fresh, all fit)."""
    cdef Py_ssize_t i, nkeys = kh.shape[0]
    cdef uint8_t* mm = &ix[0]
    with nogil:
        for i in range(nkeys):
            kphys[i] = phys[kr[i]]
            kts[i] = ts
        if count == 0:  # a new file's begin, before its first entry
            begin_ts = ts
            put_u64(mm + H_BEGIN_TS, <uint64_t>ts)
            put_u64(mm + H_BEGIN_PHYS, <uint64_t>kphys[0])
        emptied[0] = _write(mm, slot_num, entry_base, count + 1, begin_ts, kh, kphys, kts, nkeys,
                            keys, last, old, mask)
        put_u32(mm + H_SLOTS_USED, <uint32_t>(slots_used + emptied[0]))
        put_u64(mm + H_END_PHYS, <uint64_t>kphys[nkeys - 1])
        put_u64(mm + H_END_TS, <uint64_t>ts)

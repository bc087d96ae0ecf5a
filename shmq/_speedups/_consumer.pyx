# cython: language_level=3
"""Compiled twin of shmq.model.pulled.batch_messages: a pulled batch's columns to MessageExt objects.

The push consumer and ``PullConsumer.pull`` build one ``MessageExt`` per message; in Python
that was ~600 ns a message (a dozen slot stores through ``MessageExt.stored``, two ``bytes``
copies and eight ints out of ``tolist()``), more than the columnar decode of the whole batch.
Here one loop reads the columns as C arrays, copies body and properties out of the mapping and
fills the existing ``MessageExt`` class: the object is allocated by its type and its slots are
written at the offsets the type's member descriptors name (checked once: every slot must be a
plain object slot), so the result is the very object the reference builds.

Every position and length in the columns is checked against its buffer before a byte is read;
a batch with any that do not fit (or a MessageExt whose slots are not what this module
expects) is handed to the reference, which gives the reference's answer by construction.
"""
from cpython.mem cimport PyMem_Free, PyMem_Malloc
from cpython.object cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp

from shmq._speedups._layout cimport (CQ_ENTRY_SIZE, FIXED_OVERHEAD, MESSAGE_MAGIC, OFF_BODY, OFF_BODYLEN,
                                    OFF_BORNTIMESTAMP, OFF_PHYSICALOFFSET, OFF_RECONSUMETIMES, OFF_STOREHOST,
                                    OFF_STORETIMESTAMP, OFF_SYSFLAG, get_i32, get_i64, get_le_i32, get_le_i64,
                                    get_u32)

cdef extern from "Python.h":
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
        int flags
    ctypedef struct PyMemberDescrObject:
        PyMemberDef *d_member
    object PyBytes_FromStringAndSize(const char *v, Py_ssize_t n)
    object PyLong_FromLongLong(long long v)
    int T_OBJECT_EX
    int READONLY

cdef extern from *:
    """
    enum { SHMQ_FLAG_COMPRESSED = 0x1 };
    static PyObject *shmq_alloc(PyObject *cls) {
        PyTypeObject *t = (PyTypeObject *)cls;
        return t->tp_alloc(t, 0);
    }
    static void shmq_set_slot(PyObject *obj, Py_ssize_t offset, PyObject *value) {
        /* the slot of a fresh object is NULL: nothing to release */
        Py_INCREF(value);
        *(PyObject **)((char *)obj + offset) = value;
    }
    """
    enum:
        FLAG_COMPRESSED "SHMQ_FLAG_COMPRESSED"
    object shmq_alloc(object cls)
    void shmq_set_slot(PyObject *obj, Py_ssize_t offset, object value)

LAYOUT = {"FLAG_COMPRESSED": FLAG_COMPRESSED}
"""The constants compiled in, checked against shmq.codec.record by the tests."""

SLOTS = ("topic", "body", "queue_id", "queue_offset", "commit_log_offset", "born_timestamp", "store_timestamp",
         "reconsume_times", "store_size", "sysflag", "store_host", "_raw_props", "_properties", "_tags", "_keys",
         "_msg_id", "_offset_msg_id")
"""MessageExt's slots, in the order of the offsets below; the lazy ones (from ``_properties``) start UNSET."""

cdef enum:
    S_TOPIC, S_BODY, S_QUEUE_ID, S_QUEUE_OFFSET, S_PHYS, S_BORN, S_STAMP, S_RECONSUME, S_SIZE, S_SYSFLAG, \
        S_HOST, S_RAW_PROPS, S_FIRST_LAZY, N_SLOTS = 17

cdef Py_ssize_t _offsets[N_SLOTS]
cdef object _cls = None  # the MessageExt class the offsets belong to (None: not resolved yet)
cdef bint _usable = False
cdef object _unset = None


cdef bint _resolve(object cls) except -1:
    """Slot offsets of ``cls``; False if any slot is not a plain object slot of ``cls`` itself,
    or the class has more slots than the reference fills (then the reference builds the objects)."""
    global _cls, _usable, _unset
    cdef PyMemberDef *member
    from shmq.model.message import UNSET
    _cls, _usable, _unset = cls, False, UNSET
    if set(getattr(cls, "__slots__", ())) != set(SLOTS) or cls.__dictoffset__ or cls.__weakrefoffset__:
        return False
    if any(getattr(base, "__slots__", None) for base in cls.__mro__[1:-1]):
        return False
    for i, name in enumerate(SLOTS):
        d = cls.__dict__.get(name)
        if type(d).__name__ != "member_descriptor":
            return False
        member = (<PyMemberDescrObject*><PyObject*>d).d_member
        if member.type != T_OBJECT_EX or member.flags & READONLY or member.offset <= 0 \
                or member.offset + <Py_ssize_t>sizeof(PyObject*) > cls.__basicsize__:
            return False
        _offsets[i] = member.offset
    _usable = True
    return True


cdef inline bint _fits(Py_ssize_t p, Py_ssize_t n, Py_ssize_t size) noexcept nogil:
    return p >= 0 and n >= 0 and p <= size and n <= size - p


def batch_messages(batch):
    """Every record of ``batch`` (a ``PulledBatch``) as a MessageExt: see the reference."""
    if _cls is None:
        from shmq.model.message_ext import MessageExt
        _resolve(MessageExt)
    n = len(batch.queue_offset)
    if not n:
        return []
    if not _usable:
        return _reference(batch)
    try:
        return _checked(n, batch)
    except (ValueError, TypeError):  # columns or buffers not of the types the batch decoder makes
        return _reference(batch)


cdef list _checked(Py_ssize_t n, object batch):
    """The objects, after checking every column's length and every position against its buffer."""
    cdef const int64_t[::1] qoff = batch.queue_offset, phys = batch.commit_log_offset, size = batch.size
    cdef const int64_t[::1] stamp = batch.store_timestamp, born = batch.born_timestamp, sysflag = batch.sysflag
    cdef const int64_t[::1] reconsume = batch.reconsume_times, host = batch.store_host
    cdef const int64_t[::1] body_pos = batch.body_pos, body_len = batch.body_len
    cdef const int64_t[::1] props_pos = batch.props_pos, props_len = batch.props_len, segment = batch.segment
    cdef list buffers = list(batch.buffers)
    cdef Py_ssize_t nbuf = len(buffers), i, k, s
    if (qoff.shape[0] != n or phys.shape[0] != n or size.shape[0] != n or stamp.shape[0] != n
            or born.shape[0] != n or sysflag.shape[0] != n or reconsume.shape[0] != n or host.shape[0] != n
            or body_pos.shape[0] != n or body_len.shape[0] != n or props_pos.shape[0] != n
            or props_len.shape[0] != n or segment.shape[0] != n):
        return _reference(batch)
    cdef list views = [memoryview(b) for b in buffers]
    cdef const uint8_t[::1] view
    cdef const uint8_t **bases = <const uint8_t**>PyMem_Malloc(max(nbuf, 1) * sizeof(uint8_t*))
    cdef Py_ssize_t *lens = <Py_ssize_t*>PyMem_Malloc(max(nbuf, 1) * sizeof(Py_ssize_t))
    if bases == NULL or lens == NULL:
        PyMem_Free(bases)
        PyMem_Free(lens)
        raise MemoryError()
    try:
        for k in range(nbuf):
            if buffers[k] is None:  # a closed segment: the reference says what that is
                return _reference(batch)
            view = buffers[k]
            lens[k] = view.shape[0]
            bases[k] = &view[0] if lens[k] else NULL
        for i in range(n):
            s = segment[i]
            if s < 0 or s >= nbuf or not _fits(body_pos[i], body_len[i], lens[s]) \
                    or not _fits(props_pos[i], props_len[i], lens[s]):
                return _reference(batch)
        return _build(n, bases, views, batch, qoff, phys, size, stamp, born, sysflag, reconsume, host, body_pos,
                      body_len, props_pos, props_len, segment)
    finally:
        PyMem_Free(bases)
        PyMem_Free(lens)


cdef list _build(Py_ssize_t n, const uint8_t **bases, list views, object batch, const int64_t[::1] qoff,
                 const int64_t[::1] phys, const int64_t[::1] size, const int64_t[::1] stamp,
                 const int64_t[::1] born, const int64_t[::1] sysflag, const int64_t[::1] reconsume,
                 const int64_t[::1] host, const int64_t[::1] body_pos, const int64_t[::1] body_len,
                 const int64_t[::1] props_pos, const int64_t[::1] props_len, const int64_t[::1] segment):
    from shmq.codec.record import decompress_body  # loaded by now: the reference's module imports it
    topic = batch.topic
    queue_id = batch.queue_id
    cdef list out = [None] * n
    cdef Py_ssize_t i, s
    # bodies first, as the reference (so a body that fails to decompress raises before any object is made)
    cdef list bodies = [None] * n
    for i in range(n):
        s = segment[i]
        if sysflag[i] & FLAG_COMPRESSED:
            p = body_pos[i]
            bodies[i] = bytes(decompress_body(views[s][p:p + body_len[i]], phys[i]))
        else:
            bodies[i] = PyBytes_FromStringAndSize(<const char*>bases[s] + body_pos[i], body_len[i])
    for i in range(n):
        s = segment[i]
        out[i] = _message(topic, bodies[i], queue_id, qoff[i], phys[i], born[i], stamp[i], reconsume[i], size[i],
                          sysflag[i], host[i], PyBytes_FromStringAndSize(<const char*>bases[s] + props_pos[i],
                                                                          props_len[i]))
    return out


cdef object _message(object topic, object body, object queue_id, int64_t qoff, int64_t phys, int64_t born,
                     int64_t stamp, int64_t reconsume, int64_t size, int64_t sysflag, int64_t host,
                     object raw_props):
    """A MessageExt as ``MessageExt.stored`` makes it (``_resolve`` checked the slots)."""
    cdef object obj = shmq_alloc(_cls)
    cdef PyObject *m = <PyObject*>obj
    cdef Py_ssize_t j
    shmq_set_slot(m, _offsets[S_TOPIC], topic)
    shmq_set_slot(m, _offsets[S_BODY], body)
    shmq_set_slot(m, _offsets[S_QUEUE_ID], queue_id)
    shmq_set_slot(m, _offsets[S_QUEUE_OFFSET], PyLong_FromLongLong(qoff))
    shmq_set_slot(m, _offsets[S_PHYS], PyLong_FromLongLong(phys))
    shmq_set_slot(m, _offsets[S_BORN], PyLong_FromLongLong(born))
    shmq_set_slot(m, _offsets[S_STAMP], PyLong_FromLongLong(stamp))
    shmq_set_slot(m, _offsets[S_RECONSUME], PyLong_FromLongLong(reconsume))
    shmq_set_slot(m, _offsets[S_SIZE], PyLong_FromLongLong(size))
    shmq_set_slot(m, _offsets[S_SYSFLAG], PyLong_FromLongLong(sysflag))
    shmq_set_slot(m, _offsets[S_HOST], PyLong_FromLongLong(host))
    shmq_set_slot(m, _offsets[S_RAW_PROPS], raw_props)
    for j in range(S_FIRST_LAZY, N_SLOTS):
        shmq_set_slot(m, _offsets[j], _unset)
    return obj


cdef object _reference(object batch):
    from shmq import _speedups
    return _speedups.reference("_consumer", "batch_messages")(batch)


# --------------------------------------------------------------------------- consume-queue range to columns

cdef extern from *:
    """
    enum { SHMQ_BLANK_SIZE = 0x7FFFFFFF };
    """
    enum:
        BLANK_SIZE "SHMQ_BLANK_SIZE"

LAYOUT.update({"CQ_ENTRY_SIZE": CQ_ENTRY_SIZE, "BLANK_SIZE": BLANK_SIZE, "OFF_BODY": OFF_BODY,
               "FIXED_OVERHEAD": FIXED_OVERHEAD, "OFF_PHYSICALOFFSET": OFF_PHYSICALOFFSET, "OFF_SYSFLAG": OFF_SYSFLAG,
               "OFF_BORNTIMESTAMP": OFF_BORNTIMESTAMP, "OFF_STORETIMESTAMP": OFF_STORETIMESTAMP,
               "OFF_STOREHOST": OFF_STOREHOST, "OFF_RECONSUMETIMES": OFF_RECONSUMETIMES, "OFF_BODYLEN": OFF_BODYLEN,
               "MESSAGE_MAGIC": MESSAGE_MAGIC})

cdef const uint8_t *_TAGS_PREFIX = b"TAGS\x01"


cdef object _mods = None  # numpy, shmq.codec.record, PulledBatch, PulledBatch.empty, the two CQ dtypes, TagFilter


cdef void _import_modules() except *:
    """Resolved on first use: shmq.store.read.columns imports this module, so not at import time."""
    global _mods
    import numpy as np
    from shmq.codec import record as fmt
    from shmq.model.pulled import PulledBatch
    from shmq.filter.tags import TagFilter
    _mods = (np, fmt, PulledBatch, PulledBatch.empty, fmt.CQ_DTYPE, fmt.CQ_DTYPE.newbyteorder("<"), TagFilter)


_DECLINED = "not decided by the compiled path"
"""Raised (as ValueError) inside ``_decode`` for anything the fast path leaves to the reference,
which then decodes the whole range (answering or raising exactly as without the extension)."""


def decode_batch(commitlog, topic, queue_id, rng, expression=None, skip=None):
    """The records of a consume-queue range that pass a tag expression, as columns: see the reference.

    One pass over the entries (blank and tag-hash prefilter), one over the records (segment
    lookup, header check against the entry, exact tag check, the columns). Any entry or record
    the reference would refuse or decode oddly (a torn or overwritten record, a length that
    runs out of its segment) sends the whole range to the reference, which then answers or
    raises exactly as it does without the extension.
    """
    if _mods is None:
        _import_modules()
    if skip is not None or (expression is not None and type(expression) is not _mods[6]):
        return _reference_decode(commitlog, topic, queue_id, rng, expression, skip)
    try:
        return _decode(commitlog, topic, queue_id, rng, expression)
    except (ValueError, TypeError):  # _DECLINED, or a column of an unexpected type
        return _reference_decode(commitlog, topic, queue_id, rng, expression, skip)


cdef object _reference_decode(commitlog, topic, queue_id, rng, expression, skip):
    from shmq import _speedups
    return _speedups.reference("_consumer", "decode_batch")(commitlog, topic, queue_id, rng, expression, skip)


cdef object _decode(commitlog, str topic, queue_id, rng, expression):
    np, fmt, PulledBatch, empty_batch, cq_be, cq_le, _ = _mods
    entries = rng.entries
    cdef int64_t first = rng.start
    cdef Py_ssize_t n = len(entries), i, k, t, kept = 0
    cdef bint little  # a range spanning two files is a concatenated copy, in native (little-endian) order
    if entries.dtype == cq_be:
        little = False
    elif entries.dtype == cq_le:  # explicit byte order: read as such on any host
        little = True
    else:
        raise ValueError(_DECLINED)
    cdef const uint8_t[::1] raw = entries.view(np.uint8) if n else np.zeros(1, np.uint8)
    # the tag filter: its codes (hash prefilter) and, per tag in order, the bytes its properties start with
    filtering = expression is not None and not expression.is_all
    cdef const int64_t[::1] codes_set = expression.codes if filtering else np.zeros(0, np.int64)
    tag_codes = [fmt.tags_code(tag) for tag in expression.tags] if filtering else []
    tag_bytes = [b"TAGS\x01" + tag.encode("utf-8") + b"\x02" for tag in expression.tags] if filtering else []
    kept_a = np.empty((4, max(n, 1)), np.int64)
    cdef int64_t[::1] idx = kept_a[0], phys = kept_a[1], size = kept_a[2], code = kept_a[3]
    cdef const uint8_t *e
    cdef int32_t esize
    cdef int64_t ecode, need = -1
    cdef bint hit
    for i in range(n):
        e = &raw[i * CQ_ENTRY_SIZE]
        esize = get_le_i32(e + 8) if little else get_i32(e + 8)
        if esize == BLANK_SIZE:
            continue
        ecode = get_le_i64(e + 12) if little else get_i64(e + 12)
        if filtering:
            hit = False
            for t in range(codes_set.shape[0]):
                if codes_set[t] == ecode:
                    hit = True
                    break
            if not hit:
                continue
        idx[kept] = i
        phys[kept] = get_le_i64(e) if little else get_i64(e)
        size[kept] = esize
        code[kept] = ecode
        if phys[kept] < 0 or esize < 0 or phys[kept] > (<int64_t>1 << 62):
            raise ValueError(_DECLINED)  # the reference's sums would wrap: let it decide
        if phys[kept] + esize > need:
            need = phys[kept] + esize
        kept += 1
    files = commitlog.files
    if kept and (not files.segments or need > files.segments[len(files.segments) - 1].end):
        files.refresh()
    segments = list(files.segments)
    cdef Py_ssize_t nseg = len(segments)
    bounds_a = np.empty((2, max(nseg, 1)), np.int64)
    cdef int64_t[::1] starts = bounds_a[0], ends = bounds_a[1]
    for k in range(nseg):
        sg = segments[k]
        starts[k] = sg.start
        ends[k] = sg.start + sg.size
        if k and starts[k] <= starts[k - 1]:
            raise ValueError(_DECLINED)  # the reference's searchsorted assumes ascending starts
    out = np.empty((13, max(kept, 1)), np.int64)
    cdef int64_t[:, ::1] o = out
    cdef list buffers = []
    cdef const uint8_t[::1] arr
    cdef const uint8_t *rec
    cdef const uint8_t *props
    cdef Py_ssize_t lo, hi, mid, s, cur = -1, run = -1, present = 0, missing = 0, m = 0, seglen = 0
    cdef int64_t pos, body_len, topic_len, props_pos, props_len, tlen
    cdef bint ok
    for i in range(kept):
        lo, hi = 0, nseg  # last start <= phys (searchsorted right, minus one)
        while lo < hi:
            mid = (lo + hi) >> 1
            if starts[mid] <= phys[i]:
                lo = mid + 1
            else:
                hi = mid
        s = lo - 1
        if s < 0 or phys[i] + size[i] > ends[s]:
            missing += 1
            continue
        present += 1
        if s != cur:
            cur = s
            run += 1
            buf = segments[s].array
            if buf is None:  # closed under us: the reference says what that is
                raise ValueError(_DECLINED)
            buffers.append(buf)
            arr = buf
            seglen = arr.shape[0]
            if seglen != ends[s] - starts[s]:
                raise ValueError(_DECLINED)
        pos = phys[i] - starts[s]
        if pos + OFF_BODY > seglen:
            raise ValueError(_DECLINED)
        rec = &arr[0] + pos
        if (get_u32(rec + 4) != MESSAGE_MAGIC or get_i64(rec + OFF_PHYSICALOFFSET) != phys[i]
                or get_i32(rec) != size[i]):
            raise ValueError(_DECLINED)  # the reference raises CorruptRecordError naming the first such entry
        body_len = get_i32(rec + OFF_BODYLEN)
        if body_len < 0 or body_len > size[i] - FIXED_OVERHEAD:
            raise ValueError(_DECLINED)  # the reference raises CorruptRecordError (damaged lengths)
        topic_len = rec[OFF_BODY + body_len]
        props_pos = pos + OFF_BODY + body_len + topic_len + 3
        props_len = size[i] - FIXED_OVERHEAD - body_len - topic_len
        if props_len < 0 or ((<int64_t>arr[props_pos - 2] << 8) | arr[props_pos - 1]) != props_len:
            raise ValueError(_DECLINED)
        if filtering:
            props = &arr[0] + props_pos
            ok = False
            for t in range(len(tag_codes)):  # each tag in order, as the reference's mask assignments
                tb = tag_bytes[t]
                tlen = len(<bytes>tb)
                if code[i] == <int64_t>tag_codes[t] and props_len >= tlen:
                    ok = memcmp(props, <const char*>tb, tlen) == 0
            if not ok and not (props_len >= 5 and memcmp(props, _TAGS_PREFIX, 5) == 0):
                ok = bool(expression.match(fmt.decode_properties(
                    PyBytes_FromStringAndSize(<const char*>props, props_len))))
            if not ok:
                continue
        o[0, m] = idx[i] + first
        o[1, m] = phys[i]
        o[2, m] = size[i]
        o[3, m] = get_i64(rec + OFF_STORETIMESTAMP)
        o[4, m] = get_i64(rec + OFF_BORNTIMESTAMP)
        o[5, m] = get_i32(rec + OFF_SYSFLAG)
        o[6, m] = get_i32(rec + OFF_RECONSUMETIMES)
        o[7, m] = get_i64(rec + OFF_STOREHOST)
        o[8, m] = pos + OFF_BODY
        o[9, m] = body_len
        o[10, m] = props_pos
        o[11, m] = props_len
        o[12, m] = run
        m += 1
    if not present:
        return empty_batch(topic, queue_id, rng.next_offset, missing)
    cols = [out[j, :m] for j in range(13)]  # rows of one array: each column contiguous, as the reference's
    return PulledBatch(topic, queue_id, rng.next_offset, missing, *cols, buffers)


# --------------------------------------------------------------------------- pull straight to MessageExt

def pull_messages(reader, topic, queue_id, offset, max_num, max_offset, expression=None, bitmap=None, group=None):
    """(next offset, MessageExt list) of a pull: see the reference (``read_batch`` + ``messages``).

    The push consumer's pull at a steady rate finds one message or a few: there the reference's
    cost is numpy (an entry view, a dozen column arrays, the batch object), not the bytes. This
    reads the consume-queue entries of a range inside one file and their records with C loads
    and builds the objects directly. Anything else (a filter other than "all", a range over two
    files, a record cleanup deleted, any entry or record the reference would refuse or decode
    oddly) goes to the reference, which then answers or raises exactly as without the extension.
    """
    if _mods is None:
        _import_modules()
    if _cls is None:
        from shmq.model.message_ext import MessageExt
        _resolve(MessageExt)
    if _usable and (expression is None or (type(expression) is _mods[6] and expression.is_all)):
        try:
            done = _pull(reader, topic, queue_id, offset, max_num, max_offset)
        except _mods[1].CorruptRecordError:  # a body that does not decompress: the reference's error, raised as it
            raise
        except (ValueError, TypeError, OverflowError):  # a mapping or a number of an unexpected type
            done = None
        if done is not None:
            return done
    from shmq import _speedups
    return _speedups.reference("_consumer", "pull_messages")(reader, topic, queue_id, offset, max_num, max_offset,
                                                             expression, bitmap, group)


cdef object _pull(reader, str topic, queue_id, offset, max_num, max_offset):
    """The fast path of ``pull_messages``; None (or ValueError) declines before anything is built."""
    cq = reader.consume_queue(topic, queue_id)
    cdef int64_t start = max(offset, cq.min_offset(max_offset))
    cdef int64_t count = min(max_num, max_offset - start)
    if count <= 0:
        return start, []
    seg = cq.files.find(start * CQ_ENTRY_SIZE)
    if seg is None:
        return start, []
    cdef int64_t seg_start = seg.start
    if seg.array is None or seg_start < 0 or seg_start % CQ_ENTRY_SIZE:
        return None
    cdef const uint8_t[::1] cqa = seg.array
    cdef Py_ssize_t cq_len = cqa.shape[0]
    cdef int64_t first = start * CQ_ENTRY_SIZE - seg_start  # byte position of the first entry
    if cq_len % CQ_ENTRY_SIZE or first < 0 or first >= cq_len or count > (cq_len - first) // CQ_ENTRY_SIZE:
        return None  # the reference's view would refuse the file, or the range runs into the next file
    cdef Py_ssize_t n = count
    cdef int64_t *col = <int64_t*>PyMem_Malloc(n * 12 * sizeof(int64_t))
    if col == NULL:
        raise MemoryError()
    try:
        return _pull_records(cq, reader.commitlog.files, topic, queue_id, start, &cqa[0] + first, n, col)
    finally:
        PyMem_Free(col)


cdef object _pull_records(cq, files, str topic, queue_id, int64_t start, const uint8_t *e0, Py_ssize_t n,
                          int64_t *col):
    """Entries (``n`` at ``e0``, big-endian) -> records -> objects; ``col`` holds 12 int64 a record."""
    cdef Py_ssize_t i, kept = 0, s, nseg, lo, hi, mid
    cdef const uint8_t *e
    cdef int32_t esize
    cdef int64_t ephys, need = -1
    for i in range(n):  # blank entries are skipped; the rest keep (queue offset, phys, size)
        e = e0 + i * CQ_ENTRY_SIZE
        esize = get_i32(e + 8)
        if esize == BLANK_SIZE:
            continue
        ephys = get_i64(e)
        if ephys < 0 or esize < 0 or ephys > (<int64_t>1 << 62):
            return None
        col[kept * 12] = start + i
        col[kept * 12 + 1] = ephys
        col[kept * 12 + 2] = esize
        if ephys + esize > need:
            need = ephys + esize
        kept += 1
    if not kept:
        return start + n, []
    if not files.segments or need > files.segments[len(files.segments) - 1].end:
        files.refresh()
    segments = files.segments
    nseg = len(segments)
    cdef list arrays = []
    cdef const uint8_t[::1] arr
    cdef const uint8_t *rec
    cdef int64_t pos, body_len, topic_len, props_len, seg_lo, seg_hi
    cdef list bodies = [None] * kept
    for i in range(kept):
        ephys, esize = col[i * 12 + 1], col[i * 12 + 2]
        lo, hi = 0, nseg  # the last segment starting at or before the record
        while lo < hi:
            mid = (lo + hi) >> 1
            if segments[mid].start <= ephys:
                lo = mid + 1
            else:
                hi = mid
        s = lo - 1
        if s < 0:
            return None  # cleanup deleted it: the reference counts it missing
        sg = segments[s]
        seg_lo, seg_hi = sg.start, sg.start + sg.size
        if ephys + esize > seg_hi or sg.array is None:
            return None
        arr = sg.array
        if arr.shape[0] != seg_hi - seg_lo:
            return None
        pos = ephys - seg_lo
        if pos + OFF_BODY > arr.shape[0]:
            return None
        rec = &arr[0] + pos
        if (get_u32(rec + 4) != MESSAGE_MAGIC or get_i64(rec + OFF_PHYSICALOFFSET) != ephys
                or get_i32(rec) != esize):
            return None  # the reference raises CorruptRecordError naming the first such entry
        body_len = get_i32(rec + OFF_BODYLEN)
        if body_len < 0 or body_len > esize - FIXED_OVERHEAD:
            return None  # the reference raises CorruptRecordError (damaged lengths)
        topic_len = rec[OFF_BODY + body_len]
        props_len = esize - FIXED_OVERHEAD - body_len - topic_len
        if props_len < 0 or ((<int64_t>rec[OFF_BODY + body_len + topic_len + 1] << 8)
                             | rec[OFF_BODY + body_len + topic_len + 2]) != props_len:
            return None
        col[i * 12 + 3] = get_i64(rec + OFF_STORETIMESTAMP)
        col[i * 12 + 4] = get_i64(rec + OFF_BORNTIMESTAMP)
        col[i * 12 + 5] = get_i32(rec + OFF_SYSFLAG)
        col[i * 12 + 6] = get_i32(rec + OFF_RECONSUMETIMES)
        col[i * 12 + 7] = get_i64(rec + OFF_STOREHOST)
        col[i * 12 + 8] = pos + OFF_BODY
        col[i * 12 + 9] = body_len
        col[i * 12 + 10] = pos + OFF_BODY + body_len + topic_len + 3
        col[i * 12 + 11] = props_len
        arrays.append(sg.array)
    # bodies first, as the reference (a body that fails to decompress raises before any object is made)
    from shmq.codec.record import decompress_body
    for i in range(kept):
        arr = arrays[i]
        if col[i * 12 + 5] & FLAG_COMPRESSED:
            bodies[i] = bytes(decompress_body(memoryview(arrays[i])[col[i * 12 + 8]:col[i * 12 + 8] + col[i * 12 + 9]],
                                              col[i * 12 + 1]))
        else:
            bodies[i] = PyBytes_FromStringAndSize(<const char*>&arr[0] + col[i * 12 + 8], col[i * 12 + 9])
    cdef list out = [None] * kept
    for i in range(kept):
        arr = arrays[i]
        out[i] = _message(topic, bodies[i], queue_id, col[i * 12], col[i * 12 + 1], col[i * 12 + 4], col[i * 12 + 3],
                          col[i * 12 + 6], col[i * 12 + 2], col[i * 12 + 5], col[i * 12 + 7],
                          PyBytes_FromStringAndSize(<const char*>&arr[0] + col[i * 12 + 10], col[i * 12 + 11]))
    return start + n, out

# The compiled field storage of Message and SendResult, declared for other modules to read
# as C slots (``_accumulator`` reads a plain Message's fields without attribute lookups).

cdef class MessageFields:
    cdef public object topic
    cdef public object body
    cdef public object tags
    cdef public object keys
    cdef public object properties
    cdef public object flag
    cdef public object delay_level
    cdef public object deliver_at
    cdef public object delay


cdef class SendResultFields:
    cdef public object status
    cdef public object queue
    cdef public object queue_offset
    cdef public object store_timestamp
    cdef public object count
    cdef public object phys_offsets
    cdef public object store_host
    cdef public object _msg_id
    cdef public object _make_msg_id
    cdef public object _offset_msg_id

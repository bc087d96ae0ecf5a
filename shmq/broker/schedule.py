"""DeliveryRulesHook: the put hook that parks messages whose delivery must wait (RocketMQ's
``HookUtils.handleScheduleMessage`` and the transaction bridge's half-message rewrite).

A record the sender flagged (``PutRequest.inspect``) is read here and, by its properties:
- ``DELAY`` = n: stored under ``SCHEDULE_TOPIC_XXXX`` queue n-1 (levels above the last are
  the last, as in RocketMQ), its consume-queue tag field holding the due time in ms (also in
  TIMER_OUT_MS, from which recovery rebuilds that field), the real topic and queue in
  REAL_TOPIC / REAL_QID; the delay service brings it back when due;
- ``TIMER_DELIVER_MS`` (epoch ms) or ``TIMER_DELAY_MS`` (ms from now): stored under
  ``rmq_sys_wheel_timer`` queue 0 the same way (the timer service delivers it), refused past
  ``timerMaxDelaySec``; a time already due is stored at once under its own topic;
- SYSFLAG prepared (a transaction half): stored under ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0
  with REAL_TOPIC / REAL_QID / TRAN_MSG, its SYSFLAG reset so the half queue indexes it; the
  transaction service commits (a copy to the real topic) or rolls it back.
A delay or delivery time on a transaction half is refused: RocketMQ stores such a message
twice and loops (its users' complaint 8).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

import numpy as np

from shmq.codec import frames as P
from shmq.codec import record as fmt
from shmq.model import system_topics as st
from shmq.store.write.hooks import PutRequest
from shmq.store.write.rewrite import replace_records, rewrite_record

# properties that only mean something before the message is parked
_INTEGER = re.compile(r"-?[0-9]{1,19}")
PARKING_PROPS = (fmt.PROPERTY_DELAY, fmt.PROPERTY_TIMER_DELAY_MS, fmt.PROPERTY_TIMER_OUT_MS)


def now_ms() -> int:
    return int(time.time() * 1000)


class DeliveryRulesHook:
    """Reads flagged records and parks them (see the module docstring); the rest pass untouched."""

    def __init__(self, levels_ms: list[int], timer_max_delay_sec: int, clock: Callable[[], int] = now_ms) -> None:
        self.levels_ms = levels_ms
        self.timer_max_ms = timer_max_delay_sec * 1000
        self.clock = clock

    def plain_lane(self, req: PutRequest) -> bool:
        """A put without ``inspect`` rows passes untouched (the lane takes only those)."""
        return req.inspect is None

    def before_put(self, req: PutRequest) -> None:
        rows = req.inspect
        if rows is None:
            return
        now = self.clock()
        buf = memoryview(req.batch.buf)
        starts = req.batch.starts
        ends = np.append(starts[1:], len(buf))
        tid, qids = req.topic_ids(), req.queue_id_array()
        out_rows, records, topics, queue_ids, codes = [], [], [], [], []
        for row in rows.tolist():
            if req.refused is not None and req.refused[row]:
                continue
            raw = buf[int(starts[row]) : int(ends[row])]
            topic, qid = req.topics[int(tid[row])], int(qids[row])
            try:
                parked = self._park(raw, topic, qid, now)
            except (ValueError, fmt.CorruptRecordError) as e:
                mask = np.zeros(len(req), bool)
                mask[row] = True
                req.refuse(mask, P.MESSAGE_ILLEGAL, str(e))
                continue
            if parked is not None:
                out_rows.append(row)
                records.append(parked[0])
                topics.append(parked[1])
                queue_ids.append(parked[2])
                codes.append(parked[3])
        if out_rows:
            replace_records(req, out_rows, records, topics, queue_ids, codes)

    def _park(self, raw: memoryview, topic: str, qid: int, now: int) -> tuple[bytes, str, int, int | None] | None:
        """(record, topic, queue, tag field) where the record goes instead; None: stored as sent."""
        rec = fmt.decode_record(raw)
        props = rec.properties
        half = rec.sysflag & fmt.TRANSACTION_MASK == fmt.TRANSACTION_PREPARED
        delay = props.get(fmt.PROPERTY_DELAY)
        deliver = props.get(fmt.PROPERTY_TIMER_DELIVER_MS)
        after = props.get(fmt.PROPERTY_TIMER_DELAY_MS)
        real = {fmt.PROPERTY_REAL_TOPIC: topic, fmt.PROPERTY_REAL_QID: str(qid)}
        if half:
            if delay or deliver or after:
                raise ValueError(
                    "a transactional message cannot also be delayed (delay_level, deliver_at, "
                    "delay): RocketMQ would store it twice and check it in a loop"
                )
            real[fmt.PROPERTY_TRAN_MSG] = "true"
            return (
                rewrite_record(
                    raw,
                    topic=st.TRANS_HALF_TOPIC,
                    queue_id=0,
                    set_props=real,
                    sysflag=rec.sysflag & ~fmt.TRANSACTION_MASK,
                ),
                st.TRANS_HALF_TOPIC,
                0,
                None,
            )
        if delay:
            level = _int(delay, "DELAY")
            if level <= 0:
                return None
            level = min(level, len(self.levels_ms))
            due = now + self.levels_ms[level - 1]
            real[fmt.PROPERTY_TIMER_OUT_MS] = str(due)  # recovery rebuilds the tag field from it
            return (
                rewrite_record(raw, topic=st.SCHEDULE_TOPIC, queue_id=level - 1, set_props=real),
                st.SCHEDULE_TOPIC,
                level - 1,
                due,
            )
        if deliver or after:
            due = _int(deliver, "TIMER_DELIVER_MS") if deliver else now + _int(str(after), "TIMER_DELAY_MS")
            if due - now > self.timer_max_ms:
                limit_s = self.timer_max_ms // 1000
                raise ValueError(
                    f"delivery time is {span(due - now)} from now; the limit is timerMaxDelaySec = "
                    f"{span(self.timer_max_ms)} ({limit_s} s)"
                )
            if due <= now:
                return None
            real[fmt.PROPERTY_TIMER_DELIVER_MS] = real[fmt.PROPERTY_TIMER_OUT_MS] = str(due)
            return (
                rewrite_record(
                    raw, topic=st.TIMER_TOPIC, queue_id=0, set_props=real, drop_props=(fmt.PROPERTY_TIMER_DELAY_MS,)
                ),
                st.TIMER_TOPIC,
                0,
                due,
            )
        return None


def span(ms: int) -> str:
    """A duration in the largest unit it fills (``10 days``, ``1.5 h``, ``90 s``): people read a
    delay that way, not as milliseconds."""
    for unit, size in (("days", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size:
            value = ms / size
            text = f"{value:.0f}" if value == int(value) or value >= 100 else f"{value:.1f}"
            return f"{text} {'day' if unit == 'days' and text == '1' else unit}"
    return f"{ms} ms"


def _int(text: str, name: str) -> int:
    """A property's decimal integer; ValueError naming it for anything else (Python's own int()
    would take " 5", "+5" and "1_000", which no RocketMQ client sends)."""
    if not _INTEGER.fullmatch(text):
        raise ValueError(f"property {name}={text!r:.40} is not an integer")
    return int(text)


def delivered_record(raw: bytes | memoryview) -> tuple[bytes, str, int]:
    """A parked record as it goes to its real topic when due: (record, topic, queue id), the
    parking properties dropped (so it is never parked again). CorruptRecordError or ValueError
    for a parked record without a usable REAL_TOPIC / REAL_QID."""
    rec = fmt.decode_record(raw)
    topic = rec.properties.get(fmt.PROPERTY_REAL_TOPIC)
    qid = rec.properties.get(fmt.PROPERTY_REAL_QID)
    if not topic or qid is None:
        raise ValueError(f"parked record at {rec.physical_offset} has no REAL_TOPIC / REAL_QID")
    q = _int(qid, "REAL_QID")
    out = rewrite_record(
        raw, topic=topic, queue_id=q, drop_props=(*PARKING_PROPS, fmt.PROPERTY_REAL_TOPIC, fmt.PROPERTY_REAL_QID)
    )
    return out, topic, q

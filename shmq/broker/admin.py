"""Admin commands the broker answers over the control queue (RocketMQ's mqadmin, in-process).

Each command takes the JSON arguments of an ``Admin`` request and returns a JSON-able dict;
a ValueError becomes an error reply with its message. Every argument is checked here, at the
boundary (names by the topic and group rules, queue ids within the topic, offsets in the i64
range, no unknown keys), so nothing a request carries can crash the broker or be persisted in
a form its loader refuses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from shmq.broker.admin_status import JsonObject, broker_status, consumer_progress
from shmq.broker.answers import Peer
from shmq.broker.dlq import MAX_RESEND_PER_CALL, DlqResendService
from shmq.broker.groups import MODELS, ConsumerManager, ConsumerOffsetManager, check_group
from shmq.broker.topics import MAX_QUEUE_NUMS, TopicConfig, TopicConfigManager
from shmq.codec.record import check_topic
from shmq.config import BrokerConfig
from shmq.filter.sql import TYPE_SQL92, SqlFilter
from shmq.filter.tags import TYPE_TAG, TagFilter
from shmq.model.system_topics import is_dlq_topic, is_retry_topic, is_system_topic
from shmq.store.message_store import MessageStore
from shmq.store.queue_table import MAX_OFFSET
from shmq.trace.query import trace_lines

MAX_GROUPS_PER_CLIENT = 16  # a consumer is in one group; a client cannot fill the state segment's group table

if TYPE_CHECKING:
    from shmq.broker.offset_reset import OffsetResetService
    from shmq.broker.transaction import TransactionalMessageService


class AdminTarget(Protocol):
    """What admin commands act on (the broker core): a narrow view, so this module does not
    import the broker that imports it."""

    store: MessageStore
    config: BrokerConfig
    topics: TopicConfigManager
    consumers: ConsumerManager
    offsets: ConsumerOffsetManager
    clients: dict[int, Peer]
    transactions: TransactionalMessageService | None
    dlq: DlqResendService | None
    resets: OffsetResetService

    def update_topic(
        self,
        name: str,
        read_queue_nums: int | None = None,
        write_queue_nums: int | None = None,
        perm: int | None = None,
        persist: bool = True,
        order: bool | None = None,
    ) -> TopicConfig: ...

    def delete_topic(self, name: str) -> bool: ...

    def publish_groups(self) -> None: ...

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None: ...

    def queue_offsets(self, topic: str, qid: int) -> tuple[int, int]: ...


def _int(a: JsonObject, key: str, lo: int, hi: int) -> int:
    v = a[key]
    if type(v) is not int or not lo <= v <= hi:
        raise ValueError(f"{key} must be an integer in {lo}..{hi}, got {v!r:.40}")
    return v


def _opt_int(a: JsonObject, key: str) -> int | None:
    """An optional int argument; its range is the callee's (the topic table checks queue counts and perm)."""
    v = a.get(key)
    if v is not None and type(v) is not int:
        raise ValueError(f"{key} must be an integer, got {v!r:.40}")
    return v


def _topic(a: JsonObject) -> str:
    topic: str = a["topic"]
    check_topic(topic)  # BadTopicError (a ValueError) for a non-string too
    return topic


def _group(a: JsonObject) -> str:
    return check_group(a["group"])


def _queue(b: AdminTarget, a: JsonObject) -> tuple[str, int]:
    """The topic and a queue id within it (any queue a topic may have, if it does not exist)."""
    topic = _topic(a)
    tc = b.topics.get(topic)
    n = max(tc.read_queue_nums, tc.write_queue_nums) if tc is not None else MAX_QUEUE_NUMS
    return topic, _int(a, "queue_id", 0, n - 1)


def _subscriptions(b: AdminTarget, v: object) -> dict[str, str | dict[str, str]]:
    """topic -> a tag expression (a string), or ``{"type": "SQL92", "expression": text}``;
    an SQL92 text is parsed here, so a bad one is refused at join (BadExpressionError is a
    ValueError: the client gets the parser's message) and the broker never keeps it."""
    if not isinstance(v, dict):
        raise ValueError("subscriptions must be an object of topic -> expression")
    out: dict[str, str | dict[str, str]] = {}
    for topic, expression in v.items():
        check_topic(topic)
        if isinstance(expression, dict):
            kind, text = expression.get("type"), expression.get("expression")
            if (
                set(expression) != {"type", "expression"}
                or kind not in (TYPE_TAG, TYPE_SQL92)
                or not isinstance(text, str)
            ):
                raise ValueError(
                    f"subscription of {topic!r} must be a string or "
                    f'{{"type": "TAG" or "SQL92", "expression": str}}, got {expression!r:.80}'
                )
            if kind == TYPE_TAG:
                out[topic] = TagFilter(text).expression
                continue
            if not b.config.enable_property_filter:
                raise ValueError(
                    f"subscription of {topic!r}: SQL92 filtering is off on this broker (enablePropertyFilter=false)"
                )
            out[topic] = {"type": TYPE_SQL92, "expression": SqlFilter(text).expression}
        elif isinstance(expression, str):
            out[topic] = expression
        else:
            raise ValueError(f"subscription expression of {topic!r} must be a string")
    return out


def _user_topic(b: AdminTarget, a: JsonObject, deleting: bool = False) -> str:
    """The topic a user's create, update or delete names, if a user may do that to it.

    System topics are the broker's: it creates them and its services rely on their queues. A
    user may only change the perm of an existing %RETRY%/%DLQ% topic (the read bit lets tools
    and consumers read it; the broker's own retry and dead-letter writes do not look at the write
    bit) and delete one (a retired group's); never create a system topic, change its queue
    counts or touch the broker's own."""
    topic = _topic(a)
    if not is_system_topic(topic):
        return topic
    group_topic = is_retry_topic(topic) or is_dlq_topic(topic)
    if b.topics.get(topic) is None and not deleting:
        raise ValueError(
            f"{topic!r} is a system topic name (%RETRY%, %DLQ%, SCHEDULE_TOPIC_XXXX, RMQ_SYS_*, "
            f"rmq_sys_*); only the broker creates such topics"
        )
    if not group_topic or (not deleting and set(a) - {"topic", "perm"}):
        raise ValueError(
            f"{topic!r} is a system topic: a user may change only the perm of an existing %RETRY% "
            f"or %DLQ% topic, or delete one; not its queue counts, nor the broker's own topics"
        )
    return topic


def _update_topic(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    order = a.get("order")
    if order is not None and not isinstance(order, bool):
        raise ValueError(f"order must be true or false, got {order!r:.40}")
    tc = b.update_topic(
        _user_topic(b, a),
        _opt_int(a, "read_queue_nums"),
        _opt_int(a, "write_queue_nums"),
        _opt_int(a, "perm"),
        order=order,
    )
    return {"topic": tc.to_json()}


def _delete_topic(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    return {"deleted": b.delete_topic(_user_topic(b, a, deleting=True))}


def _list_topics(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    return {"topics": {n: t.to_json() for n, t in sorted(b.topics.topics.items())}}


def _join_group(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    if client_id not in b.clients:
        raise ValueError(f"client {client_id} must attach before joining a consumer group")
    model = a.get("model", "CLUSTERING")
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r:.40}")
    name, groups = _group(a), b.consumers.groups
    mine = [n for n, g in groups.items() if client_id in g.members]
    if name not in mine and len(mine) >= MAX_GROUPS_PER_CLIENT:
        raise ValueError(f"client {client_id} is already in {len(mine)} groups, the most one client may join")
    g = b.consumers.join(name, client_id, model, _subscriptions(b, a.get("subscriptions", {})))
    try:
        _publish_groups(b)
    except ValueError:  # the state segment has no row left for a new group: undo the join
        b.consumers.leave(name, client_id)
        if not g.members:
            del groups[name]
        b.publish_groups()
        raise
    b.clients[client_id].group = g.name
    return {"version": g.version, "members": sorted(g.members)}


def _publish_groups(b: AdminTarget) -> None:
    """Publish the groups; when their table is full, forget the groups nobody is in (kept only
    for their version) and try once more, so joins and leaves cannot use up its rows."""
    try:
        b.publish_groups()
    except ValueError:
        for name in [n for n, g in b.consumers.groups.items() if not g.members]:
            del b.consumers.groups[name]
        b.publish_groups()


def _leave_group(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    left = b.consumers.leave(_group(a), client_id)
    if left:
        b.publish_groups()
    return {"left": left}


def _list_groups(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    return {
        "groups": {
            n: {
                "model": g.model,
                "version": g.version,
                "members": sorted(g.members),
                "subscriptions": {str(cid): s for cid, s in g.members.items()},
            }
            for n, g in sorted(b.consumers.groups.items())
        }
    }


def _query_offset(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    topic, qid = _queue(b, a)
    return {"offset": b.offsets.query(_group(a), topic, qid)}


def _commit_offset(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    topic, qid = _queue(b, a)
    group, offset = _group(a), _int(a, "offset", 0, MAX_OFFSET)
    if not b.resets.allows(client_id, group, topic, qid):
        return {"dropped": "a reset of this queue is not applied by this member yet"}
    b.commit_offset(group, topic, qid, offset)
    return {}


def _search_offset(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    topic, qid = _queue(b, a)
    return {"offset": b.store.get_offset_in_queue_by_time(topic, qid, _int(a, "timestamp", 0, MAX_OFFSET))}


def _queue_offsets(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    lo, hi = b.queue_offsets(*_queue(b, a))
    return {"min_offset": lo, "max_offset": hi}


def _transactions(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    if b.transactions is None:
        raise ValueError("this broker is a replica: its master keeps the transactions")
    return b.transactions.describe(_int(a, "max_num", 1, 1000) if "max_num" in a else 32)


def _view_trace(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    msg_id = a["msg_id"]
    if not isinstance(msg_id, str) or not 0 < len(msg_id) <= 128 or any(c.isspace() for c in msg_id):
        raise ValueError(f"msg_id must be a message id (1..128 characters, no whitespace), got {msg_id!r:.60}")
    return {"records": trace_lines(b.store, _topic(a), msg_id)}


def _resend_dlq(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    if b.dlq is None:
        raise ValueError("a replica resends nothing: resend dead letters on the master")
    ids = a.get("msg_ids")
    if ids is not None and (
        not isinstance(ids, list)
        or not all(isinstance(i, str) and len(i) <= 128 for i in ids)
        or len(ids) > MAX_RESEND_PER_CALL
    ):
        raise ValueError(f"msg_ids must be a list of at most {MAX_RESEND_PER_CALL} message id strings")
    max_num = _int(a, "max_num", 1, MAX_RESEND_PER_CALL) if "max_num" in a else MAX_RESEND_PER_CALL
    return b.dlq.resend(_group(a), ids, max_num)


def _reset_offset(b: AdminTarget, client_id: int, a: JsonObject) -> JsonObject:
    """exactly one of timestamp (ms), offset or to ("first" / "last"); checked by the service too."""
    kw: dict[str, Any] = {}
    for key in ("timestamp", "offset"):
        if a.get(key) is not None:
            kw[key] = _int(a, key, 0, MAX_OFFSET)
    if a.get("to") is not None:
        kw["to"] = a["to"]
    return b.resets.reset(_group(a), _topic(a), **kw)


_QUEUE_ARGS = frozenset({"topic", "queue_id"})
COMMANDS: dict[str, tuple[Callable[[AdminTarget, int, JsonObject], JsonObject], frozenset[str]]] = {
    "create_topic": (_update_topic, frozenset({"topic", "read_queue_nums", "write_queue_nums", "perm", "order"})),
    "update_topic": (_update_topic, frozenset({"topic", "read_queue_nums", "write_queue_nums", "perm", "order"})),
    "delete_topic": (_delete_topic, frozenset({"topic"})),
    "list_topics": (_list_topics, frozenset()),
    "join_group": (_join_group, frozenset({"group", "model", "subscriptions"})),
    "leave_group": (_leave_group, frozenset({"group"})),
    "list_groups": (_list_groups, frozenset()),
    "query_offset": (_query_offset, _QUEUE_ARGS | {"group"}),
    "commit_offset": (_commit_offset, _QUEUE_ARGS | {"group", "offset"}),
    "search_offset": (_search_offset, _QUEUE_ARGS | {"timestamp"}),
    "queue_offsets": (_queue_offsets, _QUEUE_ARGS),
    "transactions": (_transactions, frozenset({"max_num"})),
    "view_trace": (_view_trace, frozenset({"topic", "msg_id"})),
    "resend_dlq": (_resend_dlq, frozenset({"group", "msg_ids", "max_num"})),
    "broker_status": (broker_status, frozenset()),
    "consumer_progress": (consumer_progress, frozenset({"group"})),
    "reset_offset": (_reset_offset, frozenset({"group", "topic", "timestamp", "offset", "to"})),
}


def handle(broker: AdminTarget, client_id: int, command: str, args: JsonObject) -> JsonObject:
    """Run ``command``; ValueError for an unknown command or argument, or a bad value."""
    entry = COMMANDS.get(command)
    if entry is None:
        raise ValueError(f"unknown admin command {command!r:.80}; known: {', '.join(sorted(COMMANDS))}")
    fn, allowed = entry
    unknown = set(args) - allowed
    if unknown:
        raise ValueError(f"admin command {command!r}: unknown arguments {sorted(unknown)!r:.200}")
    try:
        return fn(broker, client_id, args)
    except (KeyError, TypeError) as e:
        raise ValueError(f"admin command {command!r}: bad or missing argument {e}") from None

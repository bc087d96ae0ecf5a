"""Exceptions users of shmq see; each message says what went wrong and what to do.

Every exception shmq raises is a ShmqError, defined here and exported from ``shmq`` (only
``BrokerRunningError`` lives with the broker process, in ``shmq.procs.broker``). Where an
error also has a builtin meaning (a bad value, a timeout) it subclasses that builtin too, so
``except ValueError`` keeps working.
"""

from __future__ import annotations


class ShmqError(Exception):
    """Base class of every shmq error."""


class BadTopicError(ShmqError, ValueError):
    """The topic name is empty, too long or has characters RocketMQ does not allow."""


class BadPropertiesError(ShmqError, ValueError):
    """User properties cannot be encoded (separators inside, too large, not str)."""


class MessageTooLargeError(ShmqError, ValueError):
    """The message (or batch) is over maxMessageSize."""


class DiskFullError(ShmqError, OSError):
    """The store's disk is full (past diskSpaceWarningLevelRatio, or no block left to reserve);
    writes are refused, reads go on, and writes resume by themselves once space is freed."""

    wanted: int = 0  # bytes the refused reservation asked for (0: refused by the used ratio)


class StoreClosedError(ShmqError, RuntimeError):
    """The store was shut down."""


class StoreLockedError(ShmqError, RuntimeError):
    """Another broker already owns this store directory."""


class ConfigError(ShmqError, ValueError):
    """A configuration file or key is wrong."""


class MetadataError(ShmqError, RuntimeError):
    """Store metadata (consumer offsets, the pop log) is damaged or unreadable and no valid copy is
    left: the broker will not start rather than reset what consumers committed."""


class CorruptFrameError(ShmqError, ValueError):
    """A ring holds a malformed frame or impossible counters; the peer is buggy or hostile, drop the channel."""


class ControlProtocolError(ShmqError, ValueError):
    """A control-queue message cannot be decoded (wrong version, truncated, bad JSON)."""


class ControlTimeoutError(ShmqError, TimeoutError):
    """The control queue did not accept or answer a request in time; is the broker overloaded or stuck?"""


class BrokerNotFoundError(ShmqError, LookupError):
    """No broker serves this name or store: start one with `shmq broker --store DIR`."""


class BrokerGoneError(ShmqError, ConnectionError):
    """The broker went away (its control queue or segments were removed, or it died)."""


class ForeignOwnerError(ShmqError, PermissionError):
    """A shmq IPC object (segment, semaphore, SysV queue) or store file belongs to another user: a
    squatter, or another user's broker of the same name; the message names the owner."""


class SharedMemoryFullError(ShmqError, OSError):
    """/dev/shm has no room to back a new segment (a channel or the state segment).

    Free some, or ask for a smaller ring."""


class StateLayoutError(ShmqError, ValueError):
    """The state segment has a wrong magic or version; broker and client versions differ."""


class CorruptRecordError(ShmqError, ValueError):
    """A byte range that should hold a commitlog record does not."""


class BadMessageError(ShmqError, ValueError):
    """A Message argument is out of range or of the wrong type (keys, delay_level)."""


class BadExpressionError(ShmqError, ValueError):
    """A subscription expression is malformed (tags or SQL92); for an SQL92 syntax error
    ``column`` (1-based) and ``expected`` say where and what the parser wanted."""

    column: int | None = None
    expected: str | None = None


# RocketMQ's ResponseCode names of the codes a broker answers with (0: an admin command refused)
RESPONSE_CODES = {
    0: "ADMIN_REFUSED",
    1: "SYSTEM_ERROR",
    2: "SYSTEM_BUSY",
    3: "REQUEST_CODE_NOT_SUPPORTED",
    13: "MESSAGE_ILLEGAL",
    14: "SERVICE_NOT_AVAILABLE",
    16: "NO_PERMISSION",
    17: "TOPIC_NOT_EXIST",
}
DISK_FULL = "disk full"  # how the store's refusal of a write on a full disk begins (DiskSpace.error)


class BrokerError(ShmqError):
    """The broker refused a request. The message says why in plain words (it is what a user
    reads); ``code`` is RocketMQ's ResponseCode number (0 for an admin command's refusal) and
    ``code_name`` its name, for programs that branch on it."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code

    @property
    def code_name(self) -> str:
        return RESPONSE_CODES.get(self.code, str(self.code))


class BrokerDiskFullError(BrokerError, DiskFullError):
    """A send the broker refused because its disk is full (SERVICE_NOT_AVAILABLE, code 14): a
    program catches it as ``DiskFullError`` (what it is) or as ``BrokerError`` (where it came from)."""


def broker_error(code: int, message: str) -> BrokerError:
    """The exception for an ERROR answer; a full disk (code 14, the store's own words) gets its own type."""
    if RESPONSE_CODES.get(code) == "SERVICE_NOT_AVAILABLE" and message.startswith(DISK_FULL):
        return BrokerDiskFullError(code, message)
    return BrokerError(code, message)


def plain_message(e: BaseException) -> str:
    """What a refusal caused by ``e`` tells the client, in words: the exception's message without
    its class name (an OS error as its description and file); a bug's exception, whose message
    means nothing to a user, as a pointer to the broker's log."""
    if isinstance(e, OSError) and e.strerror and not isinstance(e, ShmqError):
        return f"{e.strerror.lower()}: {e.filename}" if e.filename else e.strerror.lower()
    if str(e) and not isinstance(e, (KeyError, IndexError, TypeError, AttributeError, AssertionError)):
        return str(e)
    return "the broker failed on this request (a bug: its log has the details)"


class BrokerBusyError(BrokerError):
    """SYSTEM_BUSY after every retry: the broker could not keep up (waitTimeMillsInSendQueue)."""


class ReceiptError(ShmqError, ValueError):
    """The broker refused a SimpleConsumer's ack or invisible-time change: the receipt is stale
    (the message was handed out again since), unknown (settled already, or never handed out)
    or malformed. ``status`` is the RECEIPT_* code of shmq.codec.pop_frames."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class SendTimeoutError(ShmqError, TimeoutError):
    """No answer within sendMsgTimeout (after retries)."""


class BrokerStartError(ShmqError, RuntimeError):
    """The broker process exited or did not come up in time; the message carries its log."""


class TopicNotReadableError(ShmqError, PermissionError):
    """The topic's perm lacks the read bit (4): consumers may not read it (RocketMQ: "pulling message is forbidden")."""


class BadArgumentError(ShmqError, ValueError):
    """A client call got a value it cannot use (a negative offset, a queue the topic does not have)."""


class ArgumentTypeError(ShmqError, TypeError):
    """A client call got an argument of the wrong type (not a Message, a body that is not bytes)."""


class HAProtocolError(ShmqError, ValueError):
    """An HA peer sent something the protocol does not allow (wrong magic, version, token proof,
    a frame at the wrong offset or of an impossible size): the connection is closed, the store
    keeps nothing of it."""


class HADivergedError(ShmqError, RuntimeError):
    """A replica's store holds history the master does not share (no common epoch), so it cannot
    follow that master without losing data silently; wipe it or start it as a master."""


class ReplicaReadOnlyError(BrokerError):
    """The broker is a replica (brokerRole=SLAVE): it serves consumers, producers must send to its master."""


class NotAStoreError(ShmqError, ValueError):
    """A path given as a store directory holds no shmq store (no commitlog/ and consumequeue/)."""


class MessageNotFoundError(ShmqError, LookupError):
    """No stored message has the id asked for (``Admin.view_message``): never stored, removed by
    cleanup, or not in the topic given."""


class RouteTableError(ShmqError, ValueError):
    """A name server's route table is damaged or does not fit its segment."""


class NameServerNotFoundError(ShmqError, LookupError):
    """No name server serves this name: start one with `shmq namesrv --name NS`."""


class RegistrationError(ShmqError, ValueError):
    """A name server refused a broker's registration (a bad field, or its broker name and id
    are registered by another live broker)."""

"""Exceptions users of shmq see; each message says what went wrong and what to do."""
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
    """The store's disk is past diskSpaceWarningLevelRatio; writes are refused until cleanup frees space."""


class StoreClosedError(ShmqError, RuntimeError):
    """The store was shut down."""


class StoreLockedError(ShmqError, RuntimeError):
    """Another broker already owns this store directory."""


class ConfigError(ShmqError, ValueError):
    """A configuration file or key is wrong."""


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


class StateLayoutError(ShmqError, ValueError):
    """The state segment has a wrong magic or version; broker and client versions differ."""

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

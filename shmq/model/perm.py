"""A topic's permission bits (RocketMQ's PermName): the broker enforces write, consumers read.

One definition for the broker's topic table, the admin client and the consumers, which read
the store files directly and so check the read bit themselves."""

from __future__ import annotations

PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
PERM_RW = PERM_READ | PERM_WRITE

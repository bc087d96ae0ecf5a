"""Who owns a broker's IPC objects, and whom a broker or a client trusts with them.

Every shmq name is predictable (``/shmq.<broker>.*``, SysV keys hashed from the store path),
so another user of the machine can create one first: squat a broker's name so that it cannot
start, or run a broker of the same name and receive another user's messages. The broker
therefore refuses to start while any object of its name or store belongs to another user,
and a client uses a broker's objects only when they belong to its own user, to root, or to
the ``shmGroup`` the broker announces in its state segment (if the client is in that group).
Owners are read from the object itself (``fstat``, ``stat`` of /dev/shm, IPC_STAT through
/proc/sysvipc), never from anything the owner could write.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shmq.errors import ForeignOwnerError
from shmq.ring import shm

if TYPE_CHECKING:
    from shmq.ring.channel import Channel

_SYSV_TABLES = {"msg": ("/proc/sysvipc/msg", "message queue"), "sem": ("/proc/sysvipc/sem", "semaphore")}


def describe_uid(uid: int) -> str:
    """``uid 1001 (alice)``, or just the number for a user without a passwd entry."""
    try:
        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except KeyError:
        return f"uid {uid}"


def semaphore_path(name: str) -> str:
    """Where Linux keeps the POSIX named semaphore ``name`` (``/x`` -> ``/dev/shm/sem.x``)."""
    return f"{shm.SHM_DIR}/sem.{name.lstrip('/')}"


def sysv_owner(kind: str, key: int) -> tuple[int, int, int] | None:
    """(uid, gid, creator uid) of the SysV ``kind`` ("msg" or "sem") object with ``key``; None if none.

    Read from /proc/sysvipc, which shows every object whoever may open it, so a broker that
    may not even open a squatter's queue can still name its owner.
    """
    path, _ = _SYSV_TABLES[kind]
    with open(path) as f:
        columns = f.readline().split()
        k, u, g, c = (columns.index(n) for n in ("key", "uid", "gid", "cuid"))
        for line in f:
            row = line.split()
            if row and int(row[k]) == key:
                return int(row[u]), int(row[g]), int(row[c])
    return None


@dataclass(frozen=True)
class Trust:
    """The owners a client accepts: its own user, root, and optionally one group it belongs to."""

    uids: frozenset[int]
    gid: int | None = None

    @classmethod
    def client(cls, shm_gid: int | None = None) -> Trust:
        """This process's trust: its effective user and root, plus ``shm_gid`` if it is a member."""
        member = shm_gid is not None and (shm_gid == os.getegid() or shm_gid in os.getgroups())
        return cls(frozenset({os.geteuid(), 0}), shm_gid if member else None)

    def check(self, what: str, uid: int, gid: int, creator: int | None = None) -> None:
        """Raise ``ForeignOwnerError`` unless ``what`` (owned by ``uid``:``gid``) is trusted.

        ``creator`` is a SysV object's creator uid: its owner uid can be set to anything (root
        included) by its creator, so the creator must be trusted as well.
        """
        group_ok = self.gid is not None and gid == self.gid
        culprit = next((u for u in (uid, creator) if u is not None and u not in self.uids and not group_ok), None)
        if culprit is not None:
            who = describe_uid(culprit)
            raise ForeignOwnerError(
                f"{what} belongs to {who}, not to this user ({describe_uid(os.geteuid())}), "
                "root or the broker's shmGroup: another user's broker of this name, or a "
                "squatter; refusing to use it"
            )

    def check_semaphore(self, name: str) -> None:
        """Check the owner of the POSIX named semaphore ``name``."""
        st = os.lstat(semaphore_path(name))
        self.check(f"semaphore {name}", st.st_uid, st.st_gid)

    def check_queue(self, key: int) -> None:
        """Check the owner and creator of the SysV message queue ``key`` (gone: nothing to check)."""
        owner = sysv_owner("msg", key)
        if owner is not None:
            self.check(f"control queue {key:#x}", owner[0], owner[1], creator=owner[2])


def foreign_segment(what: str, name: str) -> ForeignOwnerError:
    """The error for the segment ``name`` that this user may not even open, naming its owner."""
    try:
        uid: int | None = os.stat(f"{shm.SHM_DIR}/{name.lstrip('/')}").st_uid
    except OSError:
        uid = None
    return _not_usable(what, uid)


def foreign_sysv(what: str, kind: str, key: int) -> ForeignOwnerError:
    """The error for the SysV object ``key`` of ``kind`` ("msg" or "sem") that this user may not use."""
    owner = sysv_owner(kind, key)
    return _not_usable(what, owner[0] if owner is not None else None)


def _not_usable(what: str, uid: int | None) -> ForeignOwnerError:
    who = describe_uid(uid) if uid is not None else "another user"
    return ForeignOwnerError(
        f"{what} belongs to {who}, not to this user ({describe_uid(os.geteuid())}), and this "
        "user may not use it: another user's broker of this name; ask its owner for a shmGroup "
        "that includes this user, or pick another broker name"
    )


def check_channel(trust: Trust, channel: Channel) -> None:
    """Check the owners of a client's channel segment and of both its doorbells."""
    trust.check(f"channel {channel.segment.name}", *channel.segment.owner)
    trust.check_semaphore(channel.client_bell.name)
    trust.check_semaphore(channel.broker_bell.name)


def refuse_squatters(broker: str, sysv: list[tuple[str, int]]) -> None:
    """Broker side, before it takes its name: ``ForeignOwnerError`` naming the first object of
    ``broker`` in /dev/shm, or of ``sysv`` (("msg" | "sem", key) pairs), that another user owns
    or created.

    Left as they are, such objects would either make the start fail half-way (a non-root
    broker may not remove them) or, for root, be removed from under another user's broker.
    """
    me = os.geteuid()
    found: list[tuple[str, int]] = []
    for entry in shm.leftovers(broker):
        try:
            st = os.lstat(f"{shm.SHM_DIR}/{entry}")
        except FileNotFoundError:
            continue
        found.append((f"{shm.SHM_DIR}/{entry}", st.st_uid))
    for kind, key in sysv:
        owner = sysv_owner(kind, key)
        if owner is not None:
            found.append((f"SysV {_SYSV_TABLES[kind][1]} {key:#x}", owner[0] if owner[0] != me else owner[2]))
    for what, uid in found:
        if uid != me:
            raise ForeignOwnerError(
                f"broker name {broker!r} is taken: {what} belongs to {describe_uid(uid)}, not to "
                f"this broker's user ({describe_uid(me)}); stop that user's broker, remove the "
                "object as that user or root, or pick another --name"
            )

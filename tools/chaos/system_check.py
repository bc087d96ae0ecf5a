"""The invariants of the whole-system chaos run, as pure functions of what the processes logged
and what the store holds (no I/O here: tools/chaos/system.py reads, this judges).

Where a message is: ``At = (queue id, queue offset)``; who made it: ``Who = (tag, seq)``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

At = tuple[int, int]
Who = tuple[str, int]


@dataclass
class Ledger:
    """What the clients said, from their log lines (tools/chaos/system_clients.py)."""

    acked: dict[Who, At] = field(default_factory=dict)  # SEND_OK: where the broker said it put it
    statuses: Counter[str] = field(default_factory=Counter)  # answers other than SEND_OK, by name
    last_sent: dict[str, int] = field(default_factory=dict)  # highest seq each producer tried
    consumed: Counter[At] = field(default_factory=Counter)  # deliveries per message
    consumed_who: dict[At, Who | None] = field(default_factory=dict)  # None: the body was not one we made

    def add_producer_lines(self, lines: list[list[str]]) -> None:
        for words in lines:
            tag, seq = words[1], int(words[2])
            self.last_sent[tag] = max(self.last_sent.get(tag, -1), seq)
            if words[0] == "A":
                self.acked[(tag, seq)] = (int(words[3]), int(words[4]))
            else:
                self.statuses[words[3]] += 1

    def add_consumer_lines(self, lines: list[list[str]]) -> None:
        for words in lines:
            at = (int(words[3]), int(words[4]))
            self.consumed[at] += 1
            who = (words[1], int(words[2])) if words[5] == "1" else None
            if self.consumed_who.get(at, who) != who:
                who = None  # two deliveries of one queue offset with different bodies
            self.consumed_who[at] = who


def committed_past_unconsumed(committed: dict[int, int], consumed: Counter[At]) -> list[tuple[int, int, int]]:
    """(queue, first offset never consumed, committed offset) of each queue whose committed offset
    is past a message no consumer took: a restarted consumer would skip it. Read the committed
    offsets before the consumer logs, so a commit is never newer than the log it is checked against."""
    taken: dict[int, set[int]] = {}
    for q, o in consumed:
        taken.setdefault(q, set()).add(o)
    out = []
    for q, c in sorted(committed.items()):
        have = taken.get(q, set())
        gap = next((o for o in range(c) if o not in have), None)
        if gap is not None:
            out.append((q, gap, c))
    return out


@dataclass
class Verdict:
    """The run's figures; ``violations()`` is empty when every invariant held."""

    acked: int
    lost: list[Who]  # acknowledged, not in the store where the broker said
    unsent: list[At]  # consumed, but not a message a producer sent and the store holds there
    never_consumed: list[At]  # stored, the consumers drained the topic, and still never delivered
    redelivered: int  # deliveries beyond the first
    stored: int

    def violations(self) -> dict[str, int]:
        return {
            k: n
            for k, n in (
                ("lost", len(self.lost)),
                ("unsent", len(self.unsent)),
                ("never_consumed", len(self.never_consumed)),
            )
            if n
        }


def judge(ledger: Ledger, stored: dict[At, Who | None]) -> Verdict:
    """Compare the clients' logs with the store's content at the end of a run (consumers drained)."""
    lost = [who for who, at in ledger.acked.items() if stored.get(at) != who]
    unsent = []
    for at, who in ledger.consumed_who.items():
        if who is None or stored.get(at) != who or who[1] > ledger.last_sent.get(who[0], -1) + 1:
            unsent.append(at)
    never = [at for at in stored if at not in ledger.consumed]
    redelivered = sum(n - 1 for n in ledger.consumed.values())
    return Verdict(len(ledger.acked), sorted(lost), sorted(unsent), sorted(never), redelivered, len(stored))

"""Count the duplicates a clustering push group delivers when a member dies, or leaves and joins.

    python -m tools.chaos.member_kill_dups [--messages 4000] [--rate 2000] [--runs 3] [--scenario kill|churn]

A broker, then member processes of one clustering ``PushConsumer`` group on one topic (8
queues), while this process sends numbered messages at a steady ``--rate`` (sync ``send``).

- ``kill``: two members; when half the messages are sent, one is SIGKILLed. Its queues go to
  the survivor, which starts from the offsets the dead member last committed: what the dead
  member consumed after its last commit (and what it had in its listener) comes again.
- ``churn``: one member; a second joins after a third of the messages and the first leaves
  (SIGTERM, a clean shutdown) after two thirds. A clean hand-over commits before the new
  owner reads, so no message may come twice.

Each member appends the body of every message its listener is given to its own file with one
``os.write`` per listener call (in the kernel at once: a SIGKILL loses nothing it reported).
A run prints one JSON line: messages sent, consumed, duplicates (deliveries past the first),
losses (sent, never consumed: must be 0); the last line is the median of the runs.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import shmq

TOPIC = "DupT"
GROUP = "dup-cg"
QUEUES = 8
CONFIG = {"mappedFileSizeCommitLog": 16 * 1024 * 1024, "haListenPort": 0}
DRAIN_TIMEOUT_S = 60.0


def member(broker: str, out_path: str) -> None:
    """A group member until SIGTERM (or SIGKILL): every body it consumes goes to ``out_path``."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def listener(msgs: list[shmq.MessageExt], _ctx: object) -> shmq.ConsumeResult:
        os.write(fd, b"".join(m.body + b"\n" for m in msgs))
        return shmq.ConsumeResult.SUCCESS

    c = shmq.PushConsumer(GROUP, broker=broker, consume_from=shmq.ConsumeFrom.FIRST_OFFSET, start_timeout=10)
    c.subscribe(TOPIC)
    c.register_listener(listener)
    c.start()
    print("ready", flush=True)
    while not stop.wait(0.05):
        pass
    c.shutdown()
    os.close(fd)


def _spawn(broker: str, out_path: str) -> subprocess.Popen[str]:
    p = subprocess.Popen(
        [sys.executable, "-m", "tools.chaos.member_kill_dups", "--member", broker, out_path],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert p.stdout is not None
    line = p.stdout.readline().strip()
    if line != "ready":
        p.kill()
        p.wait()
        raise SystemExit(f"a member did not start (it said {line!r})")
    return p


def _consumed(paths: list[str]) -> Counter[bytes]:
    got: Counter[bytes] = Counter()
    for path in paths:
        try:
            with open(path, "rb") as f:
                got.update(line for line in f.read().split(b"\n") if line)
        except FileNotFoundError:
            pass
    return got


def _end(p: subprocess.Popen[str], sig: int) -> None:
    if p.poll() is None:
        p.send_signal(sig)
    p.wait(30)
    if p.stdout is not None:
        p.stdout.close()


def run(scenario: str, messages: int, rate: float, name: str = "", store: str = "") -> dict[str, object]:
    """One run on a fresh broker (``name``, its store at ``store``: by default this process's
    and a temp folder); the figures as a dict."""
    with tempfile.TemporaryDirectory(prefix="shmq-dups-") as tmp:
        name = name or f"dups{os.getpid()}"
        outs = [os.path.join(tmp, f"m{i}") for i in range(2)]
        members: list[subprocess.Popen[str]] = []
        with shmq.Broker(store or os.path.join(tmp, "store"), name, CONFIG):
            shmq.Admin(name).create_topic(TOPIC, QUEUES)
            try:
                members.append(_spawn(name, outs[0]))
                if scenario == "kill":
                    members.append(_spawn(name, outs[1]))
                events = _events(scenario, messages, members, name, outs)
                _send_steadily(name, messages, rate, events)
                want = {b"%d" % i for i in range(messages)}
                deadline = time.monotonic() + DRAIN_TIMEOUT_S
                while set(_consumed(outs)) != want and time.monotonic() < deadline:
                    time.sleep(0.05)
                time.sleep(0.3)  # late duplicates, if any, land too
            finally:
                for p in members:
                    _end(p, signal.SIGTERM)
            got = _consumed(outs)
    return {
        "scenario": scenario,
        "messages": messages,
        "rate": rate,
        "consumed": len(got),
        "duplicates": sum(n - 1 for n in got.values()),
        "lost": len(want - set(got)),
    }


def _events(
    scenario: str, messages: int, members: list[subprocess.Popen[str]], broker: str, outs: list[str]
) -> dict[int, object]:
    """What happens after which message is sent: a kill, or a join then a leave."""
    if scenario == "kill":
        return {messages // 2: lambda: members[0].send_signal(signal.SIGKILL)}

    def join() -> None:
        members.append(_spawn(broker, outs[1]))

    def leave() -> None:
        _end(members[0], signal.SIGTERM)

    return {messages // 3: join, 2 * messages // 3: leave}


def _send_steadily(broker: str, messages: int, rate: float, events: dict[int, object]) -> None:
    """Sync sends at ``rate`` per second; ``events[i]()`` runs in a thread after message i."""
    gap = 1.0 / rate
    threads = []
    with shmq.Producer("dup-pg", broker=broker) as p:
        next_at = time.monotonic()
        for i in range(messages):
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            next_at += gap
            p.send(shmq.Message(TOPIC, b"%d" % i))
            event = events.get(i)
            if callable(event):
                t = threading.Thread(target=event)
                t.start()
                threads.append(t)
    for t in threads:
        t.join(30)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--member":
        member(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=4000)
    ap.add_argument("--rate", type=float, default=2000.0, help="messages sent per second")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--scenario", choices=("kill", "churn"), default="kill")
    args = ap.parse_args()
    results = []
    for _ in range(args.runs):
        r = run(args.scenario, args.messages, args.rate)
        print(json.dumps(r), flush=True)
        results.append(r)
    print(
        json.dumps(
            {
                "scenario": args.scenario,
                "median_duplicates": statistics.median(int(str(r["duplicates"])) for r in results),
                "max_lost": max(int(str(r["lost"])) for r in results),
            }
        )
    )


if __name__ == "__main__":
    main()

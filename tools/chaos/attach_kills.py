"""SIGKILL clients at random points of attaching to a live broker; count the liveness semaphores
left once the broker stopped.

    python -m tools.chaos.attach_kills [--kills 2000] [--seed 1] [--max-delay-ms 30]

Each client is a forked process that attaches and detaches in a loop (``Producer.start`` /
``shutdown``) until it is killed after a random delay. Every liveness key a client takes is
recorded (``Liveness.hold`` is wrapped before the forks), so the count is exact whatever else
runs on the machine. Leftovers are reported, then removed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import signal
import tempfile
import time
from typing import Any

import sysv_ipc

import shmq
from shmq.ring.liveness import Liveness

ctx = mp.get_context("fork")


def _record_holds(log_path: str) -> None:
    """Append every key ``Liveness.hold`` takes (in this process and its forks) to ``log_path``."""
    hold = Liveness.hold.__func__  # type: ignore[attr-defined]

    def recording(cls: type[Liveness], *args: Any, **kwargs: Any) -> Liveness:
        token = hold(cls, *args, **kwargs)
        with open(log_path, "a") as f:
            f.write(f"{token.key}\n")
        return token

    Liveness.hold = classmethod(recording)  # type: ignore[method-assign, assignment]


def attach_forever(broker: str) -> None:
    """Attach and detach as fast as possible until killed."""
    while True:
        try:
            shmq.Producer("kill-pg", broker=broker, start_timeout=5).start().shutdown()
        except shmq.ShmqError:
            pass


def _left(keys: set[int]) -> list[int]:
    found = []
    for k in sorted(keys):
        try:
            sysv_ipc.Semaphore(k)
        except sysv_ipc.ExistentialError:
            continue
        found.append(k)
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kills", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-delay-ms", type=float, default=30.0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="shmq-attach-kills-") as work:
        log_path = os.path.join(work, "keys")
        name = f"attachkills{os.getpid()}"
        broker = shmq.Broker(os.path.join(work, "store"), name)
        _record_holds(log_path)
        t0 = time.monotonic()
        try:
            for _ in range(args.kills):
                p = ctx.Process(target=attach_forever, args=(name,))
                p.start()
                time.sleep(rng.uniform(0.0, args.max_delay_ms / 1000))
                os.kill(p.pid, signal.SIGKILL)
                p.join(10)
        finally:
            broker.stop()
        with open(log_path) as f:
            lines = f.read().split()
        keys, holds = {int(k) for k in lines}, len(lines)
        left = _left(keys)
        print(
            f"{args.kills} clients killed in {time.monotonic() - t0:.0f} s, {holds} liveness semaphores "
            f"taken, {len(left)} left after the broker stopped ({100 * len(left) / args.kills:.1f} % of kills)"
        )
        for k in left:
            try:
                sysv_ipc.Semaphore(k).remove()
            except sysv_ipc.ExistentialError:
                pass
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())

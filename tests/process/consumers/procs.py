"""Helpers for tests that run consumers and producers as separate processes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections import Counter


def spawn(*args: object, opts: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "tests.process.consumers.child", *map(str, args)]
    if opts:
        cmd.append(json.dumps(opts))
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)


def expect_line(proc: subprocess.Popen, line: str) -> None:
    got = proc.stdout.readline().strip()
    assert got == line, f"child said {got!r}, exit status {proc.poll()}"


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        rc = proc.wait(20)
    except subprocess.TimeoutExpired:  # a hang: its threads' stacks go to stderr, then it is killed
        proc.send_signal(signal.SIGUSR1)
        time.sleep(1)
        proc.kill()
        proc.wait()
        raise
    finally:
        proc.stdout.close()
    return rc


def received(path: str) -> list[tuple[str, int, int]]:
    """(body, queue id, reconsume times) per line a consumer child wrote."""
    try:
        with open(path) as f:
            rows = [line.split() for line in f if line.endswith("\n")]
    except FileNotFoundError:
        return []
    return [(b, int(q), int(r)) for b, q, r in rows]


def bodies(*paths: str) -> Counter:
    return Counter(b for p in paths for b, _, _ in received(p))

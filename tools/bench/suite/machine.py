"""Facts about the machine a run happened on."""

from __future__ import annotations

import os
import platform
import socket
import sys


def facts() -> dict:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal"):
                    mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    distro = "?"
    try:
        with open("/etc/os-release") as f:
            kv = dict(line.rstrip().split("=", 1) for line in f if "=" in line)
            distro = kv.get("PRETTY_NAME", "?").strip('"')
    except OSError:
        pass
    return {
        "host": socket.gethostname(),
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem / 2**30, 1),
        "kernel": platform.release(),
        "os": distro,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }

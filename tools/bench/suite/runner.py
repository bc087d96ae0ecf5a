"""Run every workload on every available system, interleaved, and gather the results."""

from __future__ import annotations

import shutil
import tempfile
import time
import traceback
from datetime import UTC, datetime

import numpy as np

from . import core, install, machine
from .core import DurableSpec, LatencySpec, ReplicatedSpec, TputSpec
from .settings import Settings

LAT_SIZE = 100
DUR_SIZE = 100


def _stats(values: list[float]) -> dict:
    if not values:
        return {}
    return {"median": float(np.median(values)), "min": float(min(values)), "max": float(max(values)), "n": len(values)}


def workloads(s: Settings) -> list[tuple[str, str, object]]:
    """(key, kind, spec factory taking a run id) for every workload shared by all systems."""
    out = []
    for p, c in s.patterns:
        for size in s.sizes:
            for api in s.apis:
                count = s.msg_count if api == "msg" else s.batch_count
                key = f"tput {p}->{c} {size}B {api}"
                out.append(
                    (
                        key,
                        "tput",
                        lambda rid, p=p, c=c, size=size, api=api, count=count: TputSpec(
                            p, c, size, api, count, s.batch_size, s.run_deadline, rid
                        ),
                    )
                )
    out.append(
        (
            f"latency {LAT_SIZE}B",
            "latency",
            lambda rid: LatencySpec(LAT_SIZE, s.latency_rounds, s.latency_deadline, rid),
        )
    )
    out.append(
        (
            f"durable {s.durable_senders} senders {DUR_SIZE}B",
            "durable",
            lambda rid: DurableSpec(s.durable_senders, DUR_SIZE, s.durable_count, s.durable_deadline, rid),
        )
    )
    # the same senders against a master with a replica: SYNC vs ASYNC
    out.extend(
        (
            f"replicated {mode} {s.durable_senders} senders {DUR_SIZE}B",
            "replicated",
            lambda rid, mode=mode: ReplicatedSpec(
                s.durable_senders, DUR_SIZE, s.durable_count, s.durable_deadline, rid, mode == "sync"
            ),
        )
        for mode in ("sync", "async")
    )
    return out


def _applies(system, kind: str, spec) -> str | None:
    """Why ``system`` does not run this workload, or None."""
    if kind == "tput" and spec.api not in system.apis:
        return system.api_notes.get(spec.api, f"no {spec.api} API")
    if kind == "latency" and not system.latency:
        return "no synchronous send"
    if kind == "durable" and not system.durable:
        return system.durable_note or "no persistence"
    if kind == "replicated" and not system.replicated:
        return "no replication"
    return system.why_not(kind, spec)


def selected(wl: list[tuple[str, str, object]], words: list[str] | None) -> list[tuple[str, str, object]]:
    """The workloads whose key contains one of ``words`` (all of them without words)."""
    return [w for w in wl if not words or any(word in w[0] for word in words)]


def run_suite(
    s: Settings, only: list[str] | None = None, budget: float | None = None, words: list[str] | None = None
) -> dict:
    """Every selected workload (``words``: see ``selected``) on every system in ``only`` (all without)."""
    started = time.monotonic()
    load_at_start = round(__import__("os").getloadavg()[0], 2)
    budget = budget or (70.0 if s.quick else 480.0)  # the interleaved repetitions; extras come after
    install.ensure_clients()
    from .peers import all_systems

    systems = [x for x in all_systems() if not only or x.name in only]
    workdir = tempfile.mkdtemp(prefix="shmq-bench.")
    unavailable: dict[str, str] = {}
    live = []
    for system in systems:
        reason = system.install()
        if reason is None:
            try:
                system.start(workdir)
                live.append(system)
            except Exception as e:
                reason = f"could not start: {type(e).__name__}: {e}"
                try:
                    system.stop()
                except Exception:
                    pass
        if reason:
            unavailable[system.name] = reason
            install.say(f"skipping {system.name}: {reason}")
    results: dict = {}
    wl = selected(workloads(s), words)
    run_extras = not words or "extras" in words
    for key, kind, _ in wl:
        results[key] = {"kind": kind, "systems": {}}
        for system in systems:
            entry = {"runs": [], "errors": []}
            if system.name in unavailable:
                entry["na"] = unavailable[system.name]
            results[key]["systems"][system.name] = entry
    skipped_reps = 0
    try:
        rep_started = time.monotonic()
        for rep in range(s.reps):
            elapsed = time.monotonic() - started
            per_rep = (elapsed - (rep_started - started)) / rep if rep else 0.0
            if rep and elapsed + per_rep > budget:
                skipped_reps = s.reps - rep
                install.say(f"time budget of {budget:.0f} s: stopping after {rep} repetitions")
                break
            for n, (key, kind, make) in enumerate(wl):
                order = live[(rep + n) % len(live) :] + live[: (rep + n) % len(live)] if live else []
                for system in order:
                    entry = results[key]["systems"][system.name]
                    spec = make(f"r{rep}w{n}{system.name[:2].replace(' ', '').replace('.', '')}".lower())
                    why = _applies(system, kind, spec)
                    if why:
                        entry["na"] = why
                        continue
                    t = time.monotonic()
                    ok = False
                    try:
                        fn = {
                            "tput": core.run_tput,
                            "latency": core.run_latency,
                            "durable": core.run_durable,
                            "replicated": core.run_replicated,
                        }[kind]
                        entry["runs"].append(fn(system, spec))
                        ok = True
                    except Exception as e:
                        msg = f"{type(e).__name__}: {e}"
                        entry["errors"].append(msg)
                        install.say(f"{key} / {system.name}: {msg.splitlines()[0][:300]}")
                        if not isinstance(e, core.RunError):
                            traceback.print_exc()
                    print(
                        f"[bench] rep {rep + 1}/{s.reps} {key:<28} {system.name:<15} "
                        f"{_brief(entry['runs'][-1]) if ok else 'failed'}"
                        f" ({time.monotonic() - t:.1f}s)",
                        flush=True,
                    )
        extras = {}
        for system in live if run_extras else []:  # each extra workload is bounded by its own deadline
            x = system.extra_workloads(s)
            if x:
                extras[system.name] = x
        for system in systems:
            if run_extras and system.name in unavailable and system.name == "shmq":
                extras["shmq"] = {"queues": {"error": unavailable["shmq"]}, "backlog": {"error": unavailable["shmq"]}}
    finally:
        versions = {}
        for system in systems:
            try:
                if system.name not in unavailable:
                    versions.update(system.versions())
            except Exception as e:
                versions[system.name] = f"? ({e})"
        for system in live:
            try:
                system.stop()
            except Exception as e:
                install.say(f"stopping {system.name}: {e}")
        shutil.rmtree(workdir, ignore_errors=True)
    for key in results:
        kind = results[key]["kind"]
        for entry in results[key]["systems"].values():
            runs = entry["runs"]
            if kind == "tput":
                entry["msgs_s"] = _stats([r["msgs_s"] for r in runs])
                entry["mb_s"] = _stats([r["mb_s"] for r in runs])
                entry["capped"] = any(r["capped"] for r in runs)
            elif kind == "latency":
                for p in ("p50_us", "p99_us", "p999_us"):
                    entry[p] = _stats([r[p] for r in runs])
            else:
                entry["msgs_s"] = _stats([r["msgs_s"] for r in runs])
                for p in ("p50_us", "p99_us"):
                    entry[p] = _stats([r[p] for r in runs])
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quick": s.quick,
        "reps": s.reps,
        "skipped_reps": skipped_reps,
        "workloads": words or None,
        "settings": {k: v for k, v in s.__dict__.items() if k != "extra"},
        "machine": {**machine.facts(), "load_average_1m_at_start": load_at_start},
        "versions": versions,
        "unavailable": unavailable,
        "systems": {
            x.name: {
                "title": x.title,
                "how": x.how,
                "persistence": x.persistence,
                "broker": x.broker,
                "note": x.note,
                "durable_note": x.durable_note,
                "replicated_note": x.replicated_note,
            }
            for x in systems
        },
        "results": results,
        "extras": extras,
        "install_log": list(install.LOG),
        "seconds": round(time.monotonic() - started, 1),
    }


def _brief(r: dict) -> str:
    if "msgs_s" in r and "p50_us" not in r:
        return f"{r['msgs_s']:,.0f} msg/s" + (" (capped)" if r.get("capped") else "")
    if "msgs_s" in r:
        return f"{r['msgs_s']:,.0f} msg/s p50 {r['p50_us']:.0f}us"
    return f"p50 {r['p50_us']:.1f}us p99 {r['p99_us']:.1f}us"

"""The results as a rich table on screen, a JSON file and a markdown page."""

from __future__ import annotations

import json
import os
from datetime import datetime

REF = "shmq"


def short_rate(v: float) -> str:
    """A rate, short: 1.23M, 45.6k, 789 (the screen table and docs/BENCHMARKS.md)."""
    if v >= 1e6:
        return f"{v / 1e6:.2f}M"
    if v >= 1e3:
        return f"{v / 1e3:.1f}k"
    return f"{v:.0f}"


def micros(v: float) -> str:
    """Microseconds: whole above 100, one decimal below."""
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}"


def _first(text: str) -> str:
    return text.strip().splitlines()[0][:160] if text.strip() else text


def _cell(entry: dict) -> str:
    if entry.get("runs"):
        return ""
    if entry.get("na"):
        return entry["na"]
    if entry.get("errors"):
        return "failed: " + _first(entry["errors"][-1])
    return "no result"


def _ratio(res: dict, key: str, name: str, metric: str, lower_better: bool = False) -> str:
    me = res["results"][key]["systems"].get(REF, {}).get(metric, {})
    other = res["results"][key]["systems"].get(name, {}).get(metric, {})
    if name == REF or not me or not other or not other.get("median") or not me.get("median"):
        return "—"
    r = me["median"] / other["median"]
    return f"{1 / r if lower_better else r:.2f}×"


def _sync_ratio(res: dict, name: str) -> str:
    """A system's sync-replicated throughput over its async-replicated one (goal for shmq: >= 0.5)."""
    got = {}
    for key, w in res["results"].items():
        if w["kind"] == "replicated":
            got[key.split()[1]] = w["systems"].get(name, {}).get("msgs_s", {}).get("median")
    return f"{got['sync'] / got['async']:.2f}" if got.get("sync") and got.get("async") else ""


def rows(res: dict) -> dict[str, list[list[str]]]:
    """Tables as lists of rows (first row: header), shared by the screen and markdown output."""
    tables: dict[str, list[list[str]]] = {}
    tput = [["workload", "system", "msg/s (median)", "min–max", "MB/s", "shmq ×", "note"]]
    lat = [["system", "p50 µs", "p99 µs", "p99.9 µs", "p50 min–max", "shmq × (p50)", "note"]]
    dur = [["system", "msg/s (median)", "min–max", "p50 µs", "p99 µs", "shmq ×", "mode"]]
    rep = [["ack", "system", "msg/s (median)", "min–max", "p50 µs", "p99 µs", "shmq ×", "sync / async", "mode"]]
    for key, w in res["results"].items():
        for name, e in w["systems"].items():
            note = _cell(e)
            sysnote = res["systems"][name]["note"]
            if w["kind"] == "tput":
                if e.get("runs"):
                    m = e["msgs_s"]
                    capped = " (time-capped: sent fewer than the count)" if e.get("capped") else ""
                    tput.append(
                        [
                            key.removeprefix("tput "),
                            name,
                            short_rate(m["median"]),
                            f"{short_rate(m['min'])}–{short_rate(m['max'])}",
                            f"{e['mb_s']['median']:.1f}",
                            _ratio(res, key, name, "msgs_s"),
                            (sysnote + capped).strip(),
                        ]
                    )
                else:
                    tput.append([key.removeprefix("tput "), name, "—", "", "", "", note])
            elif w["kind"] == "latency":
                if e.get("runs"):
                    lat.append(
                        [
                            name,
                            micros(e["p50_us"]["median"]),
                            micros(e["p99_us"]["median"]),
                            micros(e["p999_us"]["median"]),
                            f"{micros(e['p50_us']['min'])}–{micros(e['p50_us']['max'])}",
                            _ratio(res, key, name, "p50_us", lower_better=True),
                            sysnote,
                        ]
                    )
                else:
                    lat.append([name, "—", "", "", "", "", note])
            elif w["kind"] == "replicated":
                mode = key.split()[1]
                if e.get("runs"):
                    m = e["msgs_s"]
                    rep.append(
                        [
                            mode,
                            name,
                            short_rate(m["median"]),
                            f"{short_rate(m['min'])}–{short_rate(m['max'])}",
                            micros(e["p50_us"]["median"]),
                            micros(e["p99_us"]["median"]),
                            _ratio(res, key, name, "msgs_s"),
                            _sync_ratio(res, name) if mode == "sync" else "",
                            res["systems"][name].get("replicated_note", ""),
                        ]
                    )
                elif e.get("na") != "no replication":  # the peers without replication are left out
                    rep.append([mode, name, "—", "", "", "", "", "", note])
            else:
                if e.get("runs"):
                    m = e["msgs_s"]
                    dur.append(
                        [
                            name,
                            short_rate(m["median"]),
                            f"{short_rate(m['min'])}–{short_rate(m['max'])}",
                            micros(e["p50_us"]["median"]),
                            micros(e["p99_us"]["median"]),
                            _ratio(res, key, name, "msgs_s"),
                            res["systems"][name]["durable_note"],
                        ]
                    )
                else:
                    dur.append([name, "—", "", "", "", "", note])
    kinds = {w["kind"]: k for k, w in res["results"].items()}  # a run of some workloads (--workloads) lacks tables
    if "tput" in kinds:
        tables["Throughput (end to end: received and acked)"] = tput
    if "latency" in kinds:
        tables[f"Round trip of one synchronous send ({kinds['latency']})"] = lat
    if "durable" in kinds:
        tables[f"Durability: acked only once on disk ({kinds['durable']})"] = dur
    if "replicated" in kinds:
        what = kinds["replicated"].split(" ", 2)[2]
        tables[f"Replication: a master with one replica, sync = acked once the replica has it ({what})"] = rep
    if res.get("workloads") and "extras" not in res["workloads"]:
        return tables
    x = res.get("extras", {}).get(REF, {})
    q = x.get("queues", {})
    if "error" in q or not q:
        tables["shmq queue-count scaling (send throughput, 100 B)"] = [
            ["queues", "msg/s", "ratio to 8"],
            ["—", _first(q.get("error", "not run")), ""],
        ]
    else:
        t = [["queues", "msg/s (median)", "min–max", "ratio to 8 queues"]]
        for n, v in q.items():
            if "error" in v:
                t.append([n, "—", _first(v["error"]), ""])
            else:
                ratio = f"{v['ratio_to_8']:.2f}" if v.get("ratio_to_8") else ""
                t.append(
                    [n, short_rate(v["median"]), f"{short_rate(min(v['runs']))}–{short_rate(max(v['runs']))}", ratio]
                )
        tables["shmq queue-count scaling (send throughput, 100 B)"] = t
    tables["Send -> listener latency at 1,000 msgs/s (100 B, µs; a parked receiver woken per message)"] = push_rows(res)
    tables["shmq cluster: N brokers, N producers and N consumers (batch, 100 B)"] = _cluster(x.get("cluster"))
    tables["A worker pool: SimpleConsumer (POP), push group, Pool.imap_unordered, Redis Streams (100 B)"] = _pop(
        x.get("pop")
    )
    b = x.get("backlog", {})
    if "error" in b or not b:
        tables["shmq backlog (100 B, unconsumed, then drained)"] = [
            ["written", "result"],
            ["—", _first(b.get("error", "not run"))],
        ]
    else:
        tables["shmq backlog (100 B, unconsumed, then drained)"] = [
            ["written", "write msg/s", "first 10%", "last 10%", "last / first", "drain msg/s"],
            [
                f"{b['messages']:,}" + (" (time-capped)" if b.get("capped") else ""),
                short_rate(b["write_msgs_s"]),
                short_rate(b["first_tenth_msgs_s"]),
                short_rate(b["last_tenth_msgs_s"]),
                f"{b['last_vs_first']:.2f}",
                short_rate(b["drain_msgs_s"]),
            ],
        ]
    return tables


def _cluster(cluster: dict | None) -> list[list[str]]:
    from tools.bench import cluster_page  # it renders with this module's helpers

    if not cluster or "error" in cluster.get("brokers", {"error": "not run"}):
        return [["brokers", "result"], ["—", _first((cluster or {}).get("brokers", {}).get("error", "not run"))]]
    namesrv = ["namesrv= / broker=", cluster_page.namesrv_result(cluster), *[""] * 7]
    return [cluster_page.HEADER, *cluster_page.rows(cluster), namesrv]


def _pop(pop: dict | None) -> list[list[str]]:
    from tools.bench import pop_page  # it renders with this module's helpers

    if not pop or not pop.get("workers"):
        return [["workers", "result"], ["—", _first((pop or {}).get("error", "not run"))]]
    return [pop_page.HEADER, *pop_page.rows(pop), ["latency", pop_page.latency_line(pop), *[""] * 7]]


def push_rows(res: dict) -> list[list[str]]:
    """One row per system and send API: shmq's PushConsumer listener, the peers' blocking receive."""
    t = [["system", "send API", "p50", "p99", "p99.9", "messages per run"]]
    for name, x in res.get("extras", {}).items():
        push = x.get("push")
        if not push:
            continue
        if "error" in push:
            t.append([name, "—", _first(push["error"]), "", "", ""])
            continue
        for api, v in push.items():
            t.append(
                [
                    name,
                    f"`{api}`",
                    f"{v['p50_us']:,.0f}",
                    f"{v['p99_us']:,.0f}",
                    f"{v['p999_us']:,.0f}",
                    f"{v['runs'][0]['rounds']:,}",
                ]
            )
    if len(t) == 1:
        t.append(["shmq", "—", "not run", "", "", ""])
    return t


def machine_lines(res: dict) -> list[str]:
    m = res["machine"]
    lines = [
        f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, Linux {m['kernel']} ({m['os']}), "
        f"Python {m['python']}; load average {m.get('load_average_1m_at_start', '?')} at start, "
        f"{m.get('load_average_1m', '?')} at end (above ~0.5 other work shared the cores)"
    ]
    lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(res["versions"].items())))
    lines.append(
        f"{'QUICK (smoke) run' if res['quick'] else 'full run'}: median of {res['reps'] - res['skipped_reps']} "
        f"interleaved runs; suite took {res['seconds']} s"
        + (f"; only the workloads matching {' / '.join(res['workloads'])}" if res.get("workloads") else "")
    )
    return lines


def show(res: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=max(Console().width, 150))
    for line in machine_lines(res):
        con.print(line)
    for name, reason in res["unavailable"].items():
        con.print(f"[yellow]{name}: {reason}[/]")
    for title, t in rows(res).items():
        table = Table(title=title, show_lines=False)
        for h in t[0]:
            table.add_column(h, overflow="fold")
        for r in t[1:]:
            table.add_row(*r)
        con.print(table)


def markdown(res: dict) -> str:
    out = ["# shmq benchmarks", ""]
    out += [f"- {line}" for line in machine_lines(res)]
    out.append("- ratios: shmq × = shmq / peer for throughput, peer / shmq for latency: above 1 shmq is better")
    out.append("")
    out.append("| system | persistence | broker | how it is driven (per-message / batch API) | note |")
    out.append("|---|---|---|---|---|")
    for name, s in res["systems"].items():
        out.append(
            f"| {name} | {s['persistence']} | {'yes' if s['broker'] else 'no'} | {s.get('how', '')} | "
            f"{res['unavailable'].get(name, s['note'])} |"
        )
    for title, t in rows(res).items():
        out += ["", f"## {title}", "", "| " + " | ".join(t[0]) + " |", "|" + "---|" * len(t[0])]
        out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in t[1:]]
    return "\n".join(out) + "\n"


def save(res: dict, outdir: str) -> tuple[str, str]:
    os.makedirs(outdir, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = os.path.join(outdir, f"{stamp}-{res['machine']['host']}" + ("-quick" if res["quick"] else ""))
    with open(base + ".json", "w") as f:
        json.dump(res, f, indent=1, default=str)
    with open(base + ".md", "w") as f:
        f.write(markdown(res))
    return base + ".json", base + ".md"

"""docs/BENCHMARKS.md, rendered from one results JSON of the suite (``make bench-docs``).

    .venv/bin/python -m tools.bench.docs_page [--publish RESULTS] [--json FILE] [--out FILE] [--check]

The page is a pure function of the JSON (``make bench`` writes one to bench/results/; the one
the page shows is committed as docs/benchmarks/results.json), so regenerating it from the same
file gives the same bytes and tests/bench/test_docs_page.py can tell a hand edit or a stale
page from the real one. Every figure row names the suite command that measures it again; the
other benchmark tools are listed with their commands, without figures (nothing keeps them
current).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from tools.bench import cluster_page, pop_page
from tools.bench.suite.report import micros, short_rate

ROOT = Path(__file__).resolve().parents[2]
JSON_PATH = ROOT / "docs" / "benchmarks" / "results.json"
PAGE_PATH = ROOT / "docs" / "BENCHMARKS.md"
REF = "shmq"
SUITE = "python -m tools.bench.suite"
PATH = re.compile(r"(?<![\w.])(/[\w.+-]+){2,}/?")  # an absolute path: a run's temporary directories

# The tools beside the suite: what each measures and how to run it. No figures: none of them
# writes to the JSON this page is made from.
TOOLS: list[tuple[str, str, str]] = [
    (
        "store_bench.py",
        "appends/s and MB/s of the message store against a plain mmap copy, and reads",
        "make bench-store",
    ),
    (
        "broker_bench.py",
        (
            "one producer process against a broker: batch, oneway, async and sync sends, "
            "8 sync senders on a SYNC_FLUSH broker"
        ),
        "",
    ),
    ("consume_bench.py", "producer -> broker -> consumer end to end, batch (columns) and per message", ""),
    ("read_bench.py", "records/s of the consumer's batch read path over a store", "--quick"),
    ("ring_bench.py", "frames/s of a shared-memory channel and its doorbell round trip", ""),
    ("aio_bench.py", "`shmq.aio` send rate and latency against the synchronous producer's", ""),
    ("compress_bench.py", "cost of body compression on sync sends of 64 KiB bodies", ""),
    ("trace_bench.py", "cost of send hooks and of `trace=True` on the send rate", ""),
    ("tx_bench.py", "committed transactions per second against plain sync sends", ""),
    ("retry_bench.py", "messages/s through RECONSUME_LATER, the retry topic and redelivery", ""),
    ("delay_bench.py", "lateness and broker CPU of timer (delivery-time) messages", "--messages 100000"),
    ("sql_filter_bench.py", "SQL92 filtering with the broker's filter bitmap against exact evaluation", ""),
    ("query_bench.py", "`Admin.query_by_key` latency on a large store", "--messages 1000000"),
    ("queues_bench.py", "the suite's queue-count scaling rows alone, with CPU per message", ""),
    ("cluster_bench.py", "the suite's cluster rows alone: 1, 2 and 4 brokers, CPU per message of each process", ""),
    ("pop_bench.py", "the suite's worker-pool rows alone: SimpleConsumer (POP) against push, Pool, Redis", ""),
    ("shmq_rows.py", "a few shmq rows of the suite, alone and quickly, for before/after pairs", ""),
    ("backlog_memory.py", "broker memory while messages pile up unconsumed", ""),
    ("monitor_bench.py", "broker throughput with a monitor watching it against without", ""),
    ("exporter_bench.py", "broker throughput with `shmq exporter` scraped against without", ""),
    ("wakeup_bench.py", "wake-up latencies of a parked broker (the doorbell paths)", ""),
    ("floors.py", "what the machine charges for the steps no broker avoids (wake-ups, copies, syncs)", ""),
    (
        "path_breakdown.py",
        "per-thread CPU of every process per SYNC_FLUSH send (8 senders) and per send -> push listener hop",
        "",
    ),
    ("push_latency.py", "the suite's send -> listener rows alone (shmq and zmq ipc, interleaved)", ""),
    ("sync_floor.py", "the cost of one durable sync of a small range: the floor of a SYNC_FLUSH send", ""),
    ("flush_faults.py", "page faults of a writer while a flusher syncs nothing, the whole file or the range", ""),
    (
        "ha_bench.py",
        ("a master and a replica on two network namespaces: keep-up, catch-up, sync senders (needs root and iproute2)"),
        "",
    ),
    ("ha_catchup_bench.py", "MB/s of a fresh replica following a backlog over loopback", "--mib 256"),
    ("ha_stream_bench.py", "how fast the HA sender hands a backlog to one replica", ""),
    ("replica_append_bench.py", "MB/s of the replica's append path fed a master's commitlog", ""),
    (
        "spark_bench.py",
        "rows/s of the Spark data source against Spark's Parquet reader (needs the spark extra)",
        "--messages 1000000",
    ),
    ("spark_stream_bench.py", "end-to-end latency and sustained rate of the Spark streaming source", ""),
]


def command(only: list[str] | None = None, words: list[str] | None = None) -> str:
    """The suite command that measures a row again (shell-quoted: workload names hold '>')."""
    args = [SUITE]
    if only:
        args += ["--only", *(shlex.quote(n) for n in only)]
    if words:
        args += ["--workloads", *(shlex.quote(w) for w in words)]
    return "`" + " ".join(args) + "`"


def ratio(mine: float | None, other: float | None, lower_better: bool = False) -> str:
    """shmq's ratio to a peer, oriented so that above 1 shmq is better."""
    if not mine or not other:
        return "—"
    r = other / mine if lower_better else mine / other
    return f"{r:.2f}×"


def median(entry: dict[str, Any], metric: str) -> float | None:
    value = entry.get(metric, {}).get("median") if entry.get("runs") else None
    return float(value) if value is not None else None


def missing(entry: dict[str, Any]) -> str:
    """Why a system has no figure for a workload, in a few words."""
    if entry.get("na"):
        return PATH.sub("…", str(entry["na"]))
    if entry.get("errors"):
        first = str(entry["errors"][-1]).strip().splitlines()[0]
        return "failed: " + PATH.sub("…", first)[:100]
    return "not run"


def table(header: list[str], body: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "/") for c in r) + " |" for r in body]
    return [*out, ""]


def peers(res: dict[str, Any]) -> list[str]:
    return [n for n in res["systems"] if n != REF]


def machine(res: dict[str, Any]) -> list[str]:
    m = res["machine"]
    run = "the QUICK (smoke) run" if res["quick"] else "the full run"
    reps = res["reps"] - res.get("skipped_reps", 0)
    return [
        "## The machine and the run",
        "",
        (
            f"- finished {res['date']} on {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, "
            f"Linux {m['kernel']} ({m['os']}), {m['implementation']} {m['python']}"
        ),
        (
            f"- load average (1 min) {m.get('load_average_1m_at_start', '?')} at the start, "
            f"{m.get('load_average_1m', '?')} at the end: above about 0.5, other work shared the cores "
            "and every figure is lower than an idle machine's"
        ),
        (
            f"- {run} of `make bench`: each figure is the median of {reps} interleaved runs "
            f"(min–max where shown); the suite took {res['seconds']:.0f} s"
        ),
        "- versions: " + ", ".join(f"{k} {v}" for k, v in sorted(res["versions"].items())),
        (
            "- shmq × is shmq's ratio to the peer, oriented so that above 1 shmq is better "
            "(throughput: shmq / peer; latency: peer / shmq)"
        ),
        "",
    ]


def systems(res: dict[str, Any]) -> list[str]:
    body = [
        [
            n,
            s["persistence"],
            "yes" if s["broker"] else "no",
            s.get("how", ""),
            PATH.sub("…", res["unavailable"].get(n, s["note"])),
        ]
        for n, s in res["systems"].items()
    ]
    return ["## What is compared", "", *table(["system", "persistence", "broker", "how it is driven", "note"], body)]


def throughput(res: dict[str, Any], api: str) -> list[str]:
    keys = [k for k, w in res["results"].items() if w["kind"] == "tput" and k.endswith(f" {api}")]
    if not keys:
        return []
    title = "per-message API" if api == "msg" else "batch API"
    header = ["producers → consumers, body", "shmq msg/s (min–max)", "shmq MB/s"]
    header += [f"{n} msg/s (shmq ×)" for n in peers(res)] + ["reproduce"]
    body = []
    capped = False
    for key in keys:
        got = res["results"][key]["systems"]
        me = got.get(REF, {})
        mine = median(me, "msgs_s")
        pattern, size = key.split()[1:3]
        row = [f"{pattern.replace('->', ' → ')}, {size.removesuffix('B')} B"]
        if mine is None:
            row += [missing(me), ""]
        else:
            row += [
                f"{short_rate(mine)} ({short_rate(me['msgs_s']['min'])}–{short_rate(me['msgs_s']['max'])})"
                + ("*" if me.get("capped") else ""),
                f"{me['mb_s']['median']:.1f}",
            ]
        capped = capped or bool(me.get("capped"))
        for n in peers(res):
            e = got.get(n, {})
            v = median(e, "msgs_s")
            capped = capped or bool(e.get("capped") and v is not None)
            row.append(
                missing(e) if v is None else f"{short_rate(v)}{'*' if e.get('capped') else ''} ({ratio(mine, v)})"
            )
        row.append(command(words=[key]))
        body.append(row)
    note = (
        [
            (
                "\\* time-capped: the run reached its deadline before its message count; the rate is of what "
                "was sent and received in that time."
            ),
            "",
        ]
        if capped
        else []
    )
    what = "one message per call" if api == "msg" else f"batches of {res['settings']['batch_size']} messages per call"
    return [
        f"## Throughput, {title}",
        "",
        (
            f"Producers → consumers, {what}, end to end: a run ends when the consumers have received "
            "(and, where the system acks, acked) every message sent."
        ),
        "",
        *table(header, body),
        *note,
    ]


def latency(res: dict[str, Any]) -> list[str]:
    keys = [k for k, w in res["results"].items() if w["kind"] == "latency"]
    if not keys:
        return []
    key = keys[0]
    got = res["results"][key]["systems"]
    mine = median(got.get(REF, {}), "p50_us")
    body = []
    for n, e in got.items():
        if median(e, "p50_us") is None:
            body.append([n, missing(e), "", "", "", command([n], [key])])
            continue
        body.append(
            [
                n,
                micros(e["p50_us"]["median"]),
                micros(e["p99_us"]["median"]),
                micros(e["p999_us"]["median"]),
                "—" if n == REF else ratio(mine, e["p50_us"]["median"], lower_better=True),
                command(sorted({REF, n}), [key]),
            ]
        )
    return [
        "## Round trip",
        "",
        (f"One synchronous send at a time ({key.split()[1]} bodies), from the call to its answer, in microseconds."),
        "",
        *table(["system", "p50 µs", "p99 µs", "p99.9 µs", "shmq × (p50)", "reproduce"], body),
    ]


def senders(res: dict[str, Any], kind: str) -> list[list[str]]:
    """Rows of the durable or replicated workloads: one sender process per message in flight."""
    body = []
    for key, w in res["results"].items():
        if w["kind"] != kind:
            continue
        mine = median(w["systems"].get(REF, {}), "msgs_s")
        mode = [key.split()[1]] if kind == "replicated" else []
        for n, e in w["systems"].items():
            v = median(e, "msgs_s")
            if v is None:
                if e.get("na") not in ("no replication", "no persistence"):
                    body.append([*mode, n, missing(e), "", "", "", "", command([n], [key])])
                continue
            how = res["systems"][n]["replicated_note" if kind == "replicated" else "durable_note"]
            body.append(
                [
                    *mode,
                    n,
                    short_rate(v),
                    micros(e["p50_us"]["median"]),
                    micros(e["p99_us"]["median"]),
                    "—" if n == REF else ratio(mine, v),
                    how,
                    command(sorted({REF, n}), [key]),
                ]
            )
    return body


def durability(res: dict[str, Any]) -> list[str]:
    body = senders(res, "durable")
    if not body:
        return []
    s = res["settings"]
    return [
        "## Durability",
        "",
        (
            f"{s['durable_senders']} sender processes, each sending one 100 B message at a time, each acked "
            "only once it is on disk. The systems without persistence are left out."
        ),
        "",
        *table(["system", "msg/s", "p50 µs", "p99 µs", "shmq ×", "mode", "reproduce"], body),
    ]


def replication(res: dict[str, Any]) -> list[str]:
    body = senders(res, "replicated")
    if not body:
        return []
    sync = {}
    for row in body:
        sync.setdefault(row[1], {})[row[0]] = row[2]
    lines = [
        "## Replication",
        "",
        (
            f"The same {res['settings']['durable_senders']} senders against a master with one replica: "
            "`sync` acks once the replica has the message, `async` once the master has it. "
            "The systems without replication are left out."
        ),
        "",
    ]
    lines += table(["ack", "system", "msg/s", "p50 µs", "p99 µs", "shmq ×", "mode", "reproduce"], body)
    ratios = []
    pairs = [(k, k.replace(" sync ", " async ")) for k in res["results"] if k.startswith("replicated sync")]
    for key_s, key_a in pairs:
        for n in res["systems"]:
            a = median(res["results"].get(key_a, {}).get("systems", {}).get(n, {}), "msgs_s")
            b = median(res["results"][key_s]["systems"].get(n, {}), "msgs_s")
            if a and b:
                ratios.append(f"{n} {b / a:.2f}")
    if ratios:
        lines += ["Sync throughput over async throughput, per system: " + ", ".join(ratios) + ".", ""]
    return lines


def extras(res: dict[str, Any]) -> list[str]:
    """shmq's own rows (queue-count scaling, backlog) and the send -> listener latency of each system."""
    if res.get("workloads") and "extras" not in res["workloads"]:
        return []
    x = res.get("extras", {}).get(REF, {})
    lines = ["## Queues and backlog (shmq only)", ""]
    q = x.get("queues", {})
    cmd = command([REF], ["extras"])
    if q and "error" not in q:
        body = []
        for n, v in q.items():
            if "error" in v:
                body.append([n, missing({"errors": [v["error"]]}), "", ""])
                continue
            spread = f"{short_rate(min(v['runs']))}–{short_rate(max(v['runs']))}"
            body.append(
                [
                    f"{int(n):,}",
                    short_rate(v["median"]),
                    spread,
                    f"{v['ratio_to_8']:.2f}" if v.get("ratio_to_8") else "",
                ]
            )
        lines += [
            (
                "Send throughput of one producer round-robining over topics of 8 queues each, "
                f"100 B bodies, by the number of queues (reproduce: {cmd})."
            ),
            "",
        ]
        lines += table(["queues", "msg/s (median)", "min–max", "ratio to 8 queues"], body)
    else:
        lines += [f"Queue-count scaling: {missing({'errors': [q.get('error', 'not run')]})}.", ""]
    b = x.get("backlog", {})
    if b and "error" not in b:
        lines += [
            (
                f"A backlog of 100 B messages written with nobody consuming, then drained by one consumer "
                f"(reproduce: {cmd})."
            ),
            "",
        ]
        lines += table(
            ["written", "write msg/s", "first 10 %", "last 10 %", "last / first", "drain msg/s"],
            [
                [
                    f"{b['messages']:,}" + (" (time-capped)" if b.get("capped") else ""),
                    short_rate(b["write_msgs_s"]),
                    short_rate(b["first_tenth_msgs_s"]),
                    short_rate(b["last_tenth_msgs_s"]),
                    f"{b['last_vs_first']:.2f}",
                    short_rate(b["drain_msgs_s"]),
                ]
            ],
        )
    else:
        lines += [f"Backlog: {missing({'errors': [b.get('error', 'not run')]})}.", ""]
    body = []
    for n, sx in res.get("extras", {}).items():
        push = sx.get("push")
        if not push:
            continue
        if "error" in push:
            body.append([n, missing({"errors": [push["error"]]}), "", "", "", "", command([n], ["extras"])])
            continue
        for api, v in push.items():
            body.append(
                [
                    n,
                    f"`{api}`",
                    micros(v["p50_us"]),
                    micros(v["p99_us"]),
                    micros(v["p999_us"]),
                    f"{v['runs'][0]['rounds']:,}",
                    command([n], ["extras"]),
                ]
            )
    if body:
        lines += [
            "## Send → listener latency",
            "",
            (
                "One sender at 1,000 msgs/s of 100 B, a receiver in another process parked between messages "
                "(shmq: a PushConsumer listener; the peers: their blocking receive); the time from just "
                "before the send call to the listener, in microseconds."
            ),
            "",
        ]
        lines += table(["system", "send API", "p50 µs", "p99 µs", "p99.9 µs", "messages per run", "reproduce"], body)
    return lines


def cluster(res: dict[str, Any]) -> list[str]:
    """The cluster rows and their model (kept with shmq's extras)."""
    if res.get("workloads") and "extras" not in res["workloads"]:
        return []
    return cluster_page.section(res.get("extras", {}).get(REF, {}).get("cluster"), table)


def pop(res: dict[str, Any]) -> list[str]:
    """The worker-pool rows (kept with shmq's extras)."""
    if res.get("workloads") and "extras" not in res["workloads"]:
        return []
    return pop_page.section(res.get("extras", {}).get(REF, {}).get("pop"), table)


def tools() -> list[str]:
    body = [
        [
            f"`{t}`",
            what,
            f"`{extra}`" if extra.startswith("make ") else f"`python tools/bench/{t}{' ' + extra if extra else ''}`",
        ]
        for t, what, extra in TOOLS
    ]
    return [
        "## The other benchmark tools",
        "",
        (
            "Each measures one part alone and prints its figures; `--help` gives its options. Their figures "
            "are not kept here: run the tool on the machine you care about."
        ),
        "",
        *table(["tool", "what it measures", "command"], body),
    ]


def render(res: dict[str, Any]) -> str:
    """The whole page; the same JSON gives the same bytes."""
    lines = [
        "# Benchmarks",
        "",
        "<!-- Made by `make bench-docs` from docs/benchmarks/results.json; edits by hand are lost. -->",
        "",
        (
            "shmq against the messaging options a Python program on one Linux host would pick instead, "
            "measured by the benchmark suite (`make bench`). Each table's last column is the command that "
            "measures that row again (from the repository root, after `make install`, with the project's "
            "virtual environment active). `make bench` runs everything; `make bench QUICK=1` is a "
            "one-minute smoke run whose figures are not comparable with these."
        ),
        "",
    ]
    lines += machine(res) + systems(res)
    lines += throughput(res, "msg") + throughput(res, "batch") + latency(res)
    lines += durability(res) + replication(res) + extras(res) + cluster(res) + pop(res) + tools()
    lines += [
        "## Making this page",
        "",
        (
            "`make bench` writes `bench/results/<date>-<host>.json`; "
            "`make bench-docs RESULTS=bench/results/<date>-<host>.json` copies it to "
            "`docs/benchmarks/results.json` and renders this page from it (`make bench-docs` alone renders "
            "the page again from the JSON already there)."
        ),
        "",
    ]
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m tools.bench.docs_page",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--json", default=str(JSON_PATH), help="the suite's results JSON")
    ap.add_argument("--out", default=str(PAGE_PATH), help="the page to write")
    ap.add_argument(
        "--publish",
        metavar="RESULTS",
        help="first copy this results JSON of `make bench` to --json (without its run log, which "
        "names the run's temporary directories)",
    )
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if the page differs")
    a = ap.parse_args(argv)
    if a.publish:
        try:
            with open(a.publish) as f:
                res = json.load(f)
        except (OSError, ValueError) as e:
            print(f"{a.publish}: cannot read a results JSON ({e})", file=sys.stderr)
            return 2
        res.pop("install_log", None)
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    try:
        with open(a.json) as f:
            page = render(json.load(f))
    except (OSError, ValueError, KeyError) as e:
        print(f"{a.json}: not a results JSON of the suite ({e})", file=sys.stderr)
        return 2
    if a.check:
        same = Path(a.out).exists() and Path(a.out).read_text() == page
        print(f"{a.out}: {'up to date' if same else 'differs from what make bench-docs makes; run it'}")
        return 0 if same else 1
    Path(a.out).write_text(page)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

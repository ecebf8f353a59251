#!/usr/bin/env python3
"""Turns the raw outputs of bench/gateway.sh into bench/results/gateway.json.

Inputs (in LOGS): one `ctxkeeper-bench-load` JSON per run, named
  direct-RATE-rROUND, repeat-RATE-rROUND, grow-RATE-rROUND   (open loop, ROUNDS rounds)
  litellm-RATE, direct-RATE-litellm                           (open loop, one round)
  max-direct, max-repeat, max-direct-grow, max-grow, sessions-1000   (closed loop)
and the gateway's /metrics text before and after every ctxkeeper run
(`repeat-RATE-rROUND.before.metrics`, `.after.metrics`, same for grow).

Overhead of a proxy at a rate = its percentile minus the direct percentile of the same round,
median over rounds. The gateway's own view comes from the difference of its
`ctxkeeper_gateway_overhead_seconds` histogram across each run (interpolated in the bucket).
"""

import argparse
import json
import os
import re
import statistics
import sys


def load(logs, name):
    path = os.path.join(logs, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def need(logs, name):
    run = load(logs, name)
    if run is None:
        sys.exit(f"gateway_report.py: {name}.json missing in {logs}")
    return run


BUCKET = re.compile(r'^ctxkeeper_gateway_overhead_seconds_bucket\{le="([^"]+)"\} (\d+)$')


def histogram(logs, name):
    """Cumulative bucket counts {bound: count} of the overhead histogram in a scrape."""
    path = os.path.join(logs, name + ".metrics")
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            m = BUCKET.match(line.strip())
            if m:
                bound = float("inf") if m.group(1) == "+Inf" else float(m.group(1))
                out[bound] = int(m.group(2))
    return out


def server_percentiles(logs, run):
    """(p50, p99) in ms of the gateway's own overhead during one run, or None."""
    before, after = histogram(logs, run + ".before"), histogram(logs, run + ".after")
    if not after:
        return None
    bounds = sorted(after)
    counts = [after[b] - before.get(b, 0) for b in bounds]
    total = counts[-1]
    if total <= 0:
        return None

    def q(p):
        rank = p * total
        lower_bound, lower_count = 0.0, 0
        for bound, count in zip(bounds, counts):
            if count >= rank:
                if bound == float("inf"):
                    return lower_bound * 1000
                span = count - lower_count
                frac = (rank - lower_count) / span if span else 1.0
                return (lower_bound + frac * (bound - lower_bound)) * 1000
            lower_bound, lower_count = bound, count
        return lower_bound * 1000

    return q(0.50), q(0.99)


def r3(x):
    return None if x is None else round(x, 3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("logs")
    ap.add_argument("out")
    ap.add_argument("--rss", nargs=5, type=int, required=True,
                    help="KB: idle, after 1,000 sessions (RSS, peak), final (RSS, peak)")
    ap.add_argument("--quick", default="0")
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--rates", required=True)
    ap.add_argument("--litellm-rates", required=True)
    args = ap.parse_args()
    logs = args.logs
    rates = [int(r) for r in args.rates.split()]
    litellm_rates = [int(r) for r in args.litellm_rates.split()]
    idle, sess_rss, sess_hwm, final_rss, final_hwm = (kb / 1024 for kb in args.rss)
    rounds = range(1, args.rounds + 1)
    notes = []

    latency_rows, overhead_rows, server_rows = [], [], []
    overhead = {}  # (proxy, rate) -> (p50, p99) in ms
    for rate in rates:
        for kind in ("repeat", "grow"):
            d50, d99, e2e = [], [], []
            for rnd in rounds:
                direct, run = need(logs, f"direct-{rate}-r{rnd}"), need(logs, f"{kind}-{rate}-r{rnd}")
                d50.append(run["p50_ms"] - direct["p50_ms"])
                d99.append(run["p99_ms"] - direct["p99_ms"])
                e2e.append(run)
                if run["errors"]:
                    notes.append(f"ctxkeeper {kind} at {rate} req/s, round {rnd}: {run['errors']} errors of "
                                 f"{run['sent']}, first: {run['first_error']}")
                server = server_percentiles(logs, f"{kind}-{rate}-r{rnd}")
                if server:
                    server_rows.append([f"ctxkeeper ({kind})", rate, rnd, r3(server[0]), r3(server[1])])
            o = (statistics.median(d50), statistics.median(d99))
            overhead[(kind, rate)] = o
            overhead_rows.append([f"ctxkeeper ({kind})", rate, len(rounds), r3(o[0]), r3(o[1])])
            latency_rows.append([f"ctxkeeper ({kind})", rate,
                                 r3(statistics.median(r["achieved_rate"] for r in e2e)),
                                 r3(statistics.median(r["p50_ms"] for r in e2e)),
                                 r3(statistics.median(r["p99_ms"] for r in e2e)),
                                 sum(r["errors"] for r in e2e)])
        directs = [need(logs, f"direct-{rate}-r{rnd}") for rnd in rounds]
        latency_rows.insert(len(latency_rows) - 2, ["direct", rate,
                                                    r3(statistics.median(r["achieved_rate"] for r in directs)),
                                                    r3(statistics.median(r["p50_ms"] for r in directs)),
                                                    r3(statistics.median(r["p99_ms"] for r in directs)),
                                                    sum(r["errors"] for r in directs)])
        litellm, base = load(logs, f"litellm-{rate}"), load(logs, f"direct-{rate}-litellm")
        if litellm and base:
            o = (litellm["p50_ms"] - base["p50_ms"], litellm["p99_ms"] - base["p99_ms"])
            overhead[("litellm", rate)] = o
            overhead_rows.append(["LiteLLM", rate, 1, r3(o[0]), r3(o[1])])
            latency_rows.append(["LiteLLM", rate, litellm["achieved_rate"], litellm["p50_ms"],
                                 litellm["p99_ms"], litellm["errors"]])
            if litellm["achieved_rate"] < 0.95 * rate:
                notes.append(f"LiteLLM at {rate} req/s achieved only {litellm['achieved_rate']:.1f} req/s: "
                             "it was saturated, so its latency includes queueing")

    max_direct, max_repeat, max_grow = need(logs, "max-direct"), need(logs, "max-repeat"), need(logs, "max-grow")
    max_direct_grow = need(logs, "max-direct-grow")
    sessions = need(logs, "sessions-1000")
    throughput_rows = [
        ["direct to the mock", max_direct["achieved_rate"], max_direct["p50_ms"], max_direct["p99_ms"], max_direct["errors"]],
        ["through ctxkeeper, repeat (history already stored)", max_repeat["achieved_rate"], max_repeat["p50_ms"],
         max_repeat["p99_ms"], max_repeat["errors"]],
        ["direct to the mock, grow bodies (20-120 messages)", max_direct_grow["achieved_rate"],
         max_direct_grow["p50_ms"], max_direct_grow["p99_ms"], max_direct_grow["errors"]],
        ["through ctxkeeper, grow (2 messages and the state committed per request)", max_grow["achieved_rate"],
         max_grow["p50_ms"], max_grow["p99_ms"], max_grow["errors"]],
        ["first request of 1,000 new sessions (16 connections)", sessions["achieved_rate"], sessions["p50_ms"],
         sessions["p99_ms"], sessions["errors"]],
    ]
    memory_rows = [
        ["idle, after start", round(idle, 1), "–"],
        ["after 1,000 sessions (one request each)", round(sess_rss, 1), round(sess_hwm, 1)],
        ["after the whole benchmark", round(final_rss, 1), round(final_hwm, 1)],
    ]

    targets = []
    o500 = overhead.get(("repeat", 500))
    own500 = [row[4] for row in server_rows if row[0] == "ctxkeeper (repeat)" and row[1] == 500]
    if o500 and own500:
        # The gateway's own histogram is the figure: an end-to-end difference of two noisy
        # percentiles can even come out negative.
        worst = max(own500)
        t = {"name": "ctxkeeper p99 overhead at 500 req/s, requests that need no compaction",
             "target": "< 0.5 ms",
             "measured": f"{worst:.2f} ms (its own histogram, worst round); end to end "
                         f"{o500[1]:+.2f} ms (proxied minus direct p99)",
             "met": worst < 0.5}
        if not t["met"]:
            t["why"] = ("the gateway shares 2 cores with the load generator and the mock; the tables "
                        "below give every round")
        targets.append(t)
    met = max_repeat["achieved_rate"] >= 5000 and max_repeat["errors"] == 0
    t = {"name": "ctxkeeper sustained throughput, requests that need no compaction (closed loop, 32 connections)",
         "target": ">= 5,000 req/s", "measured": f"{max_repeat['achieved_rate']:,.0f} req/s", "met": met}
    if not met:
        t["why"] = (f"the mock alone reaches {max_direct['achieved_rate']:,.0f} req/s here; load generator, mock "
                    "and gateway share 2 cores")
    targets.append(t)
    targets.append({"name": "ctxkeeper idle RSS", "target": "< 50 MB", "measured": f"{idle:.1f} MB",
                    "met": idle < 50})
    FLOOR = 0.01  # ms: an overhead at or below noise counts as 10 µs for the ratio
    for rate in litellm_rates:
        ck, ll = overhead.get(("repeat", rate)), overhead.get(("litellm", rate))
        name = f"overhead at {rate} req/s, LiteLLM / ctxkeeper (p50)"
        if not ll or not ck:
            targets.append({"name": name, "target": ">= 50x", "measured": "not measured", "met": False,
                            "why": "LiteLLM did not run (see notes)"})
            continue
        ratio = ll[0] / max(ck[0], FLOOR)
        t = {"name": name, "target": ">= 50x", "measured": f"{ratio:,.0f}x ({ll[0]:.2f} ms vs {ck[0]:.3f} ms)",
             "met": ratio >= 50}
        if not t["met"]:
            t["why"] = (f"LiteLLM adds {ll[0]:.2f} ms at p50, ctxkeeper {ck[0]:.3f} ms; both share the 2 cores "
                        "with the load generator and the mock")
        targets.append(t)

    grow_share = max_grow["achieved_rate"] / max(max_direct_grow["achieved_rate"], 1e-9)
    notes.append(
        f"Growing conversations (closed loop, 64 sessions restarting after 50 exchanges): ctxkeeper sustains "
        f"{max_grow['achieved_rate']:,.0f} req/s, {grow_share:.0%} of the mock alone on the same bodies "
        f"({max_direct_grow['achieved_rate']:,.0f} req/s). Before forwarding, each such request parses and "
        "fingerprints the whole resent history, then commits its two new messages and the session state "
        "(context, metadata, fingerprints) to SQLite with synchronous=FULL; concurrent sessions share commits "
        "through the group commit. The 5,000 req/s target is for requests that bring nothing new to store "
        "(the repeat workload). On this workload the mock and the load generator already use "
        f"{2e6 / max(max_direct_grow['achieved_rate'], 1e-9):.0f} µs of the 2 cores per request, so a proxy "
        f"reaching 5,000 req/s would have to spend under "
        f"{max(2e6 / 5000 - 2e6 / max(max_direct_grow['achieved_rate'], 1e-9), 0):.0f} µs of CPU on each.")
    notes += [
        "Machine: 2 cores shared by the load generator, the mock upstream, the gateway (and LiteLLM): "
        "absolute latencies and throughput ceilings are the machine's as much as the gateway's.",
        "Load: ctxkeeper-bench-load, open loop at a fixed rate (requests leave on schedule whatever the "
        "server does), a 20-message ~4 KB OpenAI chat request, 1 s unrecorded warm-up; latency from send "
        "to end of body. repeat: 300 sessions resending their stored history; grow: one conversation per "
        "request per second, each request adding an (assistant, user) exchange.",
        "Overhead = proxied percentile minus direct percentile of the same round (direct run just before), "
        f"median of {len(rounds)} round(s); small negative values are noise. LiteLLM: one round.",
        "Upstream: ctxkeeper-mock-upstream --window 128000 --no-record (answers at once; it tokenizes every "
        "request, which is in both the direct and the proxied figures).",
        "Gateway: ctxkeeper serve with its defaults (default policy, SQLite session store with "
        "synchronous=FULL, filesystem archive, in a temporary directory).",
        f"Durations: {'quick mode (--quick)' if args.quick == '1' else 'full'}; 1,000 sessions opened with 16 "
        f"connections in {sessions['wall_s']:.2f} s, {sessions['errors']} errors.",
    ]
    with open(os.path.join(logs, "notes.txt")) as f:
        notes += [line.strip() for line in f if line.strip()]

    doc = {
        "tables": [
            {"caption": "Overhead against a zero-delay upstream (proxied minus direct, open loop)",
             "columns": ["proxy", "rate (req/s)", "rounds", "p50 (ms)", "p99 (ms)"], "rows": overhead_rows},
            {"caption": "The gateway's own overhead per request (total minus upstream time, its /metrics histogram)",
             "columns": ["proxy", "rate (req/s)", "round", "p50 (ms)", "p99 (ms)"], "rows": server_rows},
            {"caption": "Latency at a fixed rate (open loop, median of rounds)",
             "columns": ["path", "rate (req/s)", "achieved (req/s)", "p50 (ms)", "p99 (ms)", "errors"],
             "rows": latency_rows},
            {"caption": "Maximum throughput (closed loop, 32 connections)",
             "columns": ["path", "req/s", "p50 (ms)", "p99 (ms)", "errors"], "rows": throughput_rows},
            {"caption": "ctxkeeper serve memory", "columns": ["state", "RSS (MB)", "peak RSS (MB)"],
             "rows": memory_rows},
        ],
        "targets": targets,
        "notes": notes,
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()

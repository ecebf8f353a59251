#!/usr/bin/env python3
"""Turns the raw output of each benchmark into one JSON file in bench/results/.

Standard library only (runs with any python3). Subcommands:

  machine  --venv DIR...                CPU, cores, RAM, kernel, rustc, date, peer package versions
  engine   --replays FILE --engine-step FILE --window N
                                        ctxkeeper per-step overhead (replay --json lines + bench log)
  tokens   LOG                          criterion output of the token_counting bench
  stores   TABLE.md --log LOG           markdown table written by the stores bench
  memory   LOG --window N               `/usr/bin/time -v` output, one block per policy
  timings  STAGE=SECONDS[@LOAD]... [--previous FILE]
                                        wall time of each bench/run stage

Every subcommand prints one JSON object on stdout and fails loudly (exit 1, message naming
the file) when the input does not look as expected, so a broken benchmark never yields an
empty table silently.

Example: python3 bench/tools/collect.py tokens bench/results/logs/token-counting.log
"""
import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys


def fail(message):
    print(f"collect.py: {message}", file=sys.stderr)
    sys.exit(1)


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---- machine ---------------------------------------------------------------------------------

PEER_PACKAGES = ["agentscope", "langchain", "langchain-core", "langgraph", "litellm"]


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def mem_total_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


def command_output(args):
    try:
        return subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def venv_versions(venv):
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        return {}
    script = (
        "import json, importlib.metadata as m\n"
        f"names = {PEER_PACKAGES!r}\n"
        "out = {}\n"
        "for n in names:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))\n"
    )
    text = command_output([python, "-c", script])
    return json.loads(text) if text else {}


def cmd_machine(args):
    peers = {}
    for venv in args.venv:
        peers.update(venv_versions(venv))
    python_version = None
    for venv in args.venv:
        python_version = command_output([os.path.join(venv, "bin", "python"), "-c", "import sys; print(sys.version.split()[0])"])
        if python_version:
            break
    return {
        "date": now(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "ram_gib": mem_total_gib(),
        "kernel": platform.release(),
        "rustc": command_output(["rustc", "--version"]),
        "python": python_version,
        "peers": peers,
    }


# ---- engine ----------------------------------------------------------------------------------

ENGINE_STEP = re.compile(
    r"engine_step policy=(?P<policy>\S+) window=(?P<window>\d+) messages=(?P<messages>\d+) "
    r"(?:repeat=\d+ )?steps: (?P<quiet>\d+) quiet, (?P<busy>\d+) compacting; median of (?P<runs>\d+) runs: "
    r"quiet p50 (?P<p50>[\d.]+) µs, quiet p99 (?P<p99>[\d.]+) µs, compacting mean (?P<mean>[\d.]+) µs"
)


def cmd_engine(args):
    runs = {}
    with open(args.replays) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                report = json.loads(line)
            except json.JSONDecodeError as err:
                fail(f"{args.replays}:{number}: not a replay --json object ({err})")
            runs.setdefault(report["policy"], []).append(report)
    if not runs:
        fail(f"{args.replays}: no replay reports")
    policies = {}
    for policy, reports in runs.items():
        times = [r["engine_time_us"] for r in reports]
        med = lambda key: statistics.median(t[key] for t in times)
        first = reports[0]
        policies[policy] = {
            "runs": len(reports),
            "steps": first["steps"],
            "compactions": first["compactions"],
            "messages": first["messages"],
            "quiet_p50_us": med("p50_quiet_step"),
            "quiet_p99_us": med("p99_quiet_step"),
            "compacting_mean_us": med("mean_compacting_step"),
            "all_p50_us": med("p50_step"),
            "all_p99_us": med("p99_step"),
            # All steps, as the peers report them: does the cost grow with history?
            "first_500_p50_us": statistics.median(t["first_500"]["p50"] for t in times),
            "last_500_p50_us": statistics.median(t["last_500"]["p50"] for t in times),
            "runs": [{"quiet_p50_us": t["p50_quiet_step"], "quiet_p99_us": t["p99_quiet_step"]} for t in times],
        }
    engine_step = {}
    if args.engine_step and os.path.exists(args.engine_step):
        with open(args.engine_step) as f:
            for match in ENGINE_STEP.finditer(f.read()):
                engine_step[match["policy"]] = {
                    "runs": int(match["runs"]),
                    "quiet_steps": int(match["quiet"]),
                    "compacting_steps": int(match["busy"]),
                    "quiet_p50_us": float(match["p50"]),
                    "quiet_p99_us": float(match["p99"]),
                    "compacting_mean_us": float(match["mean"]),
                }
        if not engine_step:
            fail(f"{args.engine_step}: no engine_step result line")
    return {
        "measured_at": now(),
        "trace": "tau-bench/gpt-4o-airline.json (200 tasks concatenated)",
        "window": args.window,
        "replay": policies,
        "engine_step": engine_step,
    }


# ---- token counting ----------------------------------------------------------------------------

UNITS = {"B/s": 1e-6, "KB/s": 1e-3, "MB/s": 1.0, "GB/s": 1e3, "KiB/s": 1.024e-3, "MiB/s": 1.048576, "GiB/s": 1073.741824}


def cmd_tokens(args):
    with open(args.log) as f:
        text = f.read()
    loads = []
    for match in re.finditer(r"first load\s+(\S+)\s+(\S+)\s+([\d.]+) ms", text):
        loads.append({"encoding": match[1], "implementation": match[2], "ms": float(match[3])})
    corpus = re.search(r"corpus\s+(\d+) strings, ([\d.]+) MB", text)
    rows = []
    # criterion prints "<id>\n  time: [..]\n  thrpt: [low unit mid unit high unit]" (the id may
    # share the time line when short).
    for match in re.finditer(r"(?m)^(\S+)\s*(?:\n\s+)?time:\s+\[[^\]]*\]\s*\n\s+thrpt:\s+\[([^\]]*)\]", text):
        bench = match[1]
        parts = match[2].split()
        if len(parts) != 6:
            continue
        low, mid, high = (float(parts[i]) * UNITS.get(parts[i + 1], float("nan")) for i in (0, 2, 4))
        rows.append({"bench": bench, "mb_per_s": mid, "mb_per_s_low": low, "mb_per_s_high": high})
    if not rows:
        fail(f"{args.log}: no criterion throughput lines (did the bench run?)")
    return {
        "measured_at": now(),
        "corpus_strings": int(corpus[1]) if corpus else None,
        "corpus_mb": float(corpus[2]) if corpus else None,
        "first_load": loads,
        "throughput": rows,
    }


# ---- stores ------------------------------------------------------------------------------------


def cmd_stores(args):
    rows = []
    with open(args.table) as f:
        for line in f:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 6 and cells[1].isdigit():
                rows.append({
                    "backend": cells[0],
                    "messages": int(cells[1]),
                    "append_p50_us": float(cells[2]),
                    "append_p99_us": float(cells[3]),
                    "load_p50_us": float(cells[4]),
                    "load_p99_us": float(cells[5]),
                })
    if not rows:
        fail(f"{args.table}: no table rows")
    skipped = []
    if args.log and os.path.exists(args.log):
        with open(args.log) as f:
            skipped = [m[0].strip() for m in re.finditer(r"note: \w+ skipped: .*", f.read())]
    return {"measured_at": now(), "rows": rows, "skipped": skipped}


# ---- memory ------------------------------------------------------------------------------------


def cmd_memory(args):
    with open(args.log) as f:
        text = f.read()
    rows = []
    for block in re.split(r"(?m)^### policy ", text)[1:]:
        policy = block.split("\n", 1)[0].strip()
        rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", block)
        wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)", block)
        status = re.search(r"Exit status: (\d+)", block)
        if not rss:
            fail(f"{args.log}: no peak RSS for policy {policy}")
        if status and status[1] != "0":
            fail(f"{args.log}: replay with policy {policy} exited with {status[1]}")
        seconds = None
        if wall:
            parts = [float(p) for p in wall[1].split(":")]
            seconds = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
        rows.append({"policy": policy, "peak_rss_mib": round(int(rss[1]) / 1024, 1), "wall_s": seconds})
    if not rows:
        fail(f"{args.log}: no measurement blocks")
    return {
        "measured_at": now(),
        "trace": "tau-bench/gpt-4o-airline.json (200 tasks concatenated)",
        "window": args.window,
        "replay": rows,
    }


# ---- timings -----------------------------------------------------------------------------------


def cmd_timings(args):
    measured = {}
    for item in args.stages:
        name, _, rest = item.partition("=")
        seconds, _, load = rest.partition("@")
        if not seconds.isdigit():
            fail(f"timings: expected STAGE=SECONDS[@LOAD], got {item!r}")
        measured[name] = {"stage": name, "seconds": int(seconds)}
        if load:
            measured[name]["load_at_start"] = float(load)
    # A partial run keeps the timings of the stages it did not run, so the table stays whole.
    stages = []
    if args.previous and os.path.exists(args.previous):
        with open(args.previous) as f:
            try:
                stages = json.load(f).get("stages", [])
            except json.JSONDecodeError:
                stages = []
    by_name = {s["stage"]: s for s in stages}
    by_name.update(measured)
    order = ["setup", "build", "engine", "peers", "compaction", "tokens", "stores", "memory", "gateway", "report"]
    ordered = sorted(by_name.values(), key=lambda s: order.index(s["stage"]) if s["stage"] in order else len(order))
    return {"measured_at": now(), "quick": args.quick, "stages": ordered}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("machine")
    p.add_argument("--venv", action="append", default=[])
    p = sub.add_parser("engine")
    p.add_argument("--replays", required=True)
    p.add_argument("--engine-step")
    p.add_argument("--window", type=int, required=True)
    p = sub.add_parser("tokens")
    p.add_argument("log")
    p = sub.add_parser("stores")
    p.add_argument("table")
    p.add_argument("--log")
    p = sub.add_parser("memory")
    p.add_argument("log")
    p.add_argument("--window", type=int, required=True)
    p = sub.add_parser("timings")
    p.add_argument("stages", nargs="*")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--previous", help="an earlier timings.json whose other stages are kept")
    args = parser.parse_args()
    for name in ("replays", "engine_step", "log", "table"):
        path = getattr(args, name, None)
        if path and name != "engine_step" and not os.path.exists(path):
            fail(f"{path}: no such file")
    result = globals()[f"cmd_{args.command.replace('-', '_')}"](args)
    json.dump(result, sys.stdout, indent=2, ensure_ascii=False)
    print()


if __name__ == "__main__":
    main()

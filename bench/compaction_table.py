#!/usr/bin/env python3
"""Runs every policy on every shared trace at one or more windows.

Usage: bench/compaction_table.py [--bin PATH] [--jobs N] [--json | --recall] [--policies P,..] [WINDOW...]
       (default window 16000; needs a release build: cargo build --release)

Each cell is one `ctxkeeper replay --json` run (which also replays the unmanaged baseline).
Cells run `--jobs` at a time (default: the number of CPUs). Without --json it prints the
markdown table of each window; with --recall the fidelity table instead (billed input,
next-action recall overall and long-range, the user's words, file paths (named in tool-call
arguments, commands and patches included), plan, references, leaked markers, violations); with --json one JSON object with every report, for
ctxkeeper-bench-report. The archive of each replay goes to a fresh scratch directory under
/dev/shm when it exists (the figures do not depend on where it goes; only wall time does).
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACES = os.environ.get("CTXKEEPER_TRACES", os.path.join(os.path.dirname(ROOT), "shared", "data", "traces"))
POLICIES = ["default", "agentscope", "reme-compact", "reme-compress", "reme-auto", "agentrail", "cowagent", "harness"]


def traces():
    out = []
    for sub in ["tau-bench", "swe-agent", "openhands", "claude-code", "codex"]:
        folder = os.path.join(TRACES, sub)
        if not os.path.isdir(folder):
            print(f"compaction_table.py: SKIP {folder}: not found", file=sys.stderr)
            continue
        for name in sorted(os.listdir(folder)):
            if name == "LICENSE":
                continue
            path = os.path.join(folder, name)
            if sub == "tau-bench":
                out.append((f"{sub}/{name} (concat)", path, ["--concat"]))
            out.append((f"{sub}/{name}", path, []))
    return out


def replay(binary, label, path, extra, policy, window):
    scratch = "/dev/shm" if os.path.isdir("/dev/shm") else None
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=scratch) as workspace:
        out = subprocess.run(
            [binary, "replay", path, "--policy", policy, "--window", str(window), "--json", "--workspace", workspace] + extra,
            capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"replay {label} --policy {policy} --window {window} failed: {out.stderr.strip()}")
    report = json.loads(out.stdout)
    report["label"] = label
    report["wall_s"] = round(time.monotonic() - started, 2)
    return report


def markdown(reports, window):
    def fmt(n):
        return f"{n:,}"

    def share(x):
        return "–" if x is None else f"{x:.2f}"

    lines = [
        "| trace | policy | peak | cumulative | × baseline | uncached | × baseline | billed | × baseline | stable prefix | compactions | recent rounds kept | violations | unrecoverable | instructions | paths | plan | refs | leaked | engine p50 / p99 µs |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    last = None
    for d in (r for r in reports if r["window"] == window):
        b = d["baseline"]
        if d["label"] != last:
            lines.append(f"| {d['label']} | none (baseline) | {fmt(b['peak_input_tokens'])} | {fmt(b['cumulative_input_tokens'])} | 1.00 | {fmt(b['cumulative_uncached_input_tokens'])} | 1.00 | {fmt(b['billed_input_tokens'])} | 1.00 | {b['stable_prefix_ratio']:.3f} | 0 | 5 | {b['violations']} | 0 | – | – | – | – | 0 | – |")
            last = d["label"]
        ratio = d["cumulative_input_tokens"] / max(1, b["cumulative_input_tokens"])
        bratio = d["billed_input_tokens"] / max(1, b["billed_input_tokens"])
        uratio = d["cumulative_uncached_input_tokens"] / max(1, b["cumulative_uncached_input_tokens"])
        kept = d["min_recent_rounds_verbatim"]
        note = "" if kept >= 1 else " ⚠"
        e = d["engine_time_us"]
        lines.append(f"| {d['label']} | {d['policy']} | {fmt(d['peak_input_tokens'])} | {fmt(d['cumulative_input_tokens'])} | {ratio:.2f} | {fmt(d['cumulative_uncached_input_tokens'])} | {uratio:.2f} | {fmt(d['billed_input_tokens'])} | {bratio:.2f} | {d['stable_prefix_ratio']:.3f} | {d['compactions']} | {kept}{note} | {d['violations']} | {d['unrecoverable_items']} | {share(d['user_instructions_kept'])} | {share(d['file_paths_kept'])} | {share(d['plan_kept'])} | {share(d['refs_resolving'])} | {d['leaked_markers']} | {e['p50_step']:.1f} / {e['p99_step']:.0f} |")
    return "\n".join(lines)


def recall_markdown(reports, window):
    def share(x):
        return "–" if x is None else f"{x:.2f}"

    lines = [
        "| trace | policy | billed input | × unmanaged | managed steps | next-action recall (strings) | long-range recall (strings) | user's words | file paths | plan | refs resolving | leaked | violations |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for d in (r for r in reports if r["window"] == window):
        b = d["baseline"]
        bratio = d["billed_input_tokens"] / max(1, b["billed_input_tokens"])
        lines.append(
            f"| {d['label']} | {d['policy']} | {d['billed_input_tokens']:,} | {bratio:.2f} | {d['fidelity_steps']} "
            f"| {share(d['next_action_recall'])} ({d['next_action_strings']}) "
            f"| {share(d['next_action_long_range_recall'])} ({d['next_action_long_range_strings']}) "
            f"| {share(d['user_instructions_kept'])} | {share(d['file_paths_kept'])} "
            f"| {share(d['plan_kept'])} | {share(d['refs_resolving'])} | {d['leaked_markers']} | {d['violations']} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("windows", nargs="*", type=int, default=[16000])
    parser.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "ctxkeeper"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--recall", action="store_true", help="print the fidelity table")
    parser.add_argument("--policies", default=",".join(POLICIES), help="comma-separated presets")
    args = parser.parse_args()
    if not os.path.exists(args.bin):
        sys.exit(f"compaction_table.py: {args.bin} not found: run cargo build --release first")

    cells = [(label, path, extra, policy, window)
             for window in args.windows for (label, path, extra) in traces() for policy in args.policies.split(",")]
    # Longest first (the concatenated session dominates), so the pool ends evenly.
    order = sorted(range(len(cells)), key=lambda i: "(concat)" not in cells[i][0])
    started = time.monotonic()
    reports = [None] * len(cells)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {pool.submit(replay, args.bin, *cells[i]): i for i in order}
        for done, future in enumerate(concurrent.futures.as_completed(futures), 1):
            i = futures[future]
            reports[i] = future.result()
            label, _, _, policy, window = cells[i]
            print(f"[{done}/{len(cells)}] {label} / {policy} / {window}: {reports[i]['wall_s']} s", file=sys.stderr)

    if args.json:
        json.dump({
            "measured_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "windows": args.windows,
            "policies": args.policies.split(","),
            "jobs": args.jobs,
            "wall_s": round(time.monotonic() - started, 1),
            "reports": reports,
        }, sys.stdout, indent=1)
        print()
    else:
        for window in args.windows:
            print(f"\n### window {window:,}\n")
            print(recall_markdown(reports, window) if args.recall else markdown(reports, window))


if __name__ == "__main__":
    main()

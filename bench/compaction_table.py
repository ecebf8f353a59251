#!/usr/bin/env python3
"""Runs every policy on every shared trace at one window and prints a markdown table.

Usage: bench/compaction_table.py [WINDOW]   (needs target/release/ctxkeeper: cargo build --release)

Each cell is one `ctxkeeper replay --json` run. The archive goes to a scratch directory under
/dev/shm when it exists (the figures do not depend on where it goes; only wall time does).
"""
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACES = os.environ.get("CTXKEEPER_TRACES", os.path.join(os.path.dirname(ROOT), "shared", "data", "traces"))
BIN = os.path.join(ROOT, "target", "release", "ctxkeeper")
POLICIES = ["default", "agentscope", "reme-compact", "reme-compress", "reme-auto", "agentrail", "cowagent", "harness"]
window = sys.argv[1] if len(sys.argv) > 1 else "16000"

traces = []
for sub in ["tau-bench", "swe-agent", "openhands", "claude-code", "codex"]:
    for name in sorted(os.listdir(os.path.join(TRACES, sub))):
        if name != "LICENSE":
            path = os.path.join(TRACES, sub, name)
            if sub == "tau-bench":
                traces.append((name + " (concat)", path, ["--concat"]))
            traces.append((name, path, []))

scratch = "/dev/shm" if os.path.isdir("/dev/shm") else None
rows = []
for label, path, extra in traces:
    for policy in POLICIES:
        with tempfile.TemporaryDirectory(dir=scratch) as workspace:
            out = subprocess.run(
                [BIN, "replay", path, "--policy", policy, "--window", window, "--json", "--workspace", workspace] + extra,
                capture_output=True, text=True, check=True)
        d = json.loads(out.stdout)
        rows.append((label, d))
        print(f"{label} / {policy}: done", file=sys.stderr)

def fmt(n):
    return f"{n:,}"

print(f"| trace | policy | peak | cumulative | × baseline | uncached | × baseline | stable prefix | compactions | recent rounds kept | violations | unrecoverable | engine p50 / p99 µs |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
last = None
for label, d in rows:
    b = d["baseline"]
    if label != last:
        print(f"| {label} | none (baseline) | {fmt(b['peak_input_tokens'])} | {fmt(b['cumulative_input_tokens'])} | 1.00 | {fmt(b['cumulative_uncached_input_tokens'])} | 1.00 | {b['stable_prefix_ratio']:.3f} | 0 | 5 | {b['violations']} | 0 | – |")
        last = label
    ratio = d["cumulative_input_tokens"] / max(1, b["cumulative_input_tokens"])
    uratio = d["cumulative_uncached_input_tokens"] / max(1, b["cumulative_uncached_input_tokens"])
    kept = d["min_recent_rounds_verbatim"]
    note = "" if kept >= 1 else " ⚠"
    e = d["engine_time_us"]
    print(f"| {label} | {d['policy']} | {fmt(d['peak_input_tokens'])} | {fmt(d['cumulative_input_tokens'])} | {ratio:.2f} | {fmt(d['cumulative_uncached_input_tokens'])} | {uratio:.2f} | {d['stable_prefix_ratio']:.3f} | {d['compactions']} | {kept}{note} | {d['violations']} | {d['unrecoverable_items']} | {e['p50_step']:.1f} / {e['p99_step']:.0f} |")

#!/usr/bin/env python3
"""What exporting traces costs a request: the same closed-loop load through `ctxkeeper serve`
with telemetry off, with a collector that is down (a port nothing listens on), and with a live
collector (a receiver in another process), in alternating rounds. Prints a markdown table of
client-side latency (send to end of body) per configuration.

Usage: bench/otel_overhead.py [--requests N] [--rounds R]
Binaries: $CTXKEEPER_BIN and $CTXKEEPER_MOCK_UPSTREAM_BIN, else the debug builds in cargo's
target directory ($CARGO_TARGET_DIR or target/). Standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LISTENING = re.compile(r"listening on http://(\S+)")
# Every process started, stopped at the end whatever happened.
STARTED: list[subprocess.Popen] = []


def binary(env_var: str, name: str) -> str:
    if os.environ.get(env_var):
        return os.environ[env_var]
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    return str((target if target.is_absolute() else REPO / target) / "debug" / name)


def start(argv: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    log = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        env={**os.environ, "RUST_LOG": "warn", **(env or {})},
    )
    STARTED.append(proc)
    for line in proc.stdout:
        match = LISTENING.search(line)
        if match:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, match.group(1)
    log.seek(0)
    raise RuntimeError(f"{argv[0]} exited without listening:\n{log.read()[-2000:]}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def collector_process() -> tuple[subprocess.Popen, str]:
    """A live OTLP/HTTP receiver in its own process: answers 200 to every export."""
    code = (
        "import http.server,sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_POST(self):\n"
        "        self.rfile.read(int(self.headers['content-length']))\n"
        "        self.send_response(200); self.send_header('content-length','0'); self.end_headers()\n"
        "    def log_message(self,*a): pass\n"
        "s=http.server.ThreadingHTTPServer(('127.0.0.1',0),H)\n"
        "print(f'listening on http://127.0.0.1:{s.server_address[1]}',flush=True)\n"
        "s.serve_forever()\n"
    )
    return start([sys.executable, "-c", code])


def request_body(step: int) -> bytes:
    messages = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(step % 20 + 1):
        messages.append({"role": "user", "content": f"Step {i}: read the invoice module " * 8})
        messages.append({"role": "assistant", "content": f"Read part {i} of the module. " * 8})
    messages.append({"role": "user", "content": "Go on."})
    return json.dumps({"model": "gpt-4o", "messages": messages}).encode()


def run_load(address: str, requests: int, label: str) -> list[float]:
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    latencies = []
    for step in range(requests):
        body = request_body(step)
        headers = {
            "content-type": "application/json",
            "authorization": "Bearer sk-bench",
            "x-ctxkeeper-session": f"{label}-{step // 20}".replace(" ", "-"),
        }
        started = time.perf_counter()
        connection.request("POST", "/v1/chat/completions", body, headers)
        response = connection.getresponse()
        answer = response.read()
        latencies.append(time.perf_counter() - started)
        if response.status != 200:
            raise RuntimeError(f"{label}: status {response.status}: {answer[:500]!r}")
    connection.close()
    return latencies


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    mock, mock_address = start(
        [binary("CTXKEEPER_MOCK_UPSTREAM_BIN", "ctxkeeper-mock-upstream"), "--listen", "127.0.0.1:0", "--no-record"]
    )
    collector, collector_address = collector_process()
    collector_url = f"http://{collector_address}"
    down = f"http://127.0.0.1:{free_port()}"
    configurations = {
        "telemetry off": {},
        "collector down": {"OTEL_EXPORTER_OTLP_ENDPOINT": down},
        "collector live": {"OTEL_EXPORTER_OTLP_ENDPOINT": collector_url},
    }
    results: dict[str, list[float]] = {name: [] for name in configurations}
    spans: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        gateways = {}
        for index, (name, env) in enumerate(configurations.items()):
            argv = [
                binary("CTXKEEPER_BIN", "ctxkeeper"), "serve", "--listen", "127.0.0.1:0",
                "--upstream", f"http://{mock_address}/v1", "--store", f"sqlite://{tmp}/s{index}.db",
                "--workspace", f"{tmp}/w{index}",
            ]
            gateways[name] = start(argv, env)
        try:
            for name, (_, address) in gateways.items():
                run_load(address, 100, f"warm-{name}")
            for round_ in range(args.rounds):
                for name, (_, address) in gateways.items():
                    results[name].extend(run_load(address, args.requests, f"r{round_}-{name}"))
            time.sleep(6)  # one schedule delay: the live collector's last batch arrives
            for name, (_, address) in gateways.items():
                host, port = address.rsplit(":", 1)
                connection = http.client.HTTPConnection(host, int(port), timeout=10)
                connection.request("GET", "/metrics")
                text = connection.getresponse().read().decode()
                found = dict(re.findall(r"^(ctxkeeper_spans_\w+_total) (\d+)", text, re.M))
                spans[name] = ", ".join(f"{k.removeprefix('ctxkeeper_spans_').removesuffix('_total')} {v}" for k, v in found.items())
        finally:
            for proc, _ in gateways.values():
                proc.terminate()
                proc.wait()
            mock.terminate()
            collector.terminate()
    base = statistics.median(results["telemetry off"])
    print(f"{args.rounds} rounds × {args.requests} sequential requests per configuration, alternating")
    print()
    print("| configuration | requests | p50 (ms) | p90 (ms) | p99 (ms) | mean (ms) | p50 vs off | spans (exported, dropped, export_failed) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, values in results.items():
        p50 = statistics.median(values)
        print(
            f"| {name} | {len(values)} | {p50 * 1000:.3f} | {percentile(values, 0.9) * 1000:.3f} | "
            f"{percentile(values, 0.99) * 1000:.3f} | {statistics.fmean(values) * 1000:.3f} | "
            f"{(p50 - base) * 1000:+.3f} | {spans.get(name, '') or '–'} |"
        )


if __name__ == "__main__":
    try:
        main()
    finally:
        for proc in STARTED:
            if proc.poll() is None:
                proc.terminate()
                proc.wait()

#!/usr/bin/env python3
"""The latency a gateway adds to a growing conversation, as a client in a process of its own
sees it.

    added_latency.py --mock http://10.77.0.2:9100 --gateway http://127.0.0.1:9200 --messages 1000

One conversation grows by a user message of about 4,300 bytes and the model's short answer
per step (1,000 messages are some 2.2 MB). Every step sends the same body to the
mock upstream directly and, as one session named by `x-ctxkeeper-session`, through the
gateway; the added latency is the difference. Prints one JSON object: per reported size, the
median added latency (ms) over the 10 steps before it, and the body size.
"""

import argparse
import http.client
import json
import statistics
import time
from urllib.parse import urlparse


def connection(url):
    return http.client.HTTPConnection(urlparse(url).netloc, timeout=120)


def post(conn, body, session):
    started = time.perf_counter()
    conn.request(
        "POST",
        "/v1/chat/completions",
        body,
        {
            "content-type": "application/json",
            "authorization": "Bearer sk-bench",
            "x-ctxkeeper-session": session,
        },
    )
    response = conn.getresponse()
    answer = response.read()
    if response.status != 200:
        raise SystemExit(f"HTTP {response.status}: {answer[:300]!r}")
    return (time.perf_counter() - started) * 1000, json.loads(answer)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mock", required=True)
    parser.add_argument("--gateway", required=True)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--at", default="50,200,400,600,800,1000")
    parser.add_argument("--model", default="gpt-4.1-mini")
    parser.add_argument("--session", default=f"added-{int(time.time())}")
    args = parser.parse_args()
    direct, gateway = connection(args.mock), connection(args.gateway)
    messages = [{"role": "system", "content": "You are a coding agent."}]
    added, sizes = {}, {}
    while len(messages) < args.messages:
        step = len(messages)
        messages.append({"role": "user", "content": f"result {step}: " + f"word{step} " * 530})
        body = json.dumps({"model": args.model, "messages": messages}).encode()
        direct_ms, _ = post(direct, body, args.session + "-direct")
        gateway_ms, answer = post(gateway, body, args.session)
        messages.append(answer["choices"][0]["message"])
        added[len(messages)] = gateway_ms - direct_ms
        sizes[len(messages)] = len(body)
    rows = []
    for size in (int(n) for n in args.at.split(",")):
        window = [added[n] for n in added if size - 20 < n <= size]
        if window:
            rows.append(
                {
                    "messages": size,
                    "body_bytes": max(sizes[n] for n in sizes if n <= size),
                    "added_p50_ms": round(statistics.median(window), 2),
                }
            )
    print(json.dumps({"rows": rows}))


if __name__ == "__main__":
    main()

"""Helpers for the gateway's end-to-end tests, on top of conftest's process fixtures: start
`ctxkeeper serve` as a real process in front of a mock upstream, follow a session's events
(`GET /v1/sessions/{id}/events`) and call the admin API.

The binary comes from $CTXKEEPER_BIN, else the debug build in cargo's target directory; when
it is missing the test is skipped (and fails under CI=true), like the other end-to-end tests.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx

from conftest import LISTENING, RunningProcess, binary_path, require_binary, start_process


# One OpenAI function tool, shared by the gateway tests.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]

# Vocabulary of the deterministic filler text the tests send as tool outputs.
WORDS = (
    "invoice total round cents amount ledger tax line sum value customer order price "
    "discount currency balance"
).split()


def gateway_binary() -> Path:
    return require_binary(binary_path("CTXKEEPER_BIN", "ctxkeeper"), "ctxkeeper")


def start_gateway(
    upstream: str,
    workdir: Path,
    *extra: str,
    store: str | None = None,
    workspace: Path | str | None = None,
    env: dict[str, str] | None = None,
) -> RunningProcess:
    """`ctxkeeper serve` on a free port in front of the mock at `upstream` (http://ADDR),
    with its SQLite store and archive under `workdir` unless `store` / `workspace` name
    others (several gateways sharing them behave as one service); `env` adds environment
    variables (`OTEL_*`)."""
    argv = [
        gateway_binary(),
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        f"{upstream}/v1",
        "--anthropic-upstream",
        upstream,
        "--store",
        store or f"sqlite://{workdir / 'sessions.db'}",
        "--workspace",
        str(workspace or workdir / "workspace"),
        *extra,
    ]
    return start_process(argv, LISTENING, env={"RUST_LOG": "info", **(env or {})})


def write_config(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


class SessionEvents:
    """The events of one session on one gateway, collected by a background thread from
    `GET /v1/sessions/{id}/events` (server-sent events). The subscription exists once the
    constructor returns: the gateway subscribes before it answers with the headers."""

    def __init__(self, gateway_url: str, session: str, headers: dict[str, str]):
        self.events: list[tuple[str, dict]] = []
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._error: BaseException | None = None
        url = f"{gateway_url}/v1/sessions/{session}/events"
        self._thread = threading.Thread(target=self._run, args=(url, headers), daemon=True)
        self._thread.start()
        if not self._connected.wait(10) or self._error is not None:
            raise RuntimeError(f"could not subscribe to {url}: {self._error!r}")

    def _run(self, url: str, headers: dict[str, str]) -> None:
        try:
            # No read timeout: the stream stays open (keep-alive comments) until the gateway
            # stops, which ends the thread.
            timeout = httpx.Timeout(10.0, read=None)
            with httpx.stream("GET", url, headers=headers, timeout=timeout) as response:
                response.raise_for_status()
                assert response.headers["content-type"].startswith("text/event-stream")
                self._connected.set()
                name, data = None, []
                for line in response.iter_lines():
                    if line == "":
                        if name is not None:
                            with self._lock:
                                self.events.append((name, json.loads("\n".join(data))))
                        name, data = None, []
                    elif line.startswith("event:"):
                        name = line[len("event:") :].strip()
                    elif line.startswith("data:"):
                        data.append(line[len("data:") :].lstrip())
        except BaseException as error:  # reported by the constructor or by settle()
            self._error = error
            self._connected.set()

    def settle(self, quiet: float = 0.5, timeout: float = 15.0) -> list[tuple[str, dict]]:
        """Waits until no event arrived for `quiet` seconds; returns every event so far."""
        deadline = time.monotonic() + timeout
        seen, since = -1, time.monotonic()
        while time.monotonic() < deadline:
            with self._lock:
                count = len(self.events)
            if count != seen:
                seen, since = count, time.monotonic()
            elif time.monotonic() - since >= quiet:
                break
            time.sleep(0.05)
        with self._lock:
            return list(self.events)

    def wait_for(self, name: str, timeout: float = 10.0) -> list[dict]:
        """Waits until an event named `name` arrived; returns all such events."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.named(name)
            if found:
                return found
            time.sleep(0.02)
        return []

    def named(self, name: str) -> list[dict]:
        with self._lock:
            return [data for event, data in self.events if event == name]

    def names(self) -> list[str]:
        with self._lock:
            return [event for event, _ in self.events]


def admin(
    gateway_url: str, token: str, tenant: str, method: str, path: str, **params
) -> tuple[int, dict]:
    """Calls the admin API as `tenant`; returns the status and the JSON body."""
    response = httpx.request(
        method,
        f"{gateway_url}{path}",
        headers={"authorization": f"Bearer {token}", "x-ctxkeeper-tenant": tenant},
        params=params or None,
        timeout=30,
    )
    return response.status_code, response.json()


def metric(gateway_url: str, name: str) -> float:
    """The value of an unlabelled Prometheus counter on `/metrics`."""
    text = httpx.get(f"{gateway_url}/metrics", timeout=10).text
    for line in text.splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics:\n{text}")

"""Shared fixtures for the end-to-end tests: start workspace binaries as real processes and
wait until they say they are ready.

- ``start_process(argv, ready_regex, env=None)`` starts any server binary and returns once a
  line of its stdout matches ``ready_regex`` (the gateway and MCP fixtures reuse it);
- ``mock_upstream`` is a running ``ctxkeeper-mock-upstream`` (binary from
  ``$CTXKEEPER_MOCK_UPSTREAM_BIN``, else ``$CARGO_TARGET_DIR/debug`` or ``target/debug``);
- ``require_binary(path, what)`` skips a test with an explicit message when a binary is
  missing, and fails it instead when ``CI=true``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]
LISTENING = r"listening on (http://\S+)"


def target_dir() -> Path:
    """Cargo's target directory, honouring ``CARGO_TARGET_DIR`` like cargo does."""
    configured = os.environ.get("CARGO_TARGET_DIR")
    if not configured:
        return REPO / "target"
    path = Path(configured)
    return path if path.is_absolute() else REPO / path


def binary_path(env_var: str, name: str) -> Path:
    """A binary named by ``env_var``, else the debug build of ``name``."""
    configured = os.environ.get(env_var)
    if configured:
        path = Path(configured)
        return path if path.is_absolute() else REPO / path
    return target_dir() / "debug" / name


def require_binary(path: Path, what: str) -> Path:
    """Skips (or under CI=true fails) the current test when ``path`` is not an executable."""
    if path.is_file() and os.access(path, os.X_OK):
        return path
    message = (
        f"{what} binary not found at {path}; build it with `cargo build --workspace --bins` "
        f"or point the environment at it"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


class RunningProcess:
    """A child process that printed its ready line. Stop it with ``stop()``."""

    def __init__(self, argv: list[str], proc: subprocess.Popen, match: re.Match, stderr: list[str]):
        self.argv = argv
        self.proc = proc
        self.match = match
        self._stderr = stderr

    @property
    def url(self) -> str:
        """The first group of the ready regex (the listening URL for our servers)."""
        return self.match.group(1) if self.match.groups() else self.match.group(0)

    def logs(self) -> str:
        """Everything the process wrote to stderr so far."""
        return "".join(self._stderr)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, a graceful wait, SIGKILL if it hangs; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_process(
    argv: list[str], ready_regex: str, env: dict | None = None, timeout: float = 60.0
) -> RunningProcess:
    """Starts ``argv`` and waits until a stdout line matches ``ready_regex``.

    stderr is drained continuously (a chatty server never blocks on a full pipe) and shown in
    the error when the process dies or never becomes ready.
    """
    proc = subprocess.Popen(
        [str(arg) for arg in argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )
    stderr: list[str] = []
    threading.Thread(target=lambda: stderr.extend(proc.stderr), daemon=True).start()
    pattern = re.compile(ready_regex)
    found: list[re.Match] = []

    def read_stdout() -> None:
        for line in proc.stdout:
            if not found:
                match = pattern.search(line)
                if match:
                    found.append(match)
            # Keep reading so the child never blocks on a full stdout pipe.

    threading.Thread(target=read_stdout, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not found and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    if not found:
        code = proc.poll()
        if code is None:
            proc.kill()
            proc.wait()
        state = f"exited with {code}" if code is not None else f"was not ready within {timeout}s"
        raise RuntimeError(
            f"{argv[0]} {state} (waiting for /{ready_regex}/ on stdout); stderr:\n"
            + "".join(stderr[-40:])
        )
    return RunningProcess([str(arg) for arg in argv], proc, found[0], stderr)


class MockUpstream:
    """A running mock upstream, driven through its control endpoints."""

    def __init__(self, process: RunningProcess):
        self.process = process
        self.url = process.url

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    def _call(self, method: str, path: str, body: dict | None = None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())

    def requests(self) -> list[dict]:
        """Everything the mock received, oldest first (method, path, headers, body, status,
        input_tokens)."""
        return self._call("GET", "/mock/requests")

    def set_window(self, tokens: int) -> None:
        self._call("POST", "/mock/config", {"window": tokens})

    def reset(self) -> None:
        """Forgets the recorded requests and the simulated prompt cache."""
        self._call("POST", "/mock/reset", {})


def start_mock_upstream(window: int = 128_000, *extra: str) -> MockUpstream:
    """Starts the mock upstream binary (skipping the test when it is not built)."""
    exe = require_binary(
        binary_path("CTXKEEPER_MOCK_UPSTREAM_BIN", "ctxkeeper-mock-upstream"), "ctxkeeper-mock-upstream"
    )
    argv = [exe, "--listen", "127.0.0.1:0", "--window", str(window), *extra]
    return MockUpstream(start_process(argv, LISTENING))


@pytest.fixture
def mock_upstream() -> Iterator[MockUpstream]:
    """A fresh mock upstream with a 128k window, killed on teardown."""
    mock = start_mock_upstream()
    try:
        yield mock
    finally:
        mock.process.stop()

"""What the plug-in tests (test_py_plugins_*.py) share: a mock upstream that drives an agent
framework's loop, the shell tool that loop calls, and the overflows the mock refused.

The mock upstream runs a script (``--script-steps``): to a request declaring a
``shell_command`` tool it answers with a call to it, ``echo ctxkstep<k>out; seq 1 <n>`` (about
``OUTPUT_BYTES`` bytes of output), step after step, then the text ``All done.``. Its window is
small, so the loop's history passes it after a few steps: a framework left to itself sends a
request over the window and gets the provider's context-overflow error.
"""

from __future__ import annotations

import subprocess

from conftest import MockUpstream, start_mock_upstream

# The window the mock enforces and the manager is told: ~8 steps of output fill it.
WINDOW = 12_000
STEPS = 12
OUTPUT_BYTES = 6_000
TASK = "Run the build steps one by one and report when they are all done."
SYSTEM = "You are a build agent. Run one shell command per step with shell_command."
DONE = "All done."


def scripted_mock() -> MockUpstream:
    return start_mock_upstream(WINDOW, "--script-steps", str(STEPS), "--script-output-bytes", str(OUTPUT_BYTES))


def run_shell(command: str) -> str:
    """The tool's body: runs the command the model asked for and returns what it printed."""
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
    return done.stdout + done.stderr


def model_calls(mock: MockUpstream) -> list[dict]:
    return [r for r in mock.requests() if r["path"].startswith("/v1/") and r["method"] == "POST"]


def overflows(mock: MockUpstream) -> list[dict]:
    """The model calls the mock refused as over its window (a 400 after counting the input;
    a request refused as malformed is refused before counting)."""
    return [r for r in model_calls(mock) if r["status"] == 400 and r["input_tokens"] > 0]


def refused(mock: MockUpstream) -> list[dict]:
    """Every model call the mock refused, for whatever reason."""
    return [r for r in model_calls(mock) if r["status"] >= 400]

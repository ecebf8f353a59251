"""The npm package ctxkeeper-engine (crates/ctxkeeper-node, packages/ctxkeeper-node), driven by
Node's own test runner: each file of tests/node runs as `node --test FILE` against the package
installed from its packed tarball into the project scripts/nodeproject prepares (scripts/test
runs it and exports CTXKEEPER_NODE_PROJECT).

- package.test.mjs: loading, the three wire shapes, typed errors that store nothing, a loop
  with big tool outputs that never exceeds its window, archives read back;
- parity.test.mjs: the requests of `ctxkeeper replay --emit-requests` (test_py_parity.py's
  fixture), step for step;
- plugin-*.test.mjs: the Vercel AI SDK, OpenAI Agents SDK and OpenClaw plug-ins in real agent
  loops against the mock upstream, with and without the plug-in.

OpenClaw needs Node 24: the files that run it run with the Node scripts/nodeproject installs
from the npm registry into the project (`node24/bin/node`), and readme.test.mjs runs the README's
OpenClaw example with it (`CTXKEEPER_NODE24`).

A missing node, package or framework skips loudly (and fails under CI=true).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, binary_path

NODE_TESTS = REPO / "tests" / "node"
PROJECT = Path(os.environ.get("CTXKEEPER_NODE_PROJECT", REPO / ".node-project"))
FRAMEWORKS = {
    "plugin-ai-sdk.test.mjs": ["ai", "@ai-sdk/openai"],
    "plugin-openai-agents.test.mjs": ["@openai/agents", "openai"],
    "plugin-openclaw.test.mjs": ["openclaw"],
    "readme.test.mjs": ["ai", "@ai-sdk/openai", "@openai/agents", "openai", "openclaw"],
}
# OpenClaw's engines field: >=24.16 <25 or >=26.1.
NODE24 = PROJECT / "node24" / "bin" / "node"
NEEDS_NODE24 = {"plugin-openclaw.test.mjs"}
# A turn of OpenClaw's embedded agent is a process of its own (~15 s here).
TIMEOUTS = {"plugin-openclaw.test.mjs": 900, "readme.test.mjs": 600}


def missing(message: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.mark.parametrize("name", sorted(p.name for p in NODE_TESTS.glob("*.test.mjs")))
def test_node(name: str) -> None:
    node = shutil.which("node")
    if node is None:
        missing("node is not installed: the npm package's tests cannot run")
    if not (PROJECT / "node_modules" / "ctxkeeper-engine" / "ctxkeeper_engine.node").is_file():
        missing(f"ctxkeeper-engine is not installed in {PROJECT}: run scripts/nodeproject")
    for package in FRAMEWORKS.get(name, []):
        if not (PROJECT / "node_modules" / package / "package.json").is_file():
            missing(f"{package} is not installed in {PROJECT}: run scripts/nodeproject")
    if "openclaw" in FRAMEWORKS.get(name, []) and not os.access(NODE24, os.X_OK):
        missing(f"Node 24 is not installed at {NODE24}: run scripts/nodeproject")
    if name in NEEDS_NODE24:
        node = str(NODE24)
    env = dict(os.environ)
    env["CTXKEEPER_NODE_PROJECT"] = str(PROJECT)
    env["CTXKEEPER_NODE24"] = str(NODE24)
    env.setdefault("CTXKEEPER_BIN", str(binary_path("CTXKEEPER_BIN", "ctxkeeper")))
    env.setdefault(
        "CTXKEEPER_MOCK_UPSTREAM_BIN",
        str(binary_path("CTXKEEPER_MOCK_UPSTREAM_BIN", "ctxkeeper-mock-upstream")),
    )
    done = subprocess.run(
        [node, "--test", "--test-reporter=spec", str(NODE_TESTS / name)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUTS.get(name, 300),
    )
    print(done.stdout)
    assert done.returncode == 0, f"node --test {name} failed:\n{done.stdout}\n{done.stderr}"

"""README's "From Python" plug-in examples, run as written: every ```python block of that
section that imports `ctxkeeper_engine.integrations` runs in its own interpreter against the
mock upstream (OPENAI_BASE_URL / OPENAI_API_KEY), which scripts a few shell steps and then the
final text. An example that no longer runs fails here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO, start_mock_upstream


def examples() -> list[str]:
    text = (REPO / "README.md").read_text()
    section = text[text.index("## From Python") :]
    section = section[: section.index("\n## ", 1)]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    return [b for b in blocks if "ctxkeeper_engine.integrations" in b]


def test_readme_has_an_example_per_plug_in():
    found = "\n".join(examples())
    for module in ("langchain", "openai_agents", "agentscope"):
        assert f"ctxkeeper_engine.integrations.{module}" in found


@pytest.mark.parametrize("index", range(3))
def test_the_readme_example_runs(index, tmp_path):
    code = examples()[index]
    mock = start_mock_upstream(128_000, "--script-steps", "3", "--script-output-bytes", "2000")
    try:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": mock.openai_base_url,
            "OPENAI_API_KEY": "readme-example",
            "OPENAI_AGENTS_DISABLE_TRACING": "1",
        }
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "All done." in done.stdout, done.stdout + done.stderr[-2000:]
        calls = [r for r in mock.requests() if r["path"].startswith("/v1/")]
        assert len(calls) >= 4 and all(r["status"] == 200 for r in calls)
    finally:
        mock.process.stop()

"""Long-term memory, request-time context and history repair through `ctxkeeper serve`, with
the official `openai` and `mcp` clients: a tool-calling agent loop under the harness preset
compacts, the facts of what it compacted land in the tenant's `memory/<date>.md` under the
workspace, the next requests name that file after the client's messages, and `memory_search`
over the gateway's own `/mcp` finds them with the agent's key and nothing with another key.
`--repair` turns a broken tool pair from a 400 into a repaired request."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timezone
from pathlib import Path

import openai
import pytest

from conftest import start_mock_upstream
from gateway_support import TOOLS, WORDS, start_gateway
from mcp_client import http_session, structured

KEY_A = "sk-memory-tenant-a-0123"
KEY_B = "sk-memory-tenant-b-0123"
CONSTRAINT = "You must not edit billing/legacy_rates.py, other services import it."


def today() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d")


def tool_output(step: int, size: int = 600) -> str:
    out, i = [], step
    while sum(len(w) + 1 for w in out) < size:
        out.append(WORDS[i % len(WORDS)])
        i = i * 31 + 7
    return f"step {step}: " + " ".join(out)


def run_agent(client: openai.OpenAI, steps: int, session: str) -> list[dict]:
    """A tool-calling loop (the mock always calls a tool) over two user turns, the first with
    the user's constraint; returns the final history."""
    messages = [
        {"role": "system", "content": "You are a coding agent. Use read_file to inspect files."},
        {"role": "user", "content": f"Find where invoice totals are rounded and fix it. {CONSTRAINT}"},
    ]
    for step in range(steps):
        if step == steps // 2:
            messages.append({"role": "user", "content": "Now do the same for the tax module."})
        reply = client.chat.completions.create(
            model="gpt-4o",
            messages=messages,
            tools=TOOLS,
            max_tokens=256,
            extra_headers={"x-ctxkeeper-session": session},
        )
        message = reply.choices[0].message
        assert message.tool_calls, f"step {step}: the mock always calls a tool"
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": call.id, "content": tool_output(step)})
    return messages


def mcp_session(url: str, key: str):
    return http_session(url, headers={"authorization": f"Bearer {key}"})


async def search_memory(url: str, key: str, query: str) -> list[dict]:
    async with mcp_session(url, key) as session:
        found = structured(await session.call_tool("memory_search", {"query": query}))
        return found["hits"]


async def read_memory(url: str, key: str, path: str) -> str:
    async with mcp_session(url, key) as session:
        return structured(await session.call_tool("memory_get", {"path": path}))["text"]


def daily_files(workspace: Path) -> list[Path]:
    return sorted(workspace.glob(f"tenants/*/memory/{today()}.md"))


def test_agent_loop_flushes_memory_that_only_its_tenant_finds_over_mcp(tmp_path):
    mock = start_mock_upstream()
    gateway = start_gateway(
        mock.url, tmp_path, "--policy", "harness", "--context-provider", "memory,date"
    )
    try:
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY_A, max_retries=0)
        # Harness compacts past 30 messages: 20 tool rounds compact a few times.
        run_agent(client, 20, session="memory-loop")

        workspace = tmp_path / "workspace"
        daily = daily_files(workspace)
        assert len(daily) == 1, f"one tenant wrote today's file: {daily}"
        text = daily[0].read_text()
        assert "before compaction of session memory-loop" in text, text
        assert "billing/legacy_rates.py" in text, text

        # The context after the client's messages names the memory file and today's date;
        # everything before it is what the agent sent.
        last = mock.requests()[-1]["body"]["messages"]
        provided = last[-1]["content"]
        assert f"memory/{today()}.md" in provided and f"Today's date: {today()}" in provided
        assert last[-2]["role"] == "tool"

        url = f"{gateway.url}/mcp"
        hits = asyncio.run(search_memory(url, KEY_A, "legacy_rates"))
        assert hits and hits[0]["path"] == f"memory/{today()}.md", hits
        assert "legacy_rates" in asyncio.run(read_memory(url, KEY_A, f"memory/{today()}.md"))
        assert asyncio.run(search_memory(url, KEY_B, "legacy_rates")) == []
    finally:
        assert gateway.stop() == 0, gateway.logs()
        mock.process.stop()


BROKEN = [
    {"role": "user", "content": "List the files, then read the readme."},
    {"role": "tool", "tool_call_id": "call_ghost", "content": "a.txt b.txt"},
    {"role": "assistant", "content": "Two files."},
    {"role": "user", "content": "Thanks, summarize them."},
]


def test_a_broken_tool_pair_is_refused_unless_the_gateway_repairs_it(tmp_path, mock_upstream):
    strict = start_gateway(mock_upstream.url, tmp_path / "strict")
    try:
        client = openai.OpenAI(base_url=f"{strict.url}/v1", api_key=KEY_A, max_retries=0)
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model="gpt-4o", messages=BROKEN)
        assert "tool call pairing" in str(refused.value)
    finally:
        assert strict.stop() == 0, strict.logs()

    repairing = start_gateway(mock_upstream.url, tmp_path / "repair", "--repair")
    try:
        client = openai.OpenAI(base_url=f"{repairing.url}/v1", api_key=KEY_A, max_retries=0)
        reply = client.chat.completions.create(model="gpt-4o", messages=BROKEN)
        assert reply.choices[0].message.content
        sent = mock_upstream.requests()[-1]
        assert sent["status"] == 200
        assert "call_ghost" not in json.dumps(sent["body"])
    finally:
        assert repairing.stop() == 0, repairing.logs()

"""The OpenAI Agents SDK plug-in (ctxkeeper_engine.integrations.openai_agents) in a real
`Runner.run` loop: the SDK's own Responses model over an `AsyncOpenAI` client pointed at the
mock upstream, a function tool with big outputs, a window the history passes after a few steps.

With the session (and its input filter) the run finishes with no request over the window and
the outputs that left the context are read back from the archive; without it the same run
overflows.
"""

from __future__ import annotations

import asyncio
import os

import pytest

pytest.importorskip("agents")
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
import openai
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

from ctxkeeper_engine.integrations.openai_agents import CtxkeeperSession
from plugin_support import DONE, STEPS, SYSTEM, TASK, WINDOW, overflows, refused, run_shell, scripted_mock

set_tracing_disabled(True)


@function_tool
def shell_command(command: str) -> str:
    """Runs a shell command and returns its output."""
    return run_shell(command)


@pytest.fixture
def mock():
    mock = scripted_mock()
    try:
        yield mock
    finally:
        mock.process.stop()


def agent_for(mock, key: str) -> Agent:
    client = openai.AsyncOpenAI(base_url=mock.openai_base_url, api_key=key, max_retries=0)
    model = OpenAIResponsesModel(model="gpt-4o", openai_client=client)
    return Agent(name="builder", instructions=SYSTEM, model=model, tools=[shell_command])


def test_with_the_session_the_run_finishes_inside_the_window_and_keeps_every_output(mock):
    session = CtxkeeperSession("build-1", model="gpt-4o", window=WINDOW)
    agent = agent_for(mock, "with-ctxkeeper")

    async def go():
        result = await Runner.run(agent, TASK, session=session, run_config=session.run_config(), max_turns=STEPS + 5)
        items = await session.get_items()
        # The session holds the whole run, managed: the next run starts from it.
        follow_up = await Runner.run(agent, "Thanks. Anything left?", session=session, run_config=session.run_config(), max_turns=3)
        return result, items, follow_up

    result, items, follow_up = asyncio.run(go())
    assert result.final_output == DONE
    assert items[-1]["role"] == "assistant" and DONE in str(items[-1]["content"])
    assert sum(1 for item in items if item.get("type") == "function_call_output") >= 1
    assert follow_up.final_output
    assert overflows(mock) == [] and refused(mock) == []
    manager = session.manager
    assert manager.stats()["compactions"] >= 1, manager.stats()
    hits = manager.search("ctxkstep1out")
    assert hits, "the first step's output is in the archive"
    assert "ctxkstep1out" in manager.read(hits[0]["reference"])


def test_the_session_protocol(mock):
    from agents.memory import Session

    session = CtxkeeperSession("proto")
    assert isinstance(session, Session)

    async def go():
        await session.add_items([{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}])
        assert [i["content"] for i in await session.get_items()] == ["one", "two"]
        assert (await session.pop_item())["content"] == "two"  # already ingested: rebuilt
        assert [i["content"] for i in await session.get_items()] == ["one"]
        await session.add_items([{"role": "assistant", "content": "three"}])
        assert (await session.pop_item())["content"] == "three"  # pending: taken back
        assert [i["content"] for i in await session.get_items(limit=1)] == ["one"]
        await session.clear_session()
        assert await session.get_items() == [] and await session.pop_item() is None

    asyncio.run(go())


def test_without_it_the_same_run_overflows(mock):
    agent = agent_for(mock, "without")
    with pytest.raises(openai.BadRequestError) as raised:
        asyncio.run(Runner.run(agent, TASK, max_turns=STEPS + 5))
    assert "context" in str(raised.value).lower()
    assert len(overflows(mock)) == 1

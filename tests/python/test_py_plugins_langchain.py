"""The LangChain plug-in (ctxkeeper_engine.integrations.langchain) in a real `create_agent`
loop: LangChain's own ChatOpenAI client against the mock upstream, a shell tool with big
outputs, a window the history passes after a few steps.

With the middleware the loop finishes with no request over the window and the outputs that
left the context are read back from the archive; without it the same loop overflows.
"""

from __future__ import annotations

import asyncio

import openai
import pytest

pytest.importorskip("langchain")
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from ctxkeeper_engine.integrations.langchain import CtxkeeperMiddleware
from plugin_support import DONE, STEPS, SYSTEM, TASK, WINDOW, overflows, refused, run_shell, scripted_mock


@tool
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


def agent_for(mock, key: str, middleware=()):
    model = ChatOpenAI(model="gpt-4o", base_url=mock.openai_base_url, api_key=key, max_retries=0)
    return create_agent(model, tools=[shell_command], system_prompt=SYSTEM, middleware=list(middleware))


def test_with_the_middleware_the_loop_finishes_inside_the_window_and_keeps_every_output(mock):
    keeper = CtxkeeperMiddleware(model="gpt-4o", window=WINDOW)
    agent = agent_for(mock, "with-ctxkeeper", [keeper])
    result = agent.invoke({"messages": [{"role": "user", "content": TASK}]}, {"recursion_limit": 100})

    assert result["messages"][-1].content == DONE
    assert overflows(mock) == [] and refused(mock) == []
    # The agent's own state keeps every output whole; the requests did not.
    outputs = [m for m in result["messages"] if m.type == "tool"]
    assert len(outputs) == STEPS
    manager = keeper.manager()
    stats = manager.stats()
    assert stats["compactions"] >= 1, stats
    # An output that left the context is found and read back whole.
    hits = manager.search("ctxkstep1out")
    assert hits, "the first step's output is in the archive"
    text = manager.read(hits[0]["reference"])
    assert "ctxkstep1out" in text and outputs[0].content.strip().splitlines()[-1] in text


def test_without_it_the_same_loop_overflows(mock):
    agent = agent_for(mock, "without")
    with pytest.raises(openai.BadRequestError) as raised:
        agent.invoke({"messages": [{"role": "user", "content": TASK}]}, {"recursion_limit": 100})
    assert "context" in str(raised.value).lower()
    assert len(overflows(mock)) == 1


def test_the_async_loop_is_managed_too(mock):
    keeper = CtxkeeperMiddleware(model="gpt-4o", window=WINDOW)
    agent = agent_for(mock, "async", [keeper])
    run = agent.ainvoke({"messages": [{"role": "user", "content": TASK}]}, {"recursion_limit": 100})
    result = asyncio.run(run)
    assert result["messages"][-1].content == DONE
    assert overflows(mock) == []

"""The AgentScope plug-in (ctxkeeper_engine.integrations.agentscope) in a real AgentScope 2.x
agent's reasoning-acting loop: AgentScope's own OpenAIChatModel pointed at the mock upstream, a
shell tool with big outputs, a window the history passes after a few steps.

With the middleware the reply finishes with no request over the window and the outputs that
left the context are read back from the archive; without it (AgentScope's own context
compression in charge) the same loop overflows.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

pytest.importorskip("agentscope")
from agentscope.agent import Agent
from agentscope.credential import OpenAICredential
from agentscope.message import UserMsg
from agentscope.model import OpenAIChatModel
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, Toolkit

from ctxkeeper_engine.integrations.agentscope import CtxkeeperMiddleware
from plugin_support import DONE, STEPS, SYSTEM, TASK, WINDOW, overflows, refused, run_shell, scripted_mock


def shell_command(command: str) -> str:
    """Runs a shell command and returns its output.

    Args:
        command (`str`): the command line.
    """
    return run_shell(command)


@pytest.fixture
def mock():
    mock = scripted_mock()
    try:
        yield mock
    finally:
        mock.process.stop()


def run_agent(mock, key: str, middlewares=()):
    async def go():
        toolkit = Toolkit()
        allow = PermissionDecision(behavior=PermissionBehavior.ALLOW, message="test tool")
        await toolkit.add_tool(FunctionTool(shell_command, permission=allow))
        model = OpenAIChatModel(
            credential=OpenAICredential(api_key=key, base_url=mock.openai_base_url),
            model="gpt-4o",
            max_retries=0,
            context_size=WINDOW,
        )
        agent = Agent(name="builder", system_prompt=SYSTEM, model=model, toolkit=toolkit, middlewares=list(middlewares))
        reply = await agent.reply(UserMsg("user", TASK))
        return agent, reply

    return asyncio.run(go())


def test_with_the_middleware_the_reply_finishes_inside_the_window_and_keeps_every_output(mock):
    keeper = CtxkeeperMiddleware(model="gpt-4o")
    agent, reply = run_agent(mock, "with-ctxkeeper", [keeper])

    assert DONE in reply.get_text_content()
    assert overflows(mock) == [] and refused(mock) == []
    manager = keeper.manager
    assert manager.stats()["window"] == WINDOW  # the model's context_size
    assert manager.stats()["compactions"] >= 1, manager.stats()
    hits = manager.search("ctxkstep1out")
    assert hits, "the first step's output is in the archive"
    assert "ctxkstep1out" in manager.read(hits[0]["reference"])
    # The agent's own state kept every output whole.
    assert "ctxkstep1out" in str(agent.state.context) and f"ctxkstep{STEPS}out" in str(agent.state.context)


def test_without_it_the_same_loop_overflows(mock, caplog):
    caplog.set_level(logging.ERROR)
    try:
        _, reply = run_agent(mock, "without")
    except Exception as error:  # noqa: BLE001 - AgentScope raises the client's error
        assert "context" in str(error).lower()
    else:
        assert DONE not in reply.get_text_content()
    assert len(overflows(mock)) >= 1

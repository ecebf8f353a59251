#!/usr/bin/env python3
"""AgentScope's own per-step context check, timed on the concatenated tau-bench session.

What runs: an `agentscope.agent.Agent` (the `agentscope` package from PyPI, pinned in
requirements.txt) with its default `ContextConfig` (trigger at 0.8 of the window, reserve 0.1)
and a model whose `context_size` is the window (16,000 by default). The session's messages are
fed to the agent's state one by one, as its reasoning-acting loop would add them (an assistant
message with its text and tool calls; each tool result appended to that assistant message, as
AgentScope stores results). Before every assistant message of the trace — every model call —
the driver awaits `agent.compress_context()`, the call AgentScope makes before each reasoning
step.

What is timed: that one call, and nothing else. It assembles the model input (system prompt,
skill instructions, tool schemas), estimates its tokens, and, when over the trigger, splits the
context, asks the model for a structured summary and swaps it in. The model is a stub whose
`_call_api` answers instantly with a fixed five-field summary as a `generate_structured_output`
tool call, so AgentScope still builds the compression request and validates the answer, but no
time is spent waiting for a model. Feeding messages into the state is not timed.

A step "compacts" when the call replaced the context with a summary. Figures: p50 / p99 of the
steps that did not compact, the mean of those that did, per run; the median over runs.

Two input variants (`--tools`): `none` sends exactly what ctxkeeper is given (tau-bench logs
carry no tool declarations); `inferred` declares the 14 airline tools the session calls, with
schemas inferred from the calls, as a real agent would (AgentScope copies every tool schema on
every step, so this is the realistic cost).

Usage: agentscope_compress.py TRACE [--window 16000] [--runs 3] [--tools none|inferred|both]
Prints one JSON object on stdout.
"""
import argparse
import asyncio
import json
import logging
import warnings

import agentscope
from agentscope.agent import Agent, ContextConfig
from agentscope.message import AssistantMsg, Msg, TextBlock, ToolCallBlock, ToolResultBlock, UserMsg
from agentscope.model import ChatModelBase, ChatResponse
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import Toolkit, ToolBase

import common

SUMMARY_FIELDS = ["task_overview", "current_state", "important_discoveries", "next_steps", "context_to_preserve"]
# The same size of summary ctxkeeper's engine_step bench stands in for.
SUMMARY_TEXT = "a summary sentence of moderate length " * 8


class InstantModel(ChatModelBase):
    """A chat model that answers at once: every call returns the structured summary."""

    def __init__(self, context_size):
        super().__init__(credential=None, model="stub", parameters=None, stream=False, max_retries=0, context_size=context_size)
        self.calls = 0

    async def _call_api(self, model_name, messages, tools=None, tool_choice=None, **kwargs):
        self.calls += 1
        arguments = json.dumps({field: SUMMARY_TEXT for field in SUMMARY_FIELDS})
        return ChatResponse(
            content=[ToolCallBlock(id=f"summary-{self.calls}", name="generate_structured_output", input=arguments)],
            is_last=True,
        )


class DeclaredTool(ToolBase):
    """A tool the agent declares to the model; it is never called in this benchmark."""

    is_concurrency_safe = True
    is_read_only = True
    is_external_tool = True

    def __init__(self, spec):
        super().__init__()
        self.name = spec["name"]
        self.description = spec["description"]
        self.input_schema = spec["parameters"]

    async def check_permissions(self, tool_input, context):
        return PermissionDecision(behavior=PermissionBehavior.ALLOW, message="declared only")


def to_msgs(message, state):
    """Adds one OpenAI chat message to the agent state's context, the way AgentScope keeps it."""
    role = message["role"]
    text = message.get("content") or ""
    if role == "user":
        state.context.append(UserMsg("user", text))
    elif role == "assistant":
        blocks = [TextBlock(text=text)] if text else []
        for call in message.get("tool_calls") or []:
            function = call["function"]
            blocks.append(ToolCallBlock(id=call["id"], name=function["name"], input=function.get("arguments") or "{}", state="allowed"))
        state.context.append(AssistantMsg("agent", blocks))
    elif role == "tool":
        result = ToolResultBlock(id=message.get("tool_call_id", ""), name=message.get("name") or "tool", output=text, state="success")
        last = state.context[-1] if state.context else None
        if isinstance(last, Msg) and last.role == "assistant":
            last.content.append(result)
        else:
            state.context.append(AssistantMsg("agent", [result]))


async def one_run(messages, system_prompt, tools, window):
    toolkit = Toolkit()
    if tools:
        await toolkit.add_tool([DeclaredTool(spec) for spec in tools])
    model = InstantModel(window)
    agent = Agent(name="agent", system_prompt=system_prompt, model=model, toolkit=toolkit, context_config=ContextConfig())
    quiet, busy, series = [], [], []
    for message in messages:
        if message["role"] == "system":
            continue
        if message["role"] == "assistant":
            summary_before = agent.state.summary
            context_before = len(agent.state.context)
            started = common.now_us()
            await agent.compress_context()
            took = common.now_us() - started
            compacted = agent.state.summary is not summary_before or len(agent.state.context) < context_before
            (busy if compacted else quiet).append(took)
            series.append(took)
        to_msgs(message, agent.state)
    run = common.summarize_run(quiet, busy)
    run.update(common.first_last(series))
    run["model_calls"] = model.calls
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--window", type=int, default=16000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tools", choices=["none", "inferred", "both"], default="both")
    args = parser.parse_args()
    # AgentScope logs every compression at INFO; the benchmark's output is the JSON.
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")

    messages = common.load_concat_session(args.trace)
    system_prompt = next((m.get("content") or "" for m in messages if m["role"] == "system"), "")
    variants = ["none", "inferred"] if args.tools == "both" else [args.tools]
    results = {}
    for variant in variants:
        tools = common.infer_tool_schemas(messages) if variant == "inferred" else []
        runs = [asyncio.run(one_run(messages, system_prompt, tools, args.window)) for _ in range(args.runs)]
        results[variant] = common.combine_runs(runs) | {"tool_schemas": len(tools)}
    common.emit({
        "peer": "agentscope",
        "package": "agentscope",
        "version": agentscope.__version__,
        "timed": "Agent.compress_context() before every model call",
        "config": {"trigger_ratio": 0.8, "reserve_ratio": 0.1, "context_size": args.window},
        "window": args.window,
        "messages": len(messages),
        "steps": sum(1 for m in messages if m["role"] == "assistant"),
        "variants": results,
    })


if __name__ == "__main__":
    main()

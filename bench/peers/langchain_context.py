#!/usr/bin/env python3
"""LangChain's two context-management paths, timed per step on the concatenated tau-bench session.

What runs (the `langchain` / `langchain-core` packages from PyPI, pinned in requirements.txt):

- `SummarizationMiddleware` (langchain.agents.middleware): the middleware `create_agent` runs
  before every model call. Configured as its docs suggest for a 16k model: trigger at 0.8 of the
  window in tokens, keep the most recent 20 messages (its default), LangChain's default
  approximate token counter. Its model is `FakeListChatModel` from langchain-core, which
  answers instantly with a fixed summary, so the middleware still builds and sends its summary
  prompt but no time is spent waiting for a model.
- `trim_messages` (langchain_core.messages): the stateless trimmer, called on the whole history
  before every model call with max_tokens = the window, strategy "last", the system prompt
  kept, starting on a human message, the approximate token counter.

The session's OpenAI chat messages become LangChain messages (SystemMessage, HumanMessage,
AIMessage with tool_calls, ToolMessage) once, before timing. Before every assistant message of
the trace — every model call — the driver calls, and times:

- `middleware.before_model(state, runtime)` on the agent state the middleware has been keeping
  (when it returns an update, the update is applied the way LangGraph's `add_messages` reducer
  does — remove all, then the summary and the kept messages — outside the timed region);
- `trim_messages(history, ...)` on everything before the call.

A middleware step "compacts" when it returned an update. Figures: p50 / p99 of the steps that
did not compact, the mean of those that did, per run; the median over runs. `trim_messages`
never keeps state, so all its steps count as quiet.

Usage: langchain_context.py TRACE [--window 16000] [--runs 3] [--trim-runs 1]
Prints one JSON object on stdout.
"""
import argparse
import json
import logging
import warnings
from importlib.metadata import version

from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage, trim_messages
from langchain_core.messages.utils import count_tokens_approximately

import common

SUMMARY_TEXT = "a summary sentence of moderate length " * 40
KEEP_MESSAGES = 20


def to_langchain(message):
    role = message["role"]
    text = message.get("content") or ""
    if role == "system":
        return SystemMessage(content=text)
    if role == "user":
        return HumanMessage(content=text)
    if role == "assistant":
        calls = []
        for call in message.get("tool_calls") or []:
            function = call["function"]
            try:
                args = json.loads(function.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = {}
            calls.append({"name": function["name"], "args": args, "id": call["id"], "type": "tool_call"})
        return AIMessage(content=text, tool_calls=calls)
    return ToolMessage(content=text, tool_call_id=message.get("tool_call_id") or "")


def middleware_run(messages, window):
    model = FakeListChatModel(responses=[SUMMARY_TEXT])
    middleware = SummarizationMiddleware(model=model, trigger=("tokens", int(0.8 * window)), keep=("messages", KEEP_MESSAGES))
    state_messages = []
    quiet, busy, series = [], [], []
    for message in messages:
        if message.type == "ai":
            state = {"messages": state_messages}
            started = common.now_us()
            update = middleware.before_model(state, None)
            took = common.now_us() - started
            if update:
                # LangGraph's add_messages: RemoveMessage(REMOVE_ALL) clears, the rest is appended.
                state_messages = [m for m in update["messages"] if not isinstance(m, RemoveMessage)]
                busy.append(took)
            else:
                quiet.append(took)
            series.append(took)
        state_messages.append(message)
    run = common.summarize_run(quiet, busy)
    run.update(common.first_last(series))
    return run


def trim_run(messages, window):
    steps, history = [], []
    for message in messages:
        if message.type == "ai":
            started = common.now_us()
            trim_messages(
                history,
                max_tokens=window,
                token_counter=count_tokens_approximately,
                strategy="last",
                include_system=True,
                start_on="human",
            )
            steps.append(common.now_us() - started)
        history.append(message)
    run = common.summarize_run(steps, [])
    run.update(common.first_last(steps))
    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--window", type=int, default=16000)
    parser.add_argument("--runs", type=int, default=3)
    # trim_messages costs O(history) per step (seconds per run at 16k): one run is enough to
    # show its p50 and its growth, and keeps bench/run within its time budget.
    parser.add_argument("--trim-runs", type=int, default=1)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")

    raw = common.load_concat_session(args.trace)
    messages = [to_langchain(m) for m in raw]
    middleware = common.combine_runs([middleware_run(messages, args.window) for _ in range(args.runs)])
    trim = common.combine_runs([trim_run(messages, args.window) for _ in range(args.trim_runs)])
    common.emit({
        "peer": "langchain",
        "package": "langchain",
        "version": version("langchain"),
        "core_version": version("langchain-core"),
        "window": args.window,
        "messages": len(messages),
        "steps": sum(1 for m in messages if m.type == "ai"),
        "variants": {
            "summarization-middleware": middleware | {
                "timed": "SummarizationMiddleware.before_model() before every model call",
                "config": {"trigger_tokens": int(0.8 * args.window), "keep_messages": KEEP_MESSAGES},
            },
            "trim_messages": trim | {
                "timed": "trim_messages(whole history) before every model call",
                "config": {"max_tokens": args.window, "strategy": "last"},
            },
        },
    })


if __name__ == "__main__":
    main()

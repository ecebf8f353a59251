#!/usr/bin/env python3
"""ctxkeeper called from Python, timed in the same process as the Python peers, on the same input.

What runs, one after the other in this one interpreter, on the concatenated tau-bench session
(`common.load_concat_session`, the same OpenAI chat message dicts every driver starts from):

- ctxkeeper: a `ctxkeeper_engine.ContextManager` (the wheel crates/ctxkeeper-py builds; bench/run
  installs the release wheel into this venv) with the `default` preset and the window. Before
  every assistant message of the trace — every model call — the driver calls, and times,
  `manager.prepare(messages_since_the_previous_call)` and reads `prepared.messages` (the list a
  caller sends): the Python boundary both ways is inside the timed region (the dicts going in,
  the request's list coming out). Archive writes go to a scratch directory; the summarizer is
  the extractive one (no model).
- LangChain's `SummarizationMiddleware.before_model` and AgentScope's `Agent.compress_context`,
  run by their own drivers' functions (`langchain_context.middleware_run`,
  `agentscope_compress.one_run`) exactly as in bench/peers/*.py: stub models that answer at
  once, so only the peers' own code is timed.

Figures per system: p50 / p99 of quiet steps (no compaction), p50 / p99 of all steps, the mean
of compacting steps; medians over runs. `ratio_*` = the peer's quiet p50 over ctxkeeper's.

Usage: inprocess.py TRACE [--window 16000] [--runs 3] [--only ctxkeeper]. Prints one JSON object
on stdout; `--only ctxkeeper` times ctxkeeper alone (no peer imported: a quick loop while working on
the wheel).
"""
import argparse
import asyncio
import logging
import tempfile
import warnings
from importlib.metadata import version

import common


def ctxkeeper_run(messages, window, preset="default"):
    import ctxkeeper_engine as ck

    with tempfile.TemporaryDirectory() as workspace:
        manager = ck.ContextManager(preset, model="gpt-4o", window=window, workspace=workspace)
        quiet, busy, series = [], [], []
        pending = []
        for message in messages:
            if message["role"] == "assistant":
                started = common.now_us()
                prepared = manager.prepare(pending)
                sent = prepared.messages
                took = common.now_us() - started
                assert sent
                (busy if prepared.compacted else quiet).append(took)
                series.append(took)
                pending = []
            pending.append(message)
        run = common.summarize_run(quiet, busy)
        run.update(common.first_last(series))
        run["compactions"] = manager.stats()["compactions"]
        return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--window", type=int, default=16000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=["ctxkeeper"], help="time this system alone")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")

    if args.only == "ctxkeeper":
        raw = common.load_concat_session(args.trace)
        ctxkeeper = common.combine_runs([ctxkeeper_run(raw, args.window) for _ in range(args.runs)])
        common.emit({
            "window": args.window,
            "messages": len(raw),
            "versions": {"ctxkeeper-engine": version("ctxkeeper-engine")},
            "systems": {"ctxkeeper-python": ctxkeeper},
        })
        return

    import agentscope
    import agentscope_compress
    import langchain_context

    raw = common.load_concat_session(args.trace)
    ctxkeeper = common.combine_runs([ctxkeeper_run(raw, args.window) for _ in range(args.runs)])
    lc_messages = [langchain_context.to_langchain(m) for m in raw]
    langchain = common.combine_runs([langchain_context.middleware_run(lc_messages, args.window) for _ in range(args.runs)])
    system_prompt = next((m.get("content") or "" for m in raw if m["role"] == "system"), "")
    agentscope_runs = [asyncio.run(agentscope_compress.one_run(raw, system_prompt, [], args.window)) for _ in range(args.runs)]
    agentscope_result = common.combine_runs(agentscope_runs)
    base = ctxkeeper["quiet_p50_us"]
    common.emit({
        "window": args.window,
        "messages": len(raw),
        "steps": sum(1 for m in raw if m["role"] == "assistant"),
        "versions": {
            "ctxkeeper-engine": version("ctxkeeper-engine"),
            "langchain": version("langchain"),
            "agentscope": agentscope.__version__,
        },
        "systems": {
            "ctxkeeper-python": ctxkeeper | {"timed": "ContextManager.prepare(new messages) + prepared.messages"},
            "langchain-summarization-middleware": langchain | {
                "timed": "SummarizationMiddleware.before_model()",
                "ratio_quiet_p50": langchain["quiet_p50_us"] / base,
                "ratio_all_p50": langchain["all_p50_us"] / ctxkeeper["all_p50_us"],
            },
            "agentscope-compress-context": agentscope_result | {
                "timed": "Agent.compress_context() (no tool schemas)",
                "ratio_quiet_p50": agentscope_result["quiet_p50_us"] / base,
                "ratio_all_p50": agentscope_result["all_p50_us"] / ctxkeeper["all_p50_us"],
            },
        },
    })


if __name__ == "__main__":
    main()

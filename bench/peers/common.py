"""What the peer drivers share: the concatenated tau-bench session, the tool schemas an agent
would declare for it, percentiles, and the JSON result they print.

The session is built the way `ctxkeeper replay --concat` builds it: the 200 task runs of the
trace one after another, every system prompt after the first dropped when it repeats the first
one verbatim. Every assistant message is one model call whose input is everything before it.
"""
import json
import math
import statistics
import sys
import time


def load_concat_session(path):
    """The concatenated session as OpenAI chat message dicts."""
    with open(path) as f:
        tasks = json.load(f)
    messages = []
    first_system = None
    for index, task in enumerate(tasks):
        for message in task["traj"]:
            if message.get("role") == "system":
                text = message.get("content") or ""
                if first_system is None:
                    first_system = text
                elif index > 0 and text == first_system:
                    continue
            messages.append(message)
    return messages


def infer_tool_schemas(messages):
    """JSON schemas for every tool the session calls, inferred from the calls' arguments.

    tau-bench logs do not carry the agent's tool declarations; an agent framework sends them on
    every call, so drivers that want to time that cost use these stand-ins (one property per
    argument name seen, typed from the first value seen).
    """
    kinds = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}
    tools = {}
    for message in messages:
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            name = function.get("name")
            try:
                args = json.loads(function.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = {}
            schema = tools.setdefault(name, {"type": "object", "properties": {}, "required": []})
            for key, value in args.items() if isinstance(args, dict) else []:
                if key not in schema["properties"]:
                    schema["properties"][key] = {
                        "type": kinds.get(type(value), "string"),
                        "description": f"The {key.replace('_', ' ')}.",
                    }
                    schema["required"].append(key)
    return [
        {"name": name, "description": f"The {name.replace('_', ' ')} tool of the airline domain.", "parameters": schema}
        for name, schema in sorted(tools.items())
    ]


def percentile(values, q):
    """The same nearest-rank percentile ctxkeeper's replay reports (rank = ceil(q * n))."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = min(max(math.ceil(q * len(ordered)), 1), len(ordered))
    return ordered[rank - 1]


def summarize_run(quiet, busy):
    """Per-run figures in microseconds: quiet steps (no compaction) and compacting steps."""
    steps = quiet + busy
    return {
        "quiet_steps": len(quiet),
        "compacting_steps": len(busy),
        "quiet_p50_us": percentile(quiet, 0.5),
        "quiet_p99_us": percentile(quiet, 0.99),
        "compacting_mean_us": statistics.fmean(busy) if busy else 0.0,
        "all_p50_us": percentile(steps, 0.5),
        "all_p99_us": percentile(steps, 0.99),
    }


def combine_runs(runs):
    """The median over runs of every per-run figure, plus the runs themselves."""
    keys = [k for k in runs[0] if isinstance(runs[0][k], (int, float)) and not isinstance(runs[0][k], bool)]
    out = {key: statistics.median(run[key] for run in runs) for key in keys}
    out["runs"] = runs
    return out


def first_last(series_us, n=500):
    """p50 of the first and last `n` steps: does the cost grow with history?"""
    return {
        "first_500_p50_us": percentile(series_us[:n], 0.5),
        "last_500_p50_us": percentile(series_us[-n:], 0.5),
    }


def now_us():
    return time.perf_counter_ns() / 1e3


def emit(result):
    json.dump(result, sys.stdout, indent=2)
    print()

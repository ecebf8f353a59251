#!/usr/bin/env python3
"""Writes examples/demo-trace.json: a small, deterministic coding-agent session.

The session is an OpenAI Chat Completions request body (model, tools, messages): an agent
fixes a rounding bug in an invoicing library, reading files, grepping, running the test suite
and editing code. Tool outputs are large enough (file listings, source files, test logs) that
the history outgrows a 16k window about half-way through, which is what `ctxkeeper replay`
is for. Everything is generated here; run this script again to reproduce the file exactly.
"""
import json
import os
import random

rng = random.Random(20261122)
MODULES = ["invoice", "tax", "currency", "ledger", "discount", "report", "customer", "export"]


def source_file(name, lines=120):
    out = [f'"""{name}.py: part of the invoicing library."""', "from decimal import Decimal, ROUND_HALF_UP", ""]
    for i in range(lines // 6):
        fn = f"{name}_{rng.choice(['total', 'line', 'rate', 'apply', 'format', 'check'])}_{i}"
        out += [
            f"def {fn}(amount, rate=Decimal('0.{rng.randint(10, 99)}')):",
            f'    """Compute the {name} {i} amount for one invoice line."""',
            "    value = Decimal(amount) * rate",
            "    return value.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP)" if i % 5 else "    return round(float(value), 2)  # float rounding",
            "",
            "",
        ]
    return "\n".join(f"{n + 1:4d}  {line}" for n, line in enumerate(out))


def test_log(failures):
    lines = ["============================= test session starts ==============================",
             "platform linux -- Python 3.11.7, pytest-8.3.3", "collected 212 items", ""]
    for m in MODULES:
        dots = "".join("F" if (m, k) in failures else "." for k in range(26))
        lines.append(f"tests/test_{m}.py {dots}")
    for (m, k) in sorted(failures):
        lines += ["", f"_________________________ test_{m}_rounding_{k} _________________________", "",
                  f"    def test_{m}_rounding_{k}():", f"        assert {m}.{m}_total_{k}('10.005') == Decimal('10.01')",
                  "E       AssertionError: assert 10.0 == Decimal('10.01')",
                  f"E        +  where 10.0 = <function {m}_total_{k}>('10.005')", "",
                  f"tests/test_{m}.py:{40 + k}: AssertionError"]
    lines.append(f"=========== {len(failures)} failed, {208 - len(failures) + 4} passed in 3.{rng.randint(10, 99)}s ===========")
    return "\n".join(lines)


tools = [
    {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": props, "required": list(props)}}}
    for name, desc, props in [
        ("read_file", "Read a file of the repository with line numbers.", {"path": {"type": "string"}}),
        ("grep", "Search the repository for a regular expression.", {"pattern": {"type": "string"}}),
        ("run_tests", "Run the test suite (optionally one file) and return pytest's output.", {"target": {"type": "string"}}),
        ("edit_file", "Replace one exact snippet of a file by another.", {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}}),
    ]
]

messages = [
    {"role": "system", "content": "You are a careful software engineer working in the repository /repo. "
     "Use the tools to inspect and change code. Run the tests before you say you are done."},
    {"role": "user", "content": "Invoices are off by a cent on some lines: 10.005 becomes 10.00 instead of 10.01. "
     "Please find every place that rounds money with floats and fix it, then make the test suite pass."},
]
call_no = 0


def call(name, args, output, thought=""):
    global call_no
    call_no += 1
    cid = f"call_{call_no:03d}"
    messages.append({"role": "assistant", "content": thought or None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]})
    messages.append({"role": "tool", "tool_call_id": cid, "content": output})


failures = {(m, k) for m in MODULES for k in range(26) if rng.random() < 0.06}
call("run_tests", {"target": ""}, test_log(failures), "Let me first see which tests fail.")
call("grep", {"pattern": "round\\(float"}, "\n".join(
    f"src/{m}.py:{6 * k + 7}:    return round(float(value), 2)  # float rounding"
    for m in MODULES for k in range(0, 20, 5)), "The failures all involve rounding; search for float rounding.")
for m in MODULES:
    call("read_file", {"path": f"src/{m}.py"}, source_file(m), f"Reading src/{m}.py to see the rounding helpers.")
    for k in range(0, 20, 5):
        call("edit_file", {"path": f"src/{m}.py", "old": "    return round(float(value), 2)  # float rounding",
                           "new": "    return value.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP)"},
             f"Edited src/{m}.py: 1 replacement at line {6 * k + 7}.")
    fixed = {f for f in failures if f[0] != m}
    failures = fixed
    call("run_tests", {"target": f"tests/test_{m}.py"}, test_log({f for f in failures if f[0] == m}),
         f"Run the {m} tests again.")
call("run_tests", {"target": ""}, test_log(set()), "All modules are edited; run the whole suite.")
messages.append({"role": "assistant", "content": "Fixed: every money amount is now rounded with Decimal.quantize "
                 "and ROUND_HALF_UP instead of float rounding (32 places in 8 modules). The full suite passes: 212 tests."})

body = {"model": "gpt-4o", "tools": tools, "messages": messages}
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo-trace.json")
with open(path, "w", encoding="utf-8") as f:
    json.dump(body, f, indent=1)
    f.write("\n")
print(f"wrote {path}: {len(messages)} messages, {call_no} tool calls")

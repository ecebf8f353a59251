"""OpenAI Responses server-side compaction through `ctxkeeper serve`, driven by the official
openai client as a Codex-style agent drives it: the request's input ends with
`{"type": "compaction_trigger"}` and the answer must hold exactly one `compaction` item.

In front of an OpenAI-compatible upstream that refuses compaction items (the mock without
`--native-compaction`), the gateway answers the trigger itself and expands its own item when
the client sends it back; in front of a provider that compacts (`--native-compaction`), it
forwards both untouched."""

from __future__ import annotations

import json

import openai

from conftest import start_mock_upstream
from gateway_support import WORDS, start_gateway

TASK = "Fix the rounding bug in src/invoice.rs and keep the public API unchanged."


def history(rounds: int) -> list[dict]:
    items: list[dict] = [{"role": "user", "content": TASK}]
    for i in range(rounds):
        call = f"call_{i}"
        items.append(
            {
                "type": "function_call",
                "call_id": call,
                "name": "shell",
                "arguments": json.dumps({"cmd": f"cat src/module_{i}.rs"}),
            }
        )
        text = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(300))
        items.append({"type": "function_call_output", "call_id": call, "output": text})
    return items


def run(tmp_path, mock_args: tuple[str, ...], gateway_args: tuple[str, ...], drive) -> list[dict]:
    mock = start_mock_upstream(128_000, *mock_args)
    try:
        gateway = start_gateway(mock.url, tmp_path, "--summarizer", "extractive", *gateway_args)
        try:
            drive(openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-codex-like", max_retries=0))
        finally:
            assert gateway.stop() == 0, gateway.logs()
        return mock.requests()
    finally:
        mock.process.stop()


def test_the_gateway_answers_the_trigger_its_upstream_refuses(tmp_path):
    answers: dict = {}

    def drive(client: openai.OpenAI) -> None:
        first = client.responses.create(model="gpt-4o", input=history(6))
        assert first.output
        compacted = client.responses.create(
            model="gpt-4o", input=[*history(6), {"type": "compaction_trigger"}]
        )
        items = [item.model_dump() for item in compacted.output]
        assert len(items) == 1, items
        assert items[0]["type"] == "compaction"
        answers["item"] = items[0]
        # Carrying on from the item: the upstream must accept the request.
        carried = client.responses.create(
            model="gpt-4o",
            input=[
                {"role": "user", "content": TASK},
                {"type": "compaction", "id": items[0]["id"], "encrypted_content": items[0]["encrypted_content"]},
                {"role": "user", "content": "Now run the tests."},
            ],
        )
        assert carried.output
        # Streamed: one compaction item among the events, then completion.
        done = []
        with client.responses.stream(
            model="gpt-4o", input=[*history(7), {"type": "compaction_trigger"}]
        ) as stream:
            for event in stream:
                if event.type == "response.output_item.done":
                    done.append(event.item.model_dump())
        assert [item["type"] for item in done] == ["compaction"]

    requests = run(tmp_path, (), (), drive)
    assert all(r["status"] == 200 for r in requests), [r["status"] for r in requests]
    bodies = [json.dumps(r["body"]) for r in requests]
    assert not any("compaction_trigger" in body for body in bodies)
    assert not any('"type": "compaction"' in body for body in bodies)
    # What the item stood for reached the upstream as text: the user's task and the files.
    assert TASK in bodies[-1] and "src/module_5.rs" in bodies[-1]


def test_a_provider_that_compacts_gets_the_trigger_untouched(tmp_path):
    def drive(client: openai.OpenAI) -> None:
        compacted = client.responses.create(
            model="gpt-4o", input=[*history(3), {"type": "compaction_trigger"}]
        )
        items = [item.model_dump() for item in compacted.output]
        assert len(items) == 1 and items[0]["type"] == "compaction"
        assert items[0]["encrypted_content"].startswith("mock-compaction-")

    requests = run(
        tmp_path, ("--native-compaction",), ("--responses-compaction", "forward"), drive
    )
    assert requests[-1]["body"]["input"][-1] == {"type": "compaction_trigger"}

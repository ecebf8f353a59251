"""`ctxkeeper serve` driven by the official openai and anthropic clients, in front of the mock
upstream: chat (plain, streamed, tool calls, streamed tool calls), the Responses API, Anthropic
messages (plain and streamed, tool use round trips both ways), and a 200-step tool-calling
agent loop that overflows an 8k window without the gateway and completes through it."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from conftest import start_mock_upstream
from gateway_support import TOOLS, WORDS, start_gateway, write_config




def tool_output(step: int, size: int = 1500) -> str:
    """1-2 KB of varied, deterministic text, like a file read or a test log."""
    out, i = [], step
    while sum(len(w) + 1 for w in out) < size:
        out.append(WORDS[i % len(WORDS)])
        i = i * 31 + 7
    return f"step {step}: " + " ".join(out)


@pytest.fixture
def mock(mock_upstream):
    return mock_upstream


@pytest.fixture
def gateway(mock, tmp_path):
    process = start_gateway(mock.url, tmp_path)
    yield process
    assert process.stop() == 0, "graceful shutdown exits 0:\n" + process.logs()
    assert "sk-" not in process.logs(), "API keys never reach the logs"


def openai_client(gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-test-python", max_retries=0)


def anthropic_client(gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-python", max_retries=0)


def test_openai_chat_non_streaming(gateway):
    raw = openai_client(gateway).chat.completions.with_raw_response.create(
        model="gpt-4o",
        messages=[
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "Say hello."},
        ],
        extra_headers={"x-ctxkeeper-session": "py-chat"},
    )
    assert raw.headers["x-ctxkeeper-session"] == "py-chat"
    assert raw.headers["x-ctxkeeper-compacted"] == "false"
    assert float(raw.headers["x-ctxkeeper-budget-used"]) > 0
    completion = raw.parse()
    assert completion.choices[0].message.content.startswith("mock reply")
    assert completion.usage.prompt_tokens > 0


def test_openai_chat_streaming(gateway):
    stream = openai_client(gateway).chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "Stream a greeting."}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage = "", None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
        if chunk.usage:
            usage = chunk.usage
    assert text.startswith("mock reply")
    assert usage is not None and usage.prompt_tokens > 0


def test_openai_tool_calls_round_trip(gateway, mock):
    client = openai_client(gateway)
    messages = [{"role": "user", "content": "Read src/main.rs."}]
    first = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    assert call.function.name == "read_file"
    messages.append(first.choices[0].message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": tool_output(0)})
    second = client.chat.completions.create(model="gpt-4o", messages=messages, tools=TOOLS)
    assert second.choices[0].message.tool_calls
    assert [r["status"] for r in mock.requests()] == [200, 200]


def test_responses_api(gateway):
    client = openai_client(gateway)
    response = client.responses.create(
        model="gpt-4o",
        instructions="Be terse.",
        input=[{"role": "user", "content": "Say hello."}],
    )
    assert response.output_text.startswith("mock reply")
    events = list(
        client.responses.create(
            model="gpt-4o", input=[{"role": "user", "content": "Stream it."}], stream=True
        )
    )
    assert events[-1].type == "response.completed"


def test_anthropic_messages(gateway, mock):
    client = anthropic_client(gateway)
    message = client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=64,
        system="Be terse.",
        messages=[{"role": "user", "content": "Say hello."}],
        extra_headers={"anthropic-beta": "test-beta-2025"},
    )
    assert message.content[0].text.startswith("mock reply")
    assert message.usage.input_tokens > 0
    received = mock.requests()[-1]
    headers = {k.lower(): v for k, v in received["headers"]}
    # Newer SDKs send the key as a bearer token, older ones as x-api-key: either goes as sent.
    assert "sk-ant-python" in (headers.get("x-api-key"), headers.get("authorization", "")[7:])
    assert headers["anthropic-beta"] == "test-beta-2025"
    assert "anthropic-version" in headers


def test_anthropic_messages_streaming(gateway):
    client = anthropic_client(gateway)
    with client.messages.stream(
        model="claude-sonnet-4-6",
        max_tokens=64,
        messages=[{"role": "user", "content": "Stream a greeting."}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.startswith("mock reply")
    assert final.usage.input_tokens > 0


def streamed_tool_calls(stream) -> tuple[dict[int, dict], str | None, int]:
    """Assembles the tool calls of a streamed chat completion as a client must: by index, id
    and name from the first delta, arguments concatenated. Returns the calls, the finish
    reason and how many argument fragments arrived."""
    calls: dict[int, dict] = {}
    finish, fragments = None, 0
    for chunk in stream:
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": None, "name": "", "arguments": ""})
                if delta.id:
                    call["id"] = delta.id
                if delta.function and delta.function.name:
                    call["name"] += delta.function.name
                if delta.function and delta.function.arguments:
                    call["arguments"] += delta.function.arguments
                    fragments += 1
            if choice.finish_reason:
                finish = choice.finish_reason
    return calls, finish, fragments


def test_openai_streamed_tool_call_round_trip(gateway, mock):
    client = openai_client(gateway)
    headers = {"x-ctxkeeper-session": "py-streamed-tools"}
    messages = [{"role": "user", "content": "Read src/main.rs."}]
    calls, finish, fragments = streamed_tool_calls(
        client.chat.completions.create(
            model="gpt-4o", messages=messages, tools=TOOLS, stream=True, extra_headers=headers
        )
    )
    assert finish == "tool_calls"
    assert list(calls) == [0], calls
    call = calls[0]
    assert call["name"] == "read_file"
    assert call["id"].startswith("call_")
    # The arguments came in several fragments and make one JSON object once joined.
    assert fragments > 1
    assert json.loads(call["arguments"]) == {"step": 0}

    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
            ],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call["id"], "content": tool_output(0)})
    calls, finish, _ = streamed_tool_calls(
        client.chat.completions.create(
            model="gpt-4o", messages=messages, tools=TOOLS, stream=True, extra_headers=headers
        )
    )
    assert finish == "tool_calls"
    # The mock counts the tool results it received: the result went upstream with its call.
    assert json.loads(calls[0]["arguments"]) == {"step": 1}
    assert calls[0]["id"] != call["id"]
    received = mock.requests()
    assert [r["status"] for r in received] == [200, 200]
    forwarded = received[-1]["body"]["messages"]
    assert forwarded[1]["tool_calls"][0]["id"] == call["id"]
    assert forwarded[1]["tool_calls"][0]["function"]["arguments"] == call["arguments"]
    assert forwarded[2] == {"role": "tool", "tool_call_id": call["id"], "content": tool_output(0)}


ANTHROPIC_TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file of the repository",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    }
]


def tool_use_turn(block) -> dict:
    """The assistant turn that carries a tool_use block, as the client sends it back."""
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}],
    }


def tool_result_turn(tool_use_id: str, text: str) -> dict:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": text}],
    }


def test_anthropic_tool_use_round_trip(gateway, mock):
    client = anthropic_client(gateway)
    headers = {"x-ctxkeeper-session": "py-anthropic-tools"}
    messages = [{"role": "user", "content": "Read src/main.rs and say what it does."}]
    first = client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=256,
        tools=ANTHROPIC_TOOLS,
        messages=messages,
        extra_headers=headers,
    )
    assert first.stop_reason == "tool_use"
    [call] = [block for block in first.content if block.type == "tool_use"]
    assert call.name == "read_file"
    assert call.id.startswith("toolu_")
    assert call.input == {"step": 0}

    messages += [tool_use_turn(call), tool_result_turn(call.id, tool_output(1))]
    second = client.messages.create(
        model="claude-sonnet-4-6",
        max_tokens=256,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "none"},
        messages=messages,
        extra_headers=headers,
    )
    assert second.stop_reason == "end_turn"
    assert [block.type for block in second.content] == ["text"]
    # The mock answers "mock reply <messages it received>": the whole round trip arrived.
    assert second.content[0].text == "mock reply 3"
    # The first request is an unchanged prefix of the second: the (simulated) prompt cache
    # serves all of it.
    assert second.usage.cache_read_input_tokens == first.usage.input_tokens
    assert second.usage.input_tokens > 0

    received = mock.requests()
    assert [r["status"] for r in received] == [200, 200]
    forwarded = received[-1]["body"]["messages"]
    assert forwarded[1]["content"][0] == {
        "type": "tool_use",
        "id": call.id,
        "name": "read_file",
        "input": {"step": 0},
    }
    assert forwarded[2]["content"][0]["tool_use_id"] == call.id
    assert forwarded[2]["content"][0]["content"] == tool_output(1)


def test_anthropic_streamed_tool_use_round_trip(gateway, mock):
    client = anthropic_client(gateway)
    headers = {"x-ctxkeeper-session": "py-anthropic-streamed-tools"}
    messages = [{"role": "user", "content": "Read src/lib.rs."}]
    with client.messages.stream(
        model="claude-sonnet-4-6",
        max_tokens=256,
        tools=ANTHROPIC_TOOLS,
        messages=messages,
        extra_headers=headers,
    ) as stream:
        events = list(stream)
        first = stream.get_final_message()
    kinds = [event.type for event in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
    # The input arrived as partial JSON, and the SDK assembled it.
    partial = "".join(event.partial_json for event in events if event.type == "input_json")
    assert json.loads(partial) == {"step": 0}
    assert first.stop_reason == "tool_use"
    [call] = [block for block in first.content if block.type == "tool_use"]
    assert (call.name, call.input) == ("read_file", {"step": 0})
    assert call.id.startswith("toolu_")

    messages += [tool_use_turn(call), tool_result_turn(call.id, tool_output(2))]
    with client.messages.stream(
        model="claude-sonnet-4-6",
        max_tokens=256,
        tools=ANTHROPIC_TOOLS,
        messages=messages,
        extra_headers=headers,
    ) as stream:
        second = stream.get_final_message()
    [again] = [block for block in second.content if block.type == "tool_use"]
    # The mock counts the tool results it received: one, answering the first call.
    assert again.input == {"step": 1}
    assert again.id != call.id

    with client.messages.stream(
        model="claude-sonnet-4-6",
        max_tokens=256,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "none"},
        messages=messages,
        extra_headers=headers,
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "mock reply 3"
    assert final.stop_reason == "end_turn"

    received = mock.requests()
    assert [r["status"] for r in received] == [200, 200, 200]
    forwarded = received[-1]["body"]["messages"]
    assert forwarded[1]["content"][0]["id"] == call.id
    assert forwarded[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": call.id,
        "content": tool_output(2),
    }


def run_agent(client: openai.OpenAI, steps: int, session: str | None = None) -> int:
    """A tool-calling agent loop: every model call asks for a tool, every tool answers with
    1-2 KB of text. Returns the number of completed steps."""
    messages = [
        {"role": "system", "content": "You are a coding agent. Use read_file to inspect files."},
        {"role": "user", "content": "Find where invoice totals are rounded and fix it."},
    ]
    headers = {"x-ctxkeeper-session": session} if session else {}
    for step in range(steps):
        reply = client.chat.completions.create(
            model="mock-8k", messages=messages, tools=TOOLS, max_tokens=256, extra_headers=headers
        )
        message = reply.choices[0].message
        assert message.tool_calls, f"step {step}: the mock always calls a tool"
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": tool_output(step, 1000 + step * 5)}
            )
    return steps


def test_agent_loop_of_200_steps_fits_an_8k_window_only_through_the_gateway(tmp_path):
    mock = start_mock_upstream(window=8192)
    try:
        direct = openai.OpenAI(base_url=f"{mock.url}/v1", api_key="sk-direct", max_retries=0)
        with pytest.raises(openai.BadRequestError) as overflow:
            run_agent(direct, 200)
        assert "context" in str(overflow.value).lower()

        config = write_config(
            tmp_path / "ctxkeeper.toml",
            '[models."mock-8k"]\ncontext_window = 8192\nmax_output = 1024\ntokenizer = "o200k_base"\n',
        )
        gateway = start_gateway(mock.url, tmp_path, "--config", str(config))
        try:
            before = len(mock.requests())
            assert run_agent(openai_client(gateway), 200, session="agent-200") == 200
            through = mock.requests()[before:]
            assert len(through) >= 200
            statuses = {r["status"] for r in through}
            assert statuses == {200}, f"every forwarded request was valid, got {statuses}"
            peak = max(r["input_tokens"] for r in through)
            assert peak + 256 <= 8192
        finally:
            assert gateway.stop() == 0, gateway.logs()
    finally:
        mock.process.stop()

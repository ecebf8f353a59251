"""The mock upstream driven directly by the official openai and anthropic clients: if these
SDKs parse its answers, streams and errors, the gateway's end-to-end tests against it mean
something."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import anthropic
import openai
import pytest

CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
ANTHROPIC_TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
LONG = "lorem ipsum dolor sit amet " * 400


def oai(mock) -> openai.OpenAI:
    return openai.OpenAI(base_url=mock.openai_base_url, api_key="sk-py-openai", max_retries=0)


def ant(mock) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=mock.anthropic_base_url, api_key="sk-ant-py", max_retries=0)


# ---- OpenAI Chat Completions ---------------------------------------------------------------


def test_chat_non_streaming(mock_upstream):
    completion = oai(mock_upstream).chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}],
    )
    assert completion.choices[0].message.content == "mock reply 2"
    assert completion.choices[0].finish_reason == "stop"
    usage = completion.usage
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    [recorded] = mock_upstream.requests()
    assert recorded["path"] == "/v1/chat/completions"
    headers = {name: value for name, value in recorded["headers"]}
    assert headers["authorization"] == "Bearer sk-py-openai", "the client's key arrives untouched"
    assert recorded["input_tokens"] == usage.prompt_tokens


def test_chat_streaming_with_usage(mock_upstream):
    stream = oai(mock_upstream).chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "mock reply 1"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens > 0


def test_chat_tool_call_round_trip(mock_upstream):
    client = oai(mock_upstream)
    messages = [{"role": "user", "content": "Read the README"}]
    for step in range(3):
        completion = client.chat.completions.create(model="gpt-4o", messages=messages, tools=CHAT_TOOLS)
        choice = completion.choices[0]
        assert choice.finish_reason == "tool_calls"
        [call] = choice.message.tool_calls
        assert call.function.name == "read_file"
        assert json.loads(call.function.arguments) == {"step": step}
        messages.append(choice.message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": f"contents {step}"})
    ids = [m["tool_calls"][0]["id"] for m in messages if m.get("tool_calls")]
    assert len(set(ids)) == 3, "every call has its own id"
    final = client.chat.completions.create(
        model="gpt-4o", messages=messages, tools=CHAT_TOOLS, tool_choice="none"
    )
    assert final.choices[0].message.content == f"mock reply {len(messages)}"


def test_chat_streamed_tool_call_accumulates(mock_upstream):
    with oai(mock_upstream).chat.completions.stream(
        model="gpt-4o", messages=[{"role": "user", "content": "go"}], tools=CHAT_TOOLS
    ) as stream:
        final = stream.get_final_completion()
    [call] = final.choices[0].message.tool_calls
    assert call.function.name == "read_file"
    assert json.loads(call.function.arguments) == {"step": 0}


def test_chat_overflow_is_a_bad_request_with_the_code(mock_upstream):
    mock_upstream.set_window(1000)
    with pytest.raises(openai.BadRequestError) as caught:
        oai(mock_upstream).chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": LONG}]
        )
    assert caught.value.status_code == 400
    assert caught.value.code == "context_length_exceeded"
    assert "maximum context length is 1000 tokens" in caught.value.message


def test_chat_pairing_error_is_a_bad_request(mock_upstream):
    with pytest.raises(openai.BadRequestError) as caught:
        oai(mock_upstream).chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "x", "content": "1"}],
        )
    assert "must be a response to a preceeding message with 'tool_calls'" in caught.value.message


def test_missing_key_is_a_401(mock_upstream):
    request = urllib.request.Request(
        f"{mock_upstream.openai_base_url}/chat/completions",
        data=json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}).encode(),
        headers={"content-type": "application/json"},
    )
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=10)
    assert caught.value.code == 401
    assert json.loads(caught.value.read())["error"]["message"].startswith("You didn't provide an API key")


# ---- OpenAI Responses ----------------------------------------------------------------------


def test_responses_non_streaming(mock_upstream):
    response = oai(mock_upstream).responses.create(model="gpt-4o", input="Hello", instructions="Be terse.")
    assert response.output_text == "mock reply 1"
    assert response.status == "completed"
    assert response.usage.input_tokens > 0
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens


def test_responses_streaming_events_and_final_response(mock_upstream):
    events = list(oai(mock_upstream).responses.create(model="gpt-4o", input="Hello", stream=True))
    types = [event.type for event in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-1] == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "mock reply 1"
    with oai(mock_upstream).responses.stream(model="gpt-4o", input="Hello") as stream:
        final = stream.get_final_response()
    assert final.output_text == "mock reply 1"


def test_responses_function_call_round_trip(mock_upstream):
    client = oai(mock_upstream)
    first = client.responses.create(model="gpt-4o", input="Read it", tools=RESPONSES_TOOLS)
    [call] = [item for item in first.output if item.type == "function_call"]
    assert (call.name, json.loads(call.arguments)) == ("read_file", {"step": 0})
    with client.responses.stream(
        model="gpt-4o",
        tools=RESPONSES_TOOLS,
        input=[
            {"role": "user", "content": "Read it"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "file contents"},
        ],
    ) as stream:
        second = stream.get_final_response()
    [call] = [item for item in second.output if item.type == "function_call"]
    assert json.loads(call.arguments) == {"step": 1}


def test_responses_overflow_non_streaming_and_streaming(mock_upstream):
    mock_upstream.set_window(1000)
    client = oai(mock_upstream)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="gpt-4o", input=LONG)
    assert caught.value.code == "context_length_exceeded"
    # Streaming, the real API has already answered 200: the overflow is an error event.
    with pytest.raises(openai.APIError) as caught:
        list(client.responses.create(model="gpt-4o", input=LONG, stream=True))
    assert "exceeds the context window" in caught.value.message


# ---- Anthropic Messages --------------------------------------------------------------------


def test_anthropic_non_streaming(mock_upstream):
    message = ant(mock_upstream).messages.create(
        model="claude-sonnet-4-6",
        max_tokens=100,
        system="Be terse.",
        messages=[{"role": "user", "content": "Hi"}],
    )
    assert message.content[0].text == "mock reply 1"
    assert message.stop_reason == "end_turn"
    assert message.usage.input_tokens > 0
    headers = {name: value for name, value in mock_upstream.requests()[0]["headers"]}
    # Depending on its version the SDK sends the key as x-api-key or as a bearer token.
    assert headers.get("x-api-key") == "sk-ant-py" or headers.get("authorization") == "Bearer sk-ant-py"
    assert "anthropic-version" in headers


def test_anthropic_streaming(mock_upstream):
    with ant(mock_upstream).messages.stream(
        model="claude-sonnet-4-6", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "mock reply 1"
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens > 0


def test_anthropic_tool_use_round_trip_streamed(mock_upstream):
    client = ant(mock_upstream)
    messages = [{"role": "user", "content": "Read the README"}]
    for step in range(2):
        with client.messages.stream(
            model="claude-sonnet-4-6", max_tokens=200, tools=ANTHROPIC_TOOLS, messages=messages
        ) as stream:
            final = stream.get_final_message()
        assert final.stop_reason == "tool_use"
        [block] = final.content
        assert (block.type, block.name, block.input) == ("tool_use", "read_file", {"step": step})
        messages.append({"role": "assistant", "content": [block.model_dump(exclude_none=True)]})
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "ok"}]}
        )


def test_anthropic_overflow_is_a_bad_request(mock_upstream):
    mock_upstream.set_window(1000)
    with pytest.raises(anthropic.BadRequestError) as caught:
        ant(mock_upstream).messages.create(
            model="claude-sonnet-4-6", max_tokens=100, messages=[{"role": "user", "content": LONG}]
        )
    assert caught.value.status_code == 400
    assert "prompt is too long" in caught.value.message
    assert "> 1000 maximum" in caught.value.message


def test_anthropic_pairing_error_is_a_bad_request(mock_upstream):
    with pytest.raises(anthropic.BadRequestError) as caught:
        ant(mock_upstream).messages.create(
            model="claude-sonnet-4-6",
            max_tokens=100,
            messages=[
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
                {"role": "user", "content": "no result"},
            ],
        )
    assert "`tool_use` ids were found without `tool_result` blocks" in caught.value.message


# ---- the simulated prompt cache ------------------------------------------------------------


def test_a_stable_prefix_is_reported_as_cached(mock_upstream):
    client = oai(mock_upstream)
    messages = [{"role": "system", "content": LONG}, {"role": "user", "content": "one"}]
    first = client.chat.completions.create(model="gpt-4o", messages=messages)
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    messages += [{"role": "assistant", "content": "mock reply 2"}, {"role": "user", "content": "two"}]
    second = client.chat.completions.create(model="gpt-4o", messages=messages)
    assert second.usage.prompt_tokens_details.cached_tokens == first.usage.prompt_tokens

    anthropic_client = ant(mock_upstream)
    request = dict(model="claude-sonnet-4-6", max_tokens=50, system=LONG, messages=[{"role": "user", "content": "q"}])
    cold = anthropic_client.messages.create(**request)
    warm = anthropic_client.messages.create(**request)
    assert cold.usage.cache_read_input_tokens == 0
    assert warm.usage.cache_read_input_tokens == cold.usage.input_tokens

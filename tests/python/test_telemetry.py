"""OpenTelemetry traces from the gateway, received on a local OTLP/HTTP endpoint and decoded
with the official `opentelemetry-proto` package: an agent loop that compacts yields one
`chat {model}` CLIENT span per model call with the GenAI attributes, one `compaction` child
span per compaction with the figures of the session's SSE events, and the trace the client
began (`traceparent`) continued and passed upstream; every MCP tool call at `/mcp` is one
`execute_tool {tool}` SERVER span in its caller's trace; a session whose prompt cache keeps
missing raises `cache_stalled`; a collector that is down changes no response."""

from __future__ import annotations

import asyncio
import copy
import http.server
import json
import os
import threading
import time

import httpx
import openai
import pytest

from conftest import start_mock_upstream
from gateway_support import TOOLS, WORDS, SessionEvents, metric, start_gateway, write_config
from mcp_client import http_session, is_error, structured

try:
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    from opentelemetry.proto.trace.v1 import trace_pb2
except ImportError:
    # A loud skip locally, a failure in CI (scripts/pyenv installs tests/python/requirements.txt).
    if os.environ.get("CI") == "true":
        raise
    pytest.skip(
        "SKIP: opentelemetry-proto is not installed (run scripts/pyenv)", allow_module_level=True
    )

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
TRACESTATE = "agent=step-loop,vendor=x1"
KEY = "sk-telemetry-python"
MODEL_CONFIG = '[models."mock-8k"]\ncontext_window = 8192\nmax_output = 1024\ntokenizer = "o200k_base"\n'


class Collector:
    """A tiny OTLP/HTTP receiver: `POST /v1/traces` with a protobuf
    `ExportTraceServiceRequest`, decoded and kept; the service name of each batch too."""

    def __init__(self):
        self.spans: list[trace_pb2.Span] = []
        self.services: set[str] = set()
        self.requests = 0
        self._lock = threading.Lock()
        collector = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the http.server name)
                body = self.rfile.read(int(self.headers["content-length"]))
                assert self.path == "/v1/traces", self.path
                assert self.headers["content-type"] == "application/x-protobuf"
                request = trace_service_pb2.ExportTraceServiceRequest()
                request.ParseFromString(body)
                with collector._lock:
                    collector.requests += 1
                    for resource_spans in request.resource_spans:
                        for attribute in resource_spans.resource.attributes:
                            if attribute.key == "service.name":
                                collector.services.add(attribute.value.string_value)
                        for scope_spans in resource_spans.scope_spans:
                            collector.spans.extend(scope_spans.spans)
                reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def named(self, predicate) -> list[trace_pb2.Span]:
        with self._lock:
            return [span for span in self.spans if predicate(span)]

    def wait_for(self, predicate, count: int, timeout: float = 20.0) -> list[trace_pb2.Span]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.named(predicate)
            if len(found) >= count:
                return found
            time.sleep(0.05)
        return self.named(predicate)

    def close(self):
        self.server.shutdown()


def attributes(span: trace_pb2.Span) -> dict:
    """A span's attributes as Python values (arrays as lists)."""

    def value(any_value):
        kind = any_value.WhichOneof("value")
        if kind == "array_value":
            return [value(v) for v in any_value.array_value.values]
        return getattr(any_value, kind)

    return {kv.key: value(kv.value) for kv in span.attributes}


def tool_output(step: int, size: int) -> str:
    out, i = [], step
    while sum(len(w) + 1 for w in out) < size:
        out.append(WORDS[i % len(WORDS)])
        i = i * 31 + 7
    return f"step {step}: " + " ".join(out)


def is_call(span) -> bool:
    return span.kind == trace_pb2.Span.SPAN_KIND_CLIENT


def is_compaction(span) -> bool:
    return span.name == "compaction"


@pytest.fixture
def collector():
    running = Collector()
    yield running
    running.close()


@pytest.fixture
def mock():
    running = start_mock_upstream(window=8192)
    yield running
    running.process.stop()


def otel_env(endpoint: str, **more: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_SERVICE_NAME": "ctxkeeper-e2e",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
        **more,
    }


def agent_loop(gateway_url: str, steps: int, session: str) -> list:
    """A tool-calling agent through the gateway, every call sent under the client's trace."""
    client = openai.OpenAI(base_url=f"{gateway_url}/v1", api_key=KEY, max_retries=0)
    headers = {
        "x-ctxkeeper-session": session,
        "traceparent": TRACEPARENT,
        "tracestate": TRACESTATE,
    }
    messages = [
        {"role": "system", "content": "You are a coding agent. Use read_file to inspect files."},
        {"role": "user", "content": "Find where invoice totals are rounded and fix it."},
    ]
    answers = []
    for step in range(steps):
        raw = client.chat.completions.with_raw_response.create(
            model="mock-8k", messages=messages, tools=TOOLS, max_tokens=256, extra_headers=headers
        )
        reply = raw.parse()
        answers.append(raw)
        message = reply.choices[0].message
        assert message.tool_calls, f"step {step}: the mock always calls a tool"
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": tool_output(step, 1000 + step * 5)}
            )
    return answers


def test_an_agent_loop_that_compacts_is_traced_in_the_genai_conventions(tmp_path, mock, collector):
    config = write_config(tmp_path / "ctxkeeper.toml", MODEL_CONFIG)
    gateway = start_gateway(
        mock.url,
        tmp_path,
        "--config",
        str(config),
        "--summarizer",
        "extractive",
        env=otel_env(collector.url),
    )
    session = "otel-agent"
    try:
        events = SessionEvents(gateway.url, session, {"authorization": f"Bearer {KEY}"})
        answers = agent_loop(gateway.url, 40, session)
        compactions = events.wait_for("context_compaction_end")
        settled = [data for name, data in events.settle() if name == "context_compaction_end"]
        assert compactions and settled, "the loop outgrew the 8k window, so the gateway compacted"
        calls = sorted(collector.wait_for(is_call, len(answers)), key=lambda s: s.start_time_unix_nano)
        children = sorted(
            collector.wait_for(is_compaction, len(settled)), key=lambda s: s.start_time_unix_nano
        )
        forwarded = [r for r in mock.requests() if r["path"].endswith("/chat/completions")]
    finally:
        assert gateway.stop() == 0, gateway.logs()

    assert collector.services == {"ctxkeeper-e2e"}
    # One CLIENT span per model call, in the client's trace, under the client's span.
    assert len(calls) == len(answers) == len(forwarded) == 40
    for span, answer, upstream in zip(calls, answers, forwarded):
        attrs = attributes(span)
        assert span.name == "chat mock-8k"
        assert span.trace_id.hex() == CLIENT_TRACE
        assert span.parent_span_id.hex() == CLIENT_SPAN
        assert span.trace_state == TRACESTATE
        assert span.end_time_unix_nano >= span.start_time_unix_nano
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.provider.name"] == "openai"
        assert attrs["gen_ai.request.model"] == "mock-8k"
        assert attrs["gen_ai.conversation.id"] == session
        assert attrs["gen_ai.response.finish_reasons"] == ["tool_calls"]
        usage = answer.parse().usage
        assert attrs["gen_ai.usage.input_tokens"] == usage.prompt_tokens == upstream["input_tokens"]
        assert attrs["gen_ai.usage.output_tokens"] == usage.completion_tokens
        assert attrs["gen_ai.usage.cache_read.input_tokens"] == usage.prompt_tokens_details.cached_tokens
        assert "error.type" not in attrs
        compacted = answer.headers["x-ctxkeeper-compacted"] == "true"
        # The conventions set `gen_ai.conversation.compacted` only when true.
        assert attrs.get("gen_ai.conversation.compacted", False) == compacted
        # The upstream got the client's trace with this call's span as its parent.
        sent = dict(upstream["headers"])
        assert sent["traceparent"] == f"00-{CLIENT_TRACE}-{span.span_id.hex()}-01"
        assert sent["tracestate"] == TRACESTATE
    assert any(attributes(s).get("gen_ai.usage.cache_read.input_tokens", 0) > 0 for s in calls), (
        "the mock's prompt cache served the growing prefix"
    )

    # One compaction span per compaction event, under the call that carried its context, with
    # the event's own figures.
    assert len(children) == len(settled)
    compacted_calls = {s.span_id for s in calls if attributes(s).get("gen_ai.conversation.compacted")}
    for child, event in zip(children, settled):
        attrs = attributes(child)
        assert child.kind == trace_pb2.Span.SPAN_KIND_INTERNAL
        assert child.trace_id.hex() == CLIENT_TRACE
        assert child.parent_span_id in compacted_calls
        assert attrs["ctxkeeper.compaction.trigger"] == event["reason"]
        assert attrs["ctxkeeper.compaction.stages"] == event["stages"]
        for field in ("tokens_before", "tokens_after", "messages_before", "messages_after"):
            assert attrs[f"ctxkeeper.compaction.{field}"] == event[field], field
        assert attrs["ctxkeeper.compaction.tokens_saved"] == event["tokens_before"] - event["tokens_after"]
        assert attrs["ctxkeeper.compaction.summarizer"] == "extractive"
        assert attrs["ctxkeeper.compaction.summary_outcome"] in {"written", "none", "degraded", "extractive"}
        assert attrs["gen_ai.conversation.id"] == session
        if event.get("economics"):
            economics = event["economics"]
            saved = economics["billed_per_step_configured"] - economics["billed_per_step"]
            assert attrs["ctxkeeper.compaction.billed_input_saved_per_step"] == pytest.approx(saved)
    # No message content leaves the gateway unless asked for.
    assert not any("gen_ai.input.messages" in attributes(s) for s in calls)


def test_streamed_answers_end_their_span_with_the_usage(tmp_path, mock, collector):
    import anthropic

    gateway = start_gateway(mock.url, tmp_path, env=otel_env(collector.url))
    try:
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o",
                messages=[{"role": "user", "content": "Stream it."}],
                stream=True,
                stream_options={"include_usage": True},
                extra_headers={"x-ctxkeeper-session": "otel-stream-chat"},
            )
        )
        usage = next(c.usage for c in chunks if c.usage)
        finish = next(ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason)
        claude = anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-telemetry", max_retries=0)
        with claude.messages.stream(
            model="claude-sonnet-4-6",
            max_tokens=64,
            messages=[{"role": "user", "content": "Stream a greeting."}],
            extra_headers={"x-ctxkeeper-session": "otel-stream-messages"},
        ) as stream:
            "".join(stream.text_stream)
            final = stream.get_final_message()
        spans = {attributes(s)["gen_ai.conversation.id"]: s for s in collector.wait_for(is_call, 2)}
    finally:
        assert gateway.stop() == 0, gateway.logs()
    chat = attributes(spans["otel-stream-chat"])
    assert chat["gen_ai.request.stream"] is True
    assert chat["gen_ai.provider.name"] == "openai"
    assert chat["gen_ai.usage.input_tokens"] == usage.prompt_tokens
    assert chat["gen_ai.usage.output_tokens"] == usage.completion_tokens
    assert chat["gen_ai.response.finish_reasons"] == [finish]
    messages = attributes(spans["otel-stream-messages"])
    assert spans["otel-stream-messages"].name == "chat claude-sonnet-4-6"
    assert messages["gen_ai.provider.name"] == "anthropic"
    # Anthropic counts cached tokens apart; the conventions' input count includes them.
    cached = (final.usage.cache_read_input_tokens or 0) + (final.usage.cache_creation_input_tokens or 0)
    assert messages["gen_ai.usage.input_tokens"] == final.usage.input_tokens + cached
    assert messages["gen_ai.usage.output_tokens"] == final.usage.output_tokens
    assert messages["gen_ai.response.finish_reasons"] == [final.stop_reason]


def test_summary_calls_are_spans_in_the_clients_trace(tmp_path, mock, collector):
    config = write_config(tmp_path / "ctxkeeper.toml", MODEL_CONFIG)
    # The default summarizer writes each summary on the request's own upstream.
    gateway = start_gateway(mock.url, tmp_path, "--config", str(config), env=otel_env(collector.url))
    try:
        agent_loop(gateway.url, 40, "otel-summaries")
        summaries = collector.wait_for(
            lambda s: attributes(s).get("ctxkeeper.call.purpose") == "summary", 1
        )
        calls = collector.wait_for(is_call, 40)
        received = mock.requests()
    finally:
        assert gateway.stop() == 0, gateway.logs()
    assert summaries, "the loop compacted, and a summary was written upstream"
    inference = {s.span_id for s in calls if "ctxkeeper.call.purpose" not in attributes(s)}
    parents = {dict(r["headers"]).get("traceparent") for r in received}
    for span in summaries:
        attrs = attributes(span)
        assert span.kind == trace_pb2.Span.SPAN_KIND_CLIENT
        assert span.trace_id.hex() == CLIENT_TRACE
        assert span.parent_span_id in inference, "under the call of the request that needed it"
        assert attrs["gen_ai.operation.name"] == "chat"
        assert attrs["gen_ai.request.model"] == "mock-8k"
        assert attrs["gen_ai.conversation.id"] == "otel-summaries"
        # The summary call went upstream under its own span.
        assert f"00-{CLIENT_TRACE}-{span.span_id.hex()}-01" in parents


def test_a_prompt_cache_that_keeps_missing_raises_the_alarm(tmp_path, mock, collector):
    gateway = start_gateway(
        mock.url,
        tmp_path,
        "--cache-stall-calls",
        "3",
        "--cache-stall-min-fresh-tokens",
        "200",
        env=otel_env(collector.url, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="true"),
    )
    session = "otel-stall"
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=KEY, max_retries=0)
    try:
        events = SessionEvents(gateway.url, session, {"authorization": f"Bearer {KEY}"})
        messages = [
            {"role": "system", "content": tool_output(0, 1500)},
            {"role": "user", "content": "Go on."},
        ]
        for call in range(4):
            # A tool list that changes on every call (a timestamp in a description): it comes
            # before the messages in the prompt, so no prefix is ever cached, while the
            # conversation itself goes on as one session.
            tools = copy.deepcopy(TOOLS)
            tools[0]["function"]["description"] = f"Read a file (tool list of {time.time_ns()})"
            reply = client.chat.completions.create(
                model="gpt-4o", messages=messages, tools=tools, extra_headers={"x-ctxkeeper-session": session}
            )
            messages.append(reply.choices[0].message.model_dump(exclude_none=True))
            for tool_call in reply.choices[0].message.tool_calls or []:
                messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": f"result {call}"})
        stalled = events.wait_for("cache_stalled")
        assert metric(gateway.url, "ctxkeeper_cache_stalls_total") == 1
        calls = sorted(collector.wait_for(is_call, 4), key=lambda s: s.start_time_unix_nano)
    finally:
        assert gateway.stop() == 0, gateway.logs()
    assert len(stalled) == 1, "raised once per run of missing calls"
    assert stalled[0]["calls"] == 3 and stalled[0]["fresh_input_tokens"] >= 600
    flags = [attributes(s).get("ctxkeeper.cache.stalled", False) for s in calls]
    assert flags == [False, False, True, True]
    assert all(attributes(s)["gen_ai.usage.cache_read.input_tokens"] == 0 for s in calls)
    # Opted in: the messages sent are in the span, in the conventions' shape.
    sent = json.loads(attributes(calls[1])["gen_ai.input.messages"])
    assert sent[1] == {"role": "user", "parts": [{"type": "text", "content": "Go on."}]}
    assert sent[2]["role"] == "assistant" and sent[2]["parts"][0]["type"] == "tool_call"
    assert sent[3]["parts"][0] == {"type": "tool_call_response", "id": sent[2]["parts"][0]["id"], "response": "result 0"}


def test_mcp_tool_calls_are_execute_tool_spans_in_the_callers_trace(tmp_path, mock, collector):
    config = write_config(tmp_path / "ctxkeeper.toml", MODEL_CONFIG)
    gateway = start_gateway(
        mock.url, tmp_path, "--config", str(config), "--summarizer", "extractive",
        env=otel_env(collector.url),
    )
    session = "otel-mcp"
    # The agent's own credentials and trace: /mcp serves the agent's tenant, in its trace.
    headers = {"authorization": f"Bearer {KEY}", "traceparent": TRACEPARENT, "tracestate": TRACESTATE}

    async def retrieve():
        async with http_session(f"{gateway.url}/mcp", headers=headers) as mcp:
            found = await mcp.call_tool("session_search", {"query": "invoice", "session": session})
            missing = await mcp.call_tool(
                "context_read", {"reference": f"sessions/{session}/tool_result-nope.txt", "session": session}
            )
            stats = await mcp.call_tool("context_stats", {"session": session})
            return found, missing, stats

    try:
        agent_loop(gateway.url, 12, session)
        found, missing, stats = asyncio.run(retrieve())
        tools = sorted(
            collector.wait_for(lambda s: s.name.startswith("execute_tool"), 3),
            key=lambda s: s.start_time_unix_nano,
        )
    finally:
        assert gateway.stop() == 0, gateway.logs()

    assert structured(found)["hits"], "the agent's own session is searchable at /mcp"
    assert is_error(missing) and not is_error(stats)
    assert [s.name for s in tools] == [
        "execute_tool session_search",
        "execute_tool context_read",
        "execute_tool context_stats",
    ]
    mcp_sessions = set()
    for span in tools:
        attrs = attributes(span)
        assert span.kind == trace_pb2.Span.SPAN_KIND_SERVER
        assert span.trace_id.hex() == CLIENT_TRACE and span.parent_span_id.hex() == CLIENT_SPAN
        assert span.trace_state == TRACESTATE
        assert span.end_time_unix_nano > span.start_time_unix_nano
        assert attrs["gen_ai.operation.name"] == "execute_tool"
        assert attrs["gen_ai.tool.name"] == span.name.removeprefix("execute_tool ")
        assert attrs["mcp.method.name"] == "tools/call"
        assert attrs["gen_ai.conversation.id"] == session
        assert attrs["jsonrpc.request.id"]
        mcp_sessions.add(attrs["mcp.session.id"])
    assert len(mcp_sessions) == 1, "one MCP session served the three calls"
    # The failed read says why, in `error.type` and the span's status.
    read = attributes(tools[1])
    assert read["error.type"] == "not found"
    assert tools[1].status.code == trace_pb2.Status.STATUS_CODE_ERROR
    assert "error.type" not in attributes(tools[0]) and "error.type" not in attributes(tools[2])


def test_a_collector_that_is_down_changes_no_response(tmp_path, mock):
    # A port nothing listens on.
    closed = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    down = f"http://127.0.0.1:{closed.server_address[1]}"
    closed.server_close()
    config = write_config(tmp_path / "ctxkeeper.toml", MODEL_CONFIG)
    traced = start_gateway(
        mock.url, tmp_path / "traced", "--config", str(config), "--summarizer", "extractive",
        env=otel_env(down),
    )
    plain = start_gateway(
        mock.url, tmp_path / "plain", "--config", str(config), "--summarizer", "extractive"
    )
    try:
        bodies = {}
        for name, gateway in (("traced", traced), ("plain", plain)):
            mock.reset()
            answers = agent_loop(gateway.url, 30, f"down-{name}")
            bodies[name] = [
                (a.status_code, a.headers["x-ctxkeeper-compacted"], a.parse().choices[0].message.tool_calls[0].function.arguments, a.parse().usage.prompt_tokens)
                for a in answers
            ]
        deadline = time.monotonic() + 10
        while metric(traced.url, "ctxkeeper_spans_export_failed_total") == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        failed = metric(traced.url, "ctxkeeper_spans_export_failed_total")
        exported = metric(traced.url, "ctxkeeper_spans_exported_total")
        answered = httpx.get(f"{traced.url}/metrics", timeout=10).status_code
    finally:
        assert traced.stop() == 0, traced.logs()
        assert plain.stop() == 0, plain.logs()
    assert bodies["traced"] == bodies["plain"], "the same answers, compactions and usage"
    assert any(compacted == "true" for _, compacted, _, _ in bodies["traced"])
    assert failed > 0 and exported == 0 and answered == 200

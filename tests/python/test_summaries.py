"""Summaries written on the agent's own upstream, driven by the official openai and anthropic
clients through `ctxkeeper serve`: the summary call repeats the conversation as last forwarded,
so the upstream's prompt cache serves >= 85 % of its input; the model's summary is what the
session carries on; a summarizer that fails (here: no time at all) never fails a request."""

from __future__ import annotations

import random

import anthropic
import openai

from conftest import start_mock_upstream
from gateway_support import WORDS, start_gateway, write_config

MARK = "[ctxkeeper summary request]"

CONFIG = """
[gateway]
{extra}

[models."sum-model"]
context_window = 6000
tokenizer = "o200k_base"

[policy]
stages = [{{ kind = "summarize" }}]
"""


def prose(seed: int, size: int = 1800) -> str:
    """Varied, deterministic text: words and numbers, so it tokenizes like real output."""
    pick = random.Random(seed)
    out: list[str] = []
    while sum(len(w) + 1 for w in out) < size:
        out.append(f"{pick.choice(WORDS)}{pick.randrange(1000)}")
    return " ".join(out)


def chat_turns(turns: int) -> list[dict]:
    messages = [{"role": "system", "content": "You are a careful agent."}]
    for i in range(turns):
        messages.append({"role": "user", "content": f"Step {i}: keep going with the invoice fix."})
        messages.append({"role": "assistant", "content": prose(i)})
    messages.append({"role": "user", "content": "Continue."})
    return messages


def anthropic_turns(turns: int) -> list[dict]:
    messages = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"Step {i}: keep going with the invoice fix."})
        messages.append({"role": "assistant", "content": prose(i)})
    messages.append({"role": "user", "content": "Continue."})
    return messages


def summary_calls(mock) -> list[dict]:
    return [r for r in mock.requests() if MARK in str(r["body"])]


def agent_calls(mock) -> list[dict]:
    return [r for r in mock.requests() if MARK not in str(r["body"])]


def run(tmp_path, extra: str, drive, *mock_args: str) -> tuple[list[dict], list[dict]]:
    mock = start_mock_upstream(60_000, *mock_args)
    try:
        config = write_config(tmp_path / "ctxkeeper.toml", CONFIG.format(extra=extra))
        gateway = start_gateway(mock.url, tmp_path, "--config", str(config))
        try:
            drive(gateway)
        finally:
            assert gateway.stop() == 0, gateway.logs()
        return summary_calls(mock), agent_calls(mock)
    finally:
        mock.process.stop()


def drive_openai(gateway) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="sk-sum-openai", max_retries=0)
    for turns in range(1, 14):
        reply = client.chat.completions.create(model="sum-model", messages=chat_turns(turns))
        assert reply.choices[0].message.content


def drive_anthropic(gateway) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key="sk-ant-sum", max_retries=0)
    for turns in range(1, 14):
        reply = client.messages.create(
            model="sum-model",
            max_tokens=256,
            system=[{"type": "text", "text": "You are a careful agent.", "cache_control": {"type": "ephemeral"}}],
            messages=anthropic_turns(turns),
        )
        assert reply.content


def assert_cached_summaries(summaries: list[dict], agents: list[dict], key: str) -> None:
    assert summaries, "the window forced a summary"
    for call in summaries:
        assert call["status"] == 200
        headers = dict(call["headers"])
        assert key in (headers.get("authorization", "") + headers.get("x-api-key", ""))
        share = call["cached_tokens"] / call["input_tokens"]
        assert share >= 0.85, f"{call['cached_tokens']} of {call['input_tokens']} cached"
    assert all(r["status"] == 200 for r in agents)
    assert "mock summary of the" in str(agents[-1]["body"])


def test_openai_client_summaries_ride_the_prompt_cache(tmp_path):
    summaries, agents = run(tmp_path, "", drive_openai)
    assert_cached_summaries(summaries, agents, "sk-sum-openai")


def test_anthropic_client_summaries_ride_the_prompt_cache(tmp_path):
    summaries, agents = run(tmp_path, "", drive_anthropic)
    assert_cached_summaries(summaries, agents, "sk-ant-sum")


def test_a_summarizer_outage_never_fails_the_agent(tmp_path):
    # Every answer takes 1.1 s; the summary call has 1 s.
    summaries, agents = run(
        tmp_path, "summary_timeout_secs = 1", drive_anthropic, "--delay-ms", "1100"
    )
    # The summary calls timed out (the mock forgets a request whose client left).
    assert not summaries
    assert all(r["status"] == 200 for r in agents)
    assert "without a language model" in str(agents[-1]["body"])
    assert "mock summary of the" not in str(agents[-1]["body"])

"""The Python face (`ctxkeeper_engine`, the wheel crates/ctxkeeper-py builds): the core API
against the engine it binds, with real stores and the mock upstream where a model is needed.

The wheel is built from source and installed into this venv by scripts/pywheel (scripts/test
runs it); without it every test here fails, because a wheel that does not build or import
is the failure these tests exist to catch.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import pytest

import ctxkeeper_engine as ck
from conftest import binary_path, require_binary, start_mock_upstream

WORDS = "invoice ledger balance order refund customer shipment total tax".split()


def filler(seed: int, words: int) -> str:
    """Deterministic text of about `words` words (a tool's big output)."""
    return " ".join(WORDS[(seed * 7 + i) % len(WORDS)] + str(i % 13) for i in range(words))


# ----- one conversation in each wire shape ---------------------------------------------------


def chat_round(i: int, words: int) -> list[dict]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/f{i}.py"})}}
            ],
        },
        {"role": "tool", "tool_call_id": f"call_{i}", "content": filler(i, words)},
    ]


def anthropic_round(i: int, words: int) -> list[dict]:
    return [
        {"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "read_file", "input": {"path": f"src/f{i}.py"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": filler(i, words)}]},
    ]


def responses_round(i: int, words: int) -> list[dict]:
    return [
        {"type": "function_call", "call_id": f"call_{i}", "name": "read_file", "arguments": json.dumps({"path": f"src/f{i}.py"})},
        {"type": "function_call_output", "call_id": f"call_{i}", "output": filler(i, words)},
    ]


ROUNDS = {"openai-chat": chat_round, "anthropic": anthropic_round, "responses": responses_round}


def user(wire: str, text: str) -> dict:
    if wire == "responses":
        return {"role": "user", "content": [{"type": "input_text", "text": text}]}
    return {"role": "user", "content": text}


def manager(wire: str = "openai-chat", **kwargs) -> ck.ContextManager:
    kwargs.setdefault("window", 4_000)
    system = "You are a careful coding agent." if wire != "openai-chat" else None
    return ck.ContextManager("default", model="gpt-4o", wire=wire, system=system, **kwargs)


# ----- the wheel ------------------------------------------------------------------------------


def test_the_wheel_imports_with_its_presets_and_version():
    assert ck.__version__ == ck.version()
    assert {"default", "agentscope", "reme-compact", "cowagent"} <= set(ck.presets())
    assert issubclass(ck.InvalidInputError, ValueError)
    assert issubclass(ck.ConflictError, ck.StoreError)
    assert issubclass(ck.NoRoomError, ck.ContextOverflowError)


# ----- ingest / prepare -----------------------------------------------------------------------


def test_a_short_conversation_comes_back_as_given_with_the_callers_own_objects():
    cm = manager()
    given = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    prepared = cm.prepare(given)
    assert prepared.messages == given
    assert not prepared.compacted and not prepared.changed
    # The caller's objects come back while the engine keeps them verbatim.
    assert all(a is b for a, b in zip(prepared.messages, given))
    assert prepared.kwargs == {"messages": given}
    body = prepared.request(model="gpt-4o", temperature=0)
    assert body["model"] == "gpt-4o" and body["temperature"] == 0 and body["messages"] == given
    # A new list every time: appending to it does not reach the manager.
    prepared.messages.append({"role": "user", "content": "x"})
    assert cm.prepare().messages == given


@pytest.mark.parametrize("wire", ["openai-chat", "anthropic", "responses"])
def test_every_request_is_the_whole_emission_of_the_context(wire):
    """The incremental requests (a step converts only what it appended) are checked, step by
    step, against the context emitted whole, through ingest caps, compactions and an overflow
    recovery, in each wire shape."""
    cm = manager(wire)
    cm.ingest([user(wire, "Fix the failing tests in src/")])
    compacted = changed = 0
    for i in range(40):
        # Every fifth output is over the ingest cap (40 % of the window).
        words = 900 if i % 5 == 4 else 120
        prepared = cm.prepare(ROUNDS[wire](i, words))
        assert prepared.messages == cm._emit_full(), f"step {i}"
        compacted += prepared.compacted
        changed += prepared.changed
        if words == 900:
            # A capped output rewrites what it appended, compaction or not.
            assert prepared.changed, f"step {i}: a capped output changes the request"
        if i == 30:
            recovered = cm.on_overflow(tokens=prepared.input_tokens, limit=prepared.input_tokens // 2)
            assert recovered.compacted and recovered.changed
            assert recovered.messages == cm._emit_full()
    assert compacted >= 3, "the loop should have compacted several times"
    assert changed >= compacted
    if wire == "anthropic":
        assert prepared.system == "You are a careful coding agent."
        assert set(prepared.kwargs) == {"system", "messages"}
    if wire == "responses":
        assert set(prepared.kwargs) == {"instructions", "input"}


def test_changed_says_when_the_callers_own_list_is_still_the_request():
    cm = manager(window=20_000)
    history = [{"role": "user", "content": "start"}]
    prepared = cm.prepare(history)
    for i in range(5):
        new = chat_round(i, 50)
        history += new
        prepared = cm.prepare(new)
        assert not prepared.changed
        assert prepared.messages == history
    # An output over the ingest cap is cut to a preview: the caller's copy is stale now.
    big = chat_round(99, 12_000)
    history += big
    prepared = cm.prepare(big)
    assert prepared.changed
    assert prepared.messages != history
    assert "ctxkeeper" in prepared.messages[-1]["content"] or len(prepared.messages[-1]["content"]) < len(big[1]["content"])


def test_max_tokens_reserves_the_answer_in_the_window():
    cm = manager(window=8_000)
    cm.ingest([{"role": "user", "content": "hi"}])
    assert cm.prepare().window == 8_000
    assert cm.prepare(max_tokens=2_000).window == 6_000
    # An outsized budget leaves the context a quarter of the window, as the gateway does.
    assert cm.prepare(max_tokens=100_000).window == 2_000


def test_sdk_objects_are_ingested_as_what_they_dump():
    from openai.types.chat import ChatCompletionMessage

    cm = manager()
    reply = ChatCompletionMessage(role="assistant", content="done")
    cm.ingest([{"role": "user", "content": "go"}])
    cm.ingest(reply)
    assert cm.prepare().messages[-1] == {"role": "assistant", "content": "done"}


def test_plain_dicts_read_directly_make_the_context_the_json_path_makes():
    """Plain Chat dicts are read straight into the message model; anything else (here: the
    same tool calls given as tuples) goes through JSON and the wire parser. Both give the
    same context, the same requests, the same token figures and the same errors."""

    def steps(sequence) -> list[list[dict]]:
        call = {"id": "call_1", "type": "function", "function": {"name": "get_user", "arguments": '{"id": "mia_li_3668"}'}}
        return [
            [{"role": "system", "content": "Airline agent. Be brief."}, {"role": "user", "content": "héllo, 中文 and 🎉", "name": "mia"}],
            [
                {"content": None, "role": "assistant", "tool_calls": sequence([call])},
                {"role": "tool", "tool_call_id": "call_1", "name": "get_user", "content": filler(1, 80)},
            ],
            [
                {"role": "assistant", "content": "Two at once.", "tool_calls": sequence([dict(call, id="call_2"), dict(call, id="call_3")])},
                {"role": "tool", "tool_call_id": "call_2", "content": None},
                {"role": "tool", "tool_call_id": "call_3"},
            ],
            [{"role": "assistant"}, {"role": "developer", "content": ""}],
            [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "one with a field of its own", "x-trace": 7}],
            [{"role": "assistant", "content": None, "tool_calls": sequence([dict(call, id="../../x")])}],
            [{"role": "assistant", "content": "ok", "tool_call_id": "call_1"}],
        ]

    def outcome(cm, batch):
        try:
            prepared = cm.prepare(batch)
        except ck.CtxkeeperError as err:
            return type(err), str(err), cm._emit_full()
        # The caller's own dicts come back (tuples and all): compared as the JSON they send.
        sent = json.loads(json.dumps(prepared.messages))
        return sent, prepared.input_tokens, prepared.changed, prepared.compacted, cm._emit_full()

    plain, other = manager(), manager()
    for a, b in zip(steps(list), steps(tuple)):
        assert outcome(plain, a) == outcome(other, b)
    timeless = [{k: v for k, v in cm.stats().items() if k != "engine_seconds"} for cm in (plain, other)]
    assert timeless[0] == timeless[1]
    assert plain.count_tokens() == other.count_tokens()


# ----- bad input ------------------------------------------------------------------------------

BAD = {
    "unknown role": ([{"role": "narrator", "content": "x"}], "messages[0].role", None),
    "orphan tool result": ([{"role": "tool", "tool_call_id": "call_9", "content": "x"}], "messages[0]", "tool_pairing"),
    "hostile call id": (
        [{"role": "assistant", "content": None, "tool_calls": [{"id": "../../x", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}],
        "messages[0]",
        "hostile_id",
    ),
    "hostile result id": (
        [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "..\\..\\x", "content": "x"},
        ],
        "messages[1]",
        "hostile_id",
    ),
    "result after the round closed": (
        [
            {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "user", "content": "where is the result?"},
        ],
        "messages[0]",
        "tool_pairing",
    ),
    "not a message list": ("hello", None, None),
    "unknown role after a plain message": (
        [{"role": "user", "content": "fine"}, {"role": "narrator", "content": "x"}],
        "messages[1].role",
        None,
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_raises_and_changes_nothing_stored(case, tmp_path):
    messages, path, kind = BAD[case]
    store = f"sqlite://{tmp_path / 'sessions.db'}"
    cm = manager(store=store, session="s1")
    cm.prepare([{"role": "user", "content": "start"}])
    before = (cm.stats()["messages"], cm.stats()["ingested"], cm._emit_full())
    sessions = ck.Sessions(store)
    stored = (sessions.list()[0]["version"], len(sessions.history("s1")))
    with pytest.raises(ck.InvalidInputError) as raised:
        cm.prepare(messages)
    if path is not None:
        assert raised.value.path == path, str(raised.value)
    if kind is not None:
        assert raised.value.kind == kind
    assert str(raised.value)
    assert (cm.stats()["messages"], cm.stats()["ingested"], cm._emit_full()) == before
    assert (sessions.list()[0]["version"], len(sessions.history("s1"))) == stored
    # The manager goes on as if nothing happened.
    assert cm.prepare([{"role": "assistant", "content": "ok"}]).messages[-1]["content"] == "ok"


def test_errors_keep_their_cause():
    with pytest.raises(ck.StoreError) as raised:
        ck.ContextManager("default", store="postgres://nobody@127.0.0.1:1/none", session="s")
    assert raised.value.__cause__ is not None
    assert isinstance(raised.value.__cause__, ck.CtxkeeperError)
    with pytest.raises(ck.ConfigError, match="unknown policy"):
        ck.ContextManager("no-such-preset")
    with pytest.raises(ck.ConfigError, match="trigger_ratio"):
        ck.ContextManager({"preset": "default", "trigger_ratio": 2.0})


def test_a_policy_comes_from_a_preset_a_dict_or_the_servers_config_file(tmp_path):
    config = tmp_path / "ctxkeeper.toml"
    config.write_text('[gateway]\npolicy = "agentscope"\n\n[policy]\ntrigger_ratio = 0.5\n')
    assert ck.ContextManager(str(config)).stats()["policy"] == "agentscope"
    assert ck.ContextManager(config).stats()["policy"] == "agentscope"
    assert ck.ContextManager({"preset": "reme-compact"}).stats()["policy"] == "reme-compact"
    bad = tmp_path / "bad.toml"
    bad.write_text("[nonsense]\nx = 1\n")
    with pytest.raises(ck.ConfigError, match="unknown section"):
        ck.ContextManager(str(bad))


# ----- overflow, usage, events ----------------------------------------------------------------

def openai_overflow(limit: int, tokens: int) -> dict:
    """OpenAI's context-overflow error body."""
    return {
        "error": {
            "message": f"This model's maximum context length is {limit} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
    }


def test_an_overflow_error_compacts_under_the_stated_limit():
    # The manager was told a larger window than the provider enforces (a deployment with a
    # smaller one): the provider's error states the real limit.
    cm = manager(window=6_000)
    cm.ingest([{"role": "user", "content": "start"}])
    i = 0
    while cm.count_tokens() < 3_000:
        cm.ingest(chat_round(i, 60))
        i += 1
    assert not cm.prepare().compacted
    tokens = cm.count_tokens()
    limit = 2_400
    assert cm.on_overflow({"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}, status=429) is None
    after = cm.on_overflow(openai_overflow(limit, tokens))
    assert after is not None and after.compacted
    assert cm.count_tokens() <= limit
    assert after.messages == cm._emit_full()
    # What must stay cannot be dropped: a limit below it is refused, not an empty request.
    with pytest.raises(ck.NoRoomError) as raised:
        cm.on_overflow(tokens=limit, limit=5)
    assert raised.value.limit <= 5 and raised.value.needed > 5


def test_usage_reports_of_every_provider_are_read():
    cm = manager()
    cm.prepare([{"role": "user", "content": "hi"}])
    assert cm.usage(123) == 123
    assert cm.usage({"prompt_tokens": 50, "completion_tokens": 3}) == 50
    assert cm.usage({"input_tokens": 40, "cache_read_input_tokens": 10, "cache_creation_input_tokens": 5}) == 55
    with pytest.raises(ck.InvalidInputError):
        cm.usage({"tokens": 1})


def test_events_arrive_by_iterator_or_by_callback():
    seen = []
    cm = manager(on_event=seen.append)
    cm.ingest([{"role": "user", "content": "start"}])
    for i in range(20):
        cm.prepare(chat_round(i, 200))
    kinds = {event["type"] for event in seen}
    assert {"budget_used", "context_compaction_start", "context_compaction_end"} <= kinds
    assert list(cm.events()) == []  # the callback took them

    plain = manager()
    plain.prepare([{"role": "user", "content": "hi"}])
    events = plain.events()
    assert next(events)["type"] == "budget_used"
    assert list(plain.events()) == []  # drained


def test_a_failing_callback_does_not_fail_the_step():
    def boom(event):
        raise RuntimeError("callback bug")

    hooked = []
    old = getattr(__import__("sys"), "unraisablehook")
    __import__("sys").unraisablehook = lambda info: hooked.append(info.exc_value)
    try:
        cm = manager(on_event=boom)
        assert cm.prepare([{"role": "user", "content": "hi"}]).messages
    finally:
        __import__("sys").unraisablehook = old
    assert hooked and isinstance(hooked[0], RuntimeError)


# ----- the archive ----------------------------------------------------------------------------


def test_what_left_the_context_is_read_back():
    cm = manager(window=4_000)
    cm.ingest([{"role": "user", "content": "start"}])
    big = chat_round(7, 3_000)
    cm.prepare(big)
    truncated = [e for e in cm.events() if e["type"] == "tool_result_truncated"]
    assert truncated, "a 3,000-word output at a 4,000-token window is cut at ingest"
    reference = truncated[0]["reference"]
    assert cm.read(reference) == big[1]["content"]
    assert cm.read(reference, offset=0, limit=20) == big[1]["content"][:20]
    hits = cm.search(big[1]["content"].split()[5])
    assert any(hit["reference"] == reference for hit in hits)
    assert any(item["reference"] == reference for item in cm.archived())
    with pytest.raises(ck.CtxkeeperError):
        cm.read("sessions/session/../../etc/passwd")
    with pytest.raises(ck.NotFoundError):
        cm.read("sessions/session/tool_result-nothing.txt")


# ----- stores and sessions --------------------------------------------------------------------


def test_a_stored_session_is_resumed_and_listed_like_the_cli_lists_it(tmp_path):
    store = f"sqlite://{tmp_path / 'sessions.db'}"
    cm = manager(store=store, session="task-1", window=4_000)
    cm.ingest([{"role": "user", "content": "start"}])
    for i in range(15):
        cm.prepare(chat_round(i, 150))
    context = cm._emit_full()
    ingested = cm.stats()["ingested"]
    del cm

    again = manager(store=store, session="task-1", window=4_000)
    assert again.session["stored"]
    assert again._emit_full() == context
    assert again.stats()["ingested"] == ingested
    again.prepare([{"role": "user", "content": "continue"}])

    sessions = ck.Sessions(store)
    [info] = sessions.list()
    assert info["key"]["session"] == "task-1" and info["log_len"] == ingested + 1
    assert len(sessions.history("task-1", last=1000)) == ingested + 1
    assert sessions.search("continue")[0]["key"]["session"] == "task-1"

    exe = require_binary(binary_path("CTXKEEPER_BIN", "ctxkeeper"), "ctxkeeper")
    listed = subprocess.run(
        [exe, "sessions", "list", "--store", store, "--json"], capture_output=True, text=True, check=True
    )
    assert "task-1" in listed.stdout
    assert sessions.delete("task-1") and sessions.list() == []


def test_a_second_writer_of_the_same_session_loses_the_swap(tmp_path):
    store = f"sqlite://{tmp_path / 'sessions.db'}"
    first = manager(store=store, session="shared")
    first.prepare([{"role": "user", "content": "one"}])
    second = manager(store=store, session="shared")
    second.prepare([{"role": "assistant", "content": "two"}])
    with pytest.raises(ck.ConflictError):
        first.prepare([{"role": "assistant", "content": "three"}])


# ----- the GIL --------------------------------------------------------------------------------


def test_the_gil_is_released_while_the_engine_waits_on_a_model(monkeypatch):
    """A summary written by a (slow) model summarizer: other Python threads run meanwhile."""
    mock = start_mock_upstream(128_000, "--delay-ms", "400")
    try:
        monkeypatch.setenv("CTXKEEPER_SUMMARIZER_API_KEY", "test-key")
        cm = ck.ContextManager(
            "default", model="gpt-4o", window=4_000,
            summarizer="openai", summarizer_url=mock.openai_base_url, summarizer_model="gpt-4o-mini",
        )
        cm.ingest([{"role": "user", "content": "start"}])
        for i in range(6):
            cm.ingest(chat_round(i, 150))
        ticks = 0
        stop = threading.Event()

        def count():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                time.sleep(0.001)

        counter = threading.Thread(target=count)
        counter.start()
        started = time.monotonic()
        ticks_before = ticks
        cm.compact()
        took = time.monotonic() - started
        stop.set()
        counter.join()
        assert took >= 0.4, "the summary request to the delayed mock should take a while"
        assert ticks - ticks_before >= 50, f"only {ticks - ticks_before} ticks in {took:.2f}s"
        assert any(r["path"] == "/v1/chat/completions" for r in mock.requests())
    finally:
        mock.process.stop()

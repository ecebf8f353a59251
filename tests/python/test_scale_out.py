"""Two `ctxkeeper serve` processes sharing one session store (the real Redis, then the real
PostgreSQL) and one `--workspace` archive, in front of one mock upstream, behave as one
service:

- a session started on one process continues on the other, which recognises the stored
  history: its compaction is reused (the forwarded prefix stays identical across the switch),
  nothing diverges, and the context, the log and the state version advance exactly once per
  request;
- the same request raced on both processes (several rounds, four threads) logs every message
  exactly once and commits exactly the compactions one process would; each committed
  compaction is announced once on the event streams and counted once in the metrics, however
  many compare-and-swaps were lost;
- different new messages for one session sent to both processes at once are all logged: none
  is lost, and one sent only once is logged only once.

The stores come from CTXKEEPER_TEST_REDIS_URL and CTXKEEPER_TEST_POSTGRES_URL (set by
scripts/test). A missing variable skips its runs with a loud reason, and fails them under
CI=true. Tenants and session ids are unique per run, so reruns against the same databases do
not collide.
"""

from __future__ import annotations

import os
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from conftest import MockUpstream, RunningProcess, start_mock_upstream
from gateway_support import TOOLS, WORDS, SessionEvents, admin, metric, start_gateway, write_config

RUN = uuid.uuid4().hex[:12]
TOKEN = f"admin-{RUN}"
KEY = "sk-scale-python"
# Opens every summary call a gateway writes on the agent's own upstream.
SUMMARY_MARK = "[ctxkeeper summary request]"
MODEL = "mock-small"
# A 4,000-token window: the default policy compacts after a few dozen tool rounds. Exact
# accounting, so that a process that reloads a session counts it as a warm one does; the
# fixed trigger, because the economic one reads usage reports that only the process that
# served a step sees (crates/ctxkeeper-gateway/tests/scale_out.rs tests what it guarantees
# across replicas). No summary prepared ahead: a prepared summary lives in the process that
# asked for it, so a compaction on the other one would cut at another message.
CONFIG = f"""
[gateway]
prepare_summaries_at = 0

[models."{MODEL}"]
context_window = 4000
max_output = 256
tokenizer = "o200k_base"

[policy]
accounting = "exact"

[policy.cost]
enabled = false
"""
# Enough rounds to cross the 90 % trigger of that window and go on after the compaction.
STEPS = 32

STORES = [
    pytest.param("CTXKEEPER_TEST_REDIS_URL", id="redis"),
    pytest.param("CTXKEEPER_TEST_POSTGRES_URL", id="postgres"),
]




def filler(seed: int, size: int) -> str:
    out, i = [], seed
    while sum(len(w) + 1 for w in out) < size:
        out.append(WORDS[i % len(WORDS)])
        i = i * 31 + 7
    return " ".join(out)[:size]


def chat_history(rounds: int, result_bytes: int = 700) -> list[dict]:
    """A coding agent's conversation of `rounds` tool rounds."""
    messages = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": "Fix the rounding bug in invoice totals."},
    ]
    for i in range(rounds):
        call = f"call_{i}"
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"path":"src/f{i}.rs"}}'},
                    }
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call, "content": filler(i, result_bytes)})
    return messages


@dataclass
class Cluster:
    mock: MockUpstream
    a: RunningProcess
    b: RunningProcess
    config: Path
    workspace: Path
    tenant: str
    store: str

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {KEY}", "x-ctxkeeper-tenant": self.tenant}

    def send(self, gateway: RunningProcess, session: str, messages: list[dict]) -> httpx.Response:
        response = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            headers={**self.headers, "x-ctxkeeper-session": session},
            json={"model": MODEL, "messages": messages, "tools": TOOLS},
            timeout=60,
        )
        assert response.status_code == 200, response.text
        assert response.json()["object"] == "chat.completion"
        return response

    def stats(self, gateway: RunningProcess, session: str) -> dict:
        status, body = admin(gateway.url, TOKEN, self.tenant, "GET", f"/admin/sessions/{session}")
        assert status == 200, body
        return body

    def events(self, gateway: RunningProcess, session: str) -> SessionEvents:
        return SessionEvents(gateway.url, session, self.headers)


@pytest.fixture(params=STORES)
def store_url(request) -> str:
    var = request.param
    url = os.environ.get(var, "")
    if not url:
        message = (
            f"SKIP: {var} is not set, so the two-process scale-out test against that store did "
            f"NOT run; scripts/test sets it (scripts/services starts the database)"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return url


@pytest.fixture
def cluster(store_url, tmp_path, request) -> Cluster:
    config = write_config(tmp_path / "ctxkeeper.toml", CONFIG)
    workspace = tmp_path / "shared-workspace"
    mock = start_mock_upstream()
    started: list[RunningProcess] = []
    try:
        for name in ("a", "b"):
            started.append(
                start_gateway(
                    mock.url,
                    tmp_path / name,
                    "--config",
                    str(config),
                    "--admin-token",
                    TOKEN,
                    # The replicas sit behind a proxy that names the tenant.
                    "--trust-tenant-header",
                    store=store_url,
                    workspace=workspace,
                )
            )
        tenant = f"scale-{RUN}-{request.node.callspec.id}"
        yield Cluster(
            mock, started[0], started[1], config, workspace, tenant, request.node.callspec.id
        )
    finally:
        for process in started:
            code = process.stop()
            assert code == 0, f"graceful shutdown exits 0:\n{process.logs()}"
            assert KEY not in process.logs(), "API keys never reach the logs"
        mock.process.stop()


def compaction_ends(taps: list[SessionEvents]) -> list[dict]:
    """The compactions announced, as every watcher saw them: events travel through the
    store's pub/sub, so a watcher on either process sees every committed compaction, once."""
    seen = [tap.named("context_compaction_end") for tap in taps]
    for other in seen[1:]:
        assert other == seen[0], "watchers on both processes see the same events"
    return seen[0]


def test_a_session_started_on_one_process_continues_on_the_other(cluster):
    session = f"moving-{RUN}"
    taps = [cluster.events(gateway, session) for gateway in (cluster.a, cluster.b)]
    versions, compacted, forwarded = [], [], []
    for rounds in range(1, STEPS + 1):
        # Alternate: every request lands on the process that did not serve the last one.
        serving, other = (cluster.a, cluster.b) if rounds % 2 else (cluster.b, cluster.a)
        history = chat_history(rounds)
        response = cluster.send(serving, session, history)
        compacted.append(response.headers["x-ctxkeeper-compacted"] == "true")
        agent_calls = [r for r in cluster.mock.requests() if SUMMARY_MARK not in str(r["body"])]
        forwarded.append(agent_calls[-1]["body"]["messages"])
        # The other process reads the session back from the store.
        stats = cluster.stats(other, session)
        assert stats["client_messages"] == len(history), stats
        assert stats["log_len"] == len(history), "each message logged once, none lost"
        versions.append(stats["version"])

    assert any(compacted), "the 4,000-token window must compact"
    assert [b - a for a, b in zip(versions, versions[1:])] == [1] * (STEPS - 1), (
        f"exactly one committed save per request: {versions}"
    )
    # Each process recognised what the other stored and reused its compaction: between
    # compactions the previous request's messages (summary and placeholders included) are a
    # prefix of the next one's, although the two were sent by different processes.
    checked = 0
    for i in range(1, STEPS):
        if compacted[i]:
            continue
        previous, current = forwarded[i - 1], forwarded[i]
        assert current[: len(previous)] == previous, f"request {i}: the stored context was not reused"
        if any(compacted[:i]):
            checked += 1
    assert checked > 0, "the prefix must also hold after a compaction"

    stats = cluster.stats(cluster.a, session)
    assert stats["compactions"] >= 1 and stats["archived_refs"] > 0, stats
    assert stats["messages"] < len(chat_history(STEPS)), "the context was compacted"
    assert any(cluster.workspace.rglob("*")), "the shared workspace holds the archived context"
    for tap in taps:
        events = tap.settle()
        assert "history_diverged" not in tap.names(), events
        assert "events_lost" not in tap.names()
    ends = compaction_ends(taps)
    assert len(ends) == stats["compactions"], "each committed compaction announced once"
    for end in ends:
        assert 0 < end["tokens_after"] < end["tokens_before"], end
    assert metric(cluster.a.url, "ctxkeeper_history_divergences_total") == 0
    assert metric(cluster.b.url, "ctxkeeper_history_divergences_total") == 0


def test_the_same_request_raced_on_both_processes_logs_once_and_compacts_once(cluster, tmp_path):
    session = f"raced-{RUN}"
    # What one process alone does with the same requests, for comparison.
    reference = start_gateway(
        cluster.mock.url,
        tmp_path / "reference",
        "--config",
        str(cluster.config),
        "--admin-token",
        TOKEN,
        "--trust-tenant-header",
    )
    try:
        taps = [cluster.events(gateway, session) for gateway in (cluster.a, cluster.b)]
        targets = [cluster.a, cluster.b, cluster.a, cluster.b]
        with ThreadPoolExecutor(len(targets)) as pool:
            for rounds in range(1, STEPS + 1):
                history = chat_history(rounds)
                # Four clients (two per process) send the same request at once, as retries
                # or a load balancer's duplicates would.
                answers = list(
                    pool.map(lambda gateway: cluster.send(gateway, session, history), targets)
                )
                assert len(answers) == len(targets)
                cluster.send(reference, session, history)
        stats = cluster.stats(cluster.b, session)
        expected = cluster.stats(reference, session)
    finally:
        assert reference.stop() == 0, reference.logs()

    final = chat_history(STEPS)
    assert stats["log_len"] == len(final), "every message logged exactly once"
    assert stats["client_messages"] == len(final)
    assert expected["compactions"] > 0, "the small window must compact"
    assert stats["compactions"] == expected["compactions"], (
        "the racing processes committed exactly the compactions one process commits"
    )
    assert stats["messages"] == expected["messages"]

    conflicts = sum(metric(g.url, "ctxkeeper_store_conflicts_total") for g in (cluster.a, cluster.b))
    assert conflicts > 0, "the race happened: some saves lost their compare-and-swap"
    # A process whose save lost the swap redid the step on the winner's state; what it did
    # before is not announced. So every committed compaction is announced (and counted)
    # exactly once across both processes, and both processes' watchers see it.
    for tap in taps:
        tap.settle()
        assert "history_diverged" not in tap.names()
        assert "events_lost" not in tap.names()
    ends = compaction_ends(taps)
    assert len(ends) == stats["compactions"], [e["tokens_before"] for e in ends]
    counted = sum(metric(g.url, "ctxkeeper_compactions_total") for g in (cluster.a, cluster.b))
    assert counted == stats["compactions"]
    assert {r["status"] for r in cluster.mock.requests()} == {200}, "every forwarded request was valid"


def test_different_messages_sent_to_both_processes_at_once_are_all_logged(cluster):
    session = f"forked-{RUN}"
    history = chat_history(2, 300)
    cluster.send(cluster.a, session, history)
    rounds = 8
    notes: dict[str, int] = {}
    last_length = 0
    with ThreadPoolExecutor(2) as pool:
        for r in range(rounds):
            # One word per note, so the log's full-text search finds exactly that note.
            mine, theirs = f"fork{RUN}a{r}x", f"fork{RUN}b{r}x"
            sent = [
                (cluster.a, history + [{"role": "user", "content": f"Also check {mine} please."}]),
                (cluster.b, history + [{"role": "user", "content": f"Also check {theirs} please."}]),
            ]
            list(pool.map(lambda job: cluster.send(job[0], session, job[1]), sent))
            last_length = len(sent[0][1])
            # Every later request carries `mine`; `theirs` is sent this once.
            notes[mine] = rounds - r
            notes[theirs] = 1
            history = history + [
                sent[0][1][-1],
                {"role": "assistant", "content": f"Checked round {r}."},
            ]

    stats = cluster.stats(cluster.a, session)
    # The context follows whichever request committed last.
    assert stats["client_messages"] == last_length
    for note, carried_by in notes.items():
        status, found = admin(
            cluster.a.url,
            TOKEN,
            cluster.tenant,
            "GET",
            f"/admin/sessions/{session}/search",
            q=note,
            limit=50,
        )
        assert status == 200, found
        hits = [hit for hit in found["hits"] if note in hit["snippet"]]
        assert hits, f"{note} was lost from the session log"
        # A request logs what is new against the state it committed on; when its history
        # diverged from the other branch, that includes its own earlier messages again. A
        # message is logged at most once per request that carried it, never more.
        assert len(hits) <= carried_by, (note, [hit["seq"] for hit in hits])
    assert stats["log_len"] >= len(chat_history(2, 300)) + 2 * rounds

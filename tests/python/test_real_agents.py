"""The real agents, unmodified, through the gateway.

Claude Code, Codex CLI and mini-swe-agent (installed from npm and PyPI by ``scripts/agents``)
run headless through ``ctxkeeper wrap --gateway`` in front of ``ctxkeeper-mock-upstream`` in
its scripted mode: the mock answers each agent's loop with N shell commands in the agent's
own tool schema, every one printing a marker line and a large output, then a final answer,
and it enforces a small context window with the providers' own overflow errors (Anthropic's
``input + max_tokens > window`` rule included). Per agent, one run through the gateway is
checked for:

- the agent exits successfully after all N steps;
- no error (overflow or other) reaches it: every request the gateway answered was a 200;
- exactly one stored session for the conversation;
- 0 history divergences (Prometheus ``/metrics``);
- every step's output can be found again with ``ctxkeeper sessions search``;

and the same run straight against the mock fails. Claude Code also runs 50 steps at a 200k
window with its default ``max_tokens`` (32,000), where the mock must see no overflow at all,
and with its default model and the 1M beta past 200k tokens, where nothing may be compacted;
Codex also runs with its own auto-compaction on, which must continue its session.

Agents that are not installed are skipped with a message (and fail under ``CI=true``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
import pytest

from conftest import REPO, start_mock_upstream
from gateway_support import gateway_binary, metric, start_gateway, write_config

MARKER = re.compile(r"ctxkstep(\d+)out")


def agent_binary(env_var: str, default: Path, what: str) -> Path:
    """An installed agent: ``$env_var``, else where ``scripts/agents`` puts it."""
    configured = os.environ.get(env_var)
    path = Path(configured) if configured else default
    if path.is_file() and os.access(path, os.X_OK):
        return path
    message = f"{what} not installed at {path}; run scripts/agents (or set {env_var})"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def tenant_of(key: str) -> str:
    """The tenant the gateway derives from an API key (identity.rs)."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def highest_marker(text: str) -> int:
    return max((int(n) for n in MARKER.findall(text)), default=0)


# What the mock reserves for the output when a request states no budget (its default).
MOCK_DEFAULT_OUTPUT = 64


def overflowed(request: dict, window: int) -> bool:
    """Whether the mock refused a recorded request for the window: a 400, or (streamed
    Responses, which carries the error inside a 200 stream) input + output budget > window."""
    body = request["body"] if isinstance(request["body"], dict) else {}
    stated = next(
        (body[k] for k in ("max_tokens", "max_output_tokens", "max_completion_tokens") if isinstance(body.get(k), int)),
        MOCK_DEFAULT_OUTPUT,
    )
    return request["status"] == 400 or request["input_tokens"] + stated > window


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    seconds: float
    workdir: Path

    def output(self) -> str:
        return f"exit {self.code} after {self.seconds:.1f}s\nstdout:\n{self.stdout[-3000:]}\nstderr:\n{self.stderr[-3000:]}"


@dataclass
class Agent:
    """How to run one agent headless, and how to tell that it finished the script."""

    name: str
    binary: Callable[[], Path]
    kind: str  # `ctxkeeper wrap --agent`
    model: str  # the model the agent asks for; its window is configured in the gateway
    key: str
    window: int
    steps: int
    output_bytes: int
    args: Callable[[Path], list[str]]
    env: Callable[[Path], dict[str, str]]
    direct_env: Callable[[str], dict[str, str]]
    direct_args: Callable[[str], list[str]] = lambda url: []
    finished: Callable[[Run], bool] = lambda run: False
    extra_env: dict[str, str] = field(default_factory=dict)


PROMPT = "Run the commands you are given, one at a time, then say you are done."


def claude_finished(run: Run) -> bool:
    try:
        result = json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return False
    # "All done." is the scripted model's final answer: the agent reached the end of the script.
    return (
        result.get("subtype") == "success"
        and not result.get("is_error")
        and result.get("result") == "All done."
    )


def mini_finished(run: Run) -> bool:
    traj = run.workdir / "run.traj.json"
    if not traj.is_file():
        return False
    return json.loads(traj.read_text()).get("info", {}).get("exit_status") == "Submitted"


CLAUDE = Agent(
    name="claude-code",
    binary=lambda: agent_binary(
        "CTXKEEPER_CLAUDE_BIN", REPO / ".agents/npm/node_modules/.bin/claude", "Claude Code"
    ),
    kind="claude",
    model="claude-sonnet-4-5",
    key="sk-ant-real-agents-claude",
    # Claude Code's own system prompt and 24 tool schemas are ~35k tokens of every request.
    window=50_000,
    steps=8,
    output_bytes=12_000,
    args=lambda work: [
        "-p",
        PROMPT,
        "--output-format",
        "json",
        "--model",
        "claude-sonnet-4-5",
        "--allowedTools",
        "Bash",
    ],
    env=lambda work: {
        "HOME": str(work / "home"),
        "ANTHROPIC_API_KEY": "sk-ant-real-agents-claude",
        # No title request, no telemetry: only the agent's own loop reaches the gateway.
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        # A 50k window cannot hold Claude Code's default 32,000 output tokens.
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096",
    },
    direct_env=lambda url: {"ANTHROPIC_BASE_URL": url},
    finished=claude_finished,
)

CODEX = Agent(
    name="codex",
    binary=lambda: agent_binary(
        "CTXKEEPER_CODEX_BIN", REPO / ".agents/npm/node_modules/.bin/codex", "Codex CLI"
    ),
    kind="codex",
    model="gpt-5",
    key="sk-real-agents-codex",
    window=16_000,
    steps=8,
    output_bytes=12_000,
    args=lambda work: [
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "-m",
        "gpt-5",
        PROMPT,
    ],
    env=lambda work: {"CODEX_HOME": str(work / "codex-home"), "OPENAI_API_KEY": "sk-real-agents-codex"},
    direct_env=lambda url: {},
    direct_args=lambda url: [
        "-c",
        "model_provider=mock",
        "-c",
        f'model_providers.mock={{name="mock",base_url="{url}/v1",env_key="OPENAI_API_KEY",wire_api="responses"}}',
    ],
    finished=lambda run: "All done." in run.stdout,
)

MINI = Agent(
    name="mini-swe-agent",
    binary=lambda: agent_binary(
        "CTXKEEPER_MINI_BIN", REPO / ".agents/mini-venv/bin/mini", "mini-swe-agent"
    ),
    kind="mini",
    model="gpt-4o",
    key="sk-real-agents-mini",
    window=8_000,
    steps=8,
    output_bytes=6_000,
    args=lambda work: [
        "-y",
        "--exit-immediately",
        "-m",
        "openai/gpt-4o",
        "-t",
        PROMPT,
        "-o",
        str(work / "run.traj.json"),
    ],
    env=lambda work: {
        "OPENAI_API_KEY": "sk-real-agents-mini",
        "MSWEA_CONFIGURED": "true",
        "MSWEA_GLOBAL_CONFIG_DIR": str(work / "mini-config"),
        "MSWEA_COST_TRACKING": "ignore_errors",
        "MSWEA_SILENT_STARTUP": "1",
        # litellm would otherwise fetch its price list from GitHub first.
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    },
    direct_env=lambda url: {"OPENAI_BASE_URL": f"{url}/v1"},
    finished=mini_finished,
)

AGENTS = {agent.name: agent for agent in (CLAUDE, CODEX, MINI)}


def run_agent(
    agent: Agent, work: Path, prefix: list[str], extra_args: list[str], env: dict[str, str], timeout: float
) -> Run:
    """Runs the agent (behind `prefix`, e.g. `ctxkeeper wrap …`) in `work`."""
    work.mkdir(parents=True, exist_ok=True)
    for sub in ("home", "codex-home", "mini-config", "repo"):
        (work / sub).mkdir(exist_ok=True)
    argv = [*prefix, *extra_args, *agent.args(work)]
    started = time.monotonic()
    try:
        done = subprocess.run(
            [str(a) for a in argv],
            cwd=work / "repo",
            env={**os.environ, **agent.env(work), **env},
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        code, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        code = -1
        stdout = (expired.stdout or b"").decode() if isinstance(expired.stdout, bytes) else expired.stdout or ""
        stderr = ((expired.stderr or b"").decode() if isinstance(expired.stderr, bytes) else expired.stderr or "") + f"\n(timed out after {timeout}s)"
    return Run(code, stdout, stderr, time.monotonic() - started, work)


def ctxkeeper(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(gateway_binary()), *args], capture_output=True, text=True, timeout=60, check=False
    )


@dataclass
class GatewayRun:
    agent: Agent
    run: Run
    requests: list[dict]
    metrics: str
    store: str
    divergences: float


def scripted_mock(agent: Agent, window: int | None = None, steps: int | None = None, output_bytes: int | None = None):
    return start_mock_upstream(
        window or agent.window,
        "--script-steps",
        str(steps or agent.steps),
        "--script-output-bytes",
        str(output_bytes or agent.output_bytes),
    )


def through_gateway(agent: Agent, work: Path, window: int | None = None, steps: int | None = None,
                    output_bytes: int | None = None, timeout: float = 150) -> GatewayRun:
    binary = agent.binary()
    window = window or agent.window
    mock = scripted_mock(agent, window, steps, output_bytes)
    # The gateway knows the window from the model profile: the agent asks for a model whose
    # real window is far larger. Every body of a known session goes upstream while it arrives
    # (in production only large ones do), so each real client's requests take that path too,
    # the compacted ones having their uploads cut.
    config = write_config(
        work / "ctxkeeper.toml",
        f'[gateway]\nforward_early_from_bytes = 1\n\n[models."{agent.model}"]\ncontext_window = {window}\n',
    )
    gateway = start_gateway(mock.url, work, "--config", str(config))
    try:
        run = run_agent(
            agent,
            work / "agent",
            [gateway_binary(), "wrap", "--quiet", "--gateway", gateway.url, "--agent", agent.kind, binary, "--"],
            [],
            {},
            timeout,
        )
        metrics_text = httpx.get(f"{gateway.url}/metrics", timeout=10).text
        divergences = metric(gateway.url, "ctxkeeper_history_divergences_total")
        requests = mock.requests()
    finally:
        gateway.stop()
        mock.process.stop()
    return GatewayRun(agent, run, requests, metrics_text, f"sqlite://{work / 'sessions.db'}", divergences)


_RUNS: dict[str, GatewayRun] = {}


@pytest.fixture
def gateway_run(name: str, tmp_path_factory) -> GatewayRun:
    """One scripted run of the agent through the gateway, shared by the checks below."""
    if name not in _RUNS:
        agent = AGENTS[name]
        agent.binary()  # skip before starting anything when it is not installed
        _RUNS[name] = through_gateway(agent, tmp_path_factory.mktemp(name))
    return _RUNS[name]


def agents(**known_gateway_failures: str) -> pytest.MarkDecorator:
    """Parametrizes a check over the agents; an agent named here fails it only because of a
    gateway behaviour being fixed (the reason says what was observed), and is expected to."""
    params = [
        pytest.param(
            name,
            marks=[pytest.mark.xfail(strict=True, reason=known_gateway_failures[name.replace("-", "_")])]
            if name.replace("-", "_") in known_gateway_failures
            else [],
        )
        for name in AGENTS
    ]
    return pytest.mark.parametrize("name", params)


def client_statuses(metrics_text: str) -> dict[str, float]:
    """`ctxkeeper_requests_total` by status, over every endpoint."""
    out: dict[str, float] = {}
    for line in metrics_text.splitlines():
        found = re.match(r'ctxkeeper_requests_total\{endpoint="[^"]*",status="(\d+)"\} (\S+)', line)
        if found:
            out[found.group(1)] = out.get(found.group(1), 0) + float(found.group(2))
    return out


@agents()
def test_the_agent_finishes_every_step(gateway_run: GatewayRun):
    run, agent = gateway_run.run, gateway_run.agent
    assert run.code == 0, run.output()
    assert agent.finished(run), run.output()
    # Each step's command (and output) came back to the model at least once.
    seen = set()
    for request in gateway_run.requests:
        seen.update(int(n) for n in MARKER.findall(json.dumps(request["body"])))
    assert seen == set(range(1, agent.steps + 1)), sorted(seen)


def counter(metrics_text: str, name: str) -> float:
    """An unlabelled counter from the gateway's metrics text."""
    found = re.search(rf"^{name} (\S+)$", metrics_text, re.MULTILINE)
    assert found, f"{name} missing from /metrics"
    return float(found.group(1))


# Claude Code and Codex name their session in a header; mini-swe-agent's requests do not
# (its session is found from the conversation), so its bodies are read whole first.
@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_bodies_went_upstream_while_they_arrived(gateway_run: GatewayRun):
    early = counter(gateway_run.metrics, "ctxkeeper_bodies_forwarded_early_total")
    cut = counter(gateway_run.metrics, "ctxkeeper_early_forwards_cut_total")
    assert early > 0, "the agent's requests continue a known session: their uploads start early"
    # Every upload that went on reached the upstream as one request; cut ones never did.
    assert early - cut <= len(gateway_run.requests), (early, cut, len(gateway_run.requests))


@agents()
def test_no_error_reaches_the_agent(gateway_run: GatewayRun):
    statuses = client_statuses(gateway_run.metrics)
    assert statuses.get("200", 0) > gateway_run.agent.steps, statuses
    errors = {status: n for status, n in statuses.items() if status != "200"}
    assert errors == {}, f"the gateway answered the agent with errors: {errors}"


def sessions(store: str, key: str) -> list[dict]:
    listed = ctxkeeper("sessions", "list", "--store", store, "--tenant", tenant_of(key), "--json")
    assert listed.returncode == 0, listed.stderr
    return json.loads(listed.stdout)


@agents()
def test_one_session_per_conversation(gateway_run: GatewayRun):
    found = sessions(gateway_run.store, gateway_run.agent.key)
    assert len(found) == 1, json.dumps(found, indent=1)[:2000]


@agents()
def test_no_history_divergences(gateway_run: GatewayRun):
    assert gateway_run.divergences == 0


@agents()
def test_every_large_output_can_be_found_again(gateway_run: GatewayRun):
    agent = gateway_run.agent
    missing = []
    for step in range(1, agent.steps + 1):
        marker = f"ctxkstep{step}out"
        searched = ctxkeeper(
            "sessions", "search", marker, "--store", gateway_run.store,
            "--tenant", tenant_of(agent.key), "--json",
        )
        assert searched.returncode == 0, searched.stderr
        if marker not in searched.stdout:
            missing.append(step)
    assert missing == [], f"outputs of steps {missing} are not in the session log"


@pytest.mark.parametrize("name", list(AGENTS))
def test_the_same_run_fails_without_the_gateway(name: str, tmp_path: Path):
    agent = AGENTS[name]
    binary = agent.binary()
    mock = scripted_mock(agent)
    try:
        run = run_agent(
            agent, tmp_path, [binary], agent.direct_args(mock.url), agent.direct_env(mock.url), timeout=120
        )
        overflows = [r for r in mock.requests() if overflowed(r, agent.window)]
    finally:
        mock.process.stop()
    assert not (run.code == 0 and agent.finished(run)), "the agent finished without the gateway:\n" + run.output()
    assert overflows, "the mock never refused a request, so the run did not fail for the window"


def test_claude_code_at_200k_keeps_room_for_its_max_tokens(tmp_path: Path):
    """Anthropic rejects input + max_tokens > window; Claude Code asks for 32,000 output
    tokens, so 50 steps of ~15 KB outputs at a 200k window must be budgeted with that in.
    (Claude Code keeps larger outputs in a file and sends a 2 KB preview, so 15 KB is about
    the most one step can add.)"""
    agent = CLAUDE
    agent.binary()
    big = dataclasses.replace(agent, env=lambda work: {
        k: v for k, v in CLAUDE.env(work).items() if k != "CLAUDE_CODE_MAX_OUTPUT_TOKENS"})
    result = through_gateway(big, tmp_path, window=200_000, steps=50, output_bytes=15_000, timeout=280)
    run = result.run
    assert run.code == 0 and agent.finished(run), run.output()
    refused = [r for r in result.requests if overflowed(r, 200_000)]
    assert refused == [], (
        f"{len(refused)} of {len(result.requests)} upstream requests overflowed: "
        + "; ".join(json.dumps(r["body"].get("max_tokens")) + " max_tokens, " + str(r["input_tokens"]) + " input" for r in refused[:5])
    )


CHECKPOINT = "CONTEXT CHECKPOINT COMPACTION"


def test_codex_compacting_itself_stays_one_session(tmp_path: Path):
    """Codex compacts on its own when its usage passes `model_auto_compact_token_limit`: it
    asks the model for a handoff summary ("CONTEXT CHECKPOINT COMPACTION"), then restarts
    its history from the user's messages and that summary. Through the gateway that is the
    same conversation going on: one session, no fork, no divergence, and the prompt is
    never carried into a later request (the capsule does not take it for the user's words)."""
    agent = dataclasses.replace(
        CODEX,
        args=lambda work: [
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "-c",
            "model_auto_compact_token_limit=9000",
            "-m",
            "gpt-5",
            PROMPT,
        ],
    )
    result = through_gateway(agent, tmp_path, steps=8)
    run = result.run
    assert run.code == 0 and agent.finished(run), run.output()
    bodies = [json.dumps(r["body"]) for r in result.requests]
    checkpoints = [i for i, body in enumerate(bodies) if CHECKPOINT in body and "input" in result.requests[i]["body"]
                   and CHECKPOINT in json.dumps(result.requests[i]["body"]["input"][-1])]
    assert checkpoints, "Codex never compacted: the run does not test its compaction"
    carried = [i for i, body in enumerate(bodies) if CHECKPOINT in body and i not in checkpoints]
    assert carried == [], f"requests {carried} carry the checkpoint prompt after its own call"
    assert counter(result.metrics, "ctxkeeper_session_forks_total") == 0
    assert result.divergences == 0
    assert counter(result.metrics, "ctxkeeper_client_compactions_total") >= 1
    found = sessions(result.store, agent.key)
    assert len(found) == 1, json.dumps(found, indent=1)[:2000]


def test_claude_codes_default_model_keeps_its_1m_window(tmp_path: Path):
    """Claude Code's default model (no `--model`) is a newer Opus than the model table lists,
    asked for with the `context-1m` beta header: the gateway must give it the 1M window the
    request asks for, not the 200k of the nearest listed name. 14 steps of ~15 KB outputs
    (about 14k tokens each) take the session past 200k tokens, below the 30 % of 1M where
    `default`'s cost rule may find a compaction worth it, and nothing may be compacted."""
    agent = dataclasses.replace(
        CLAUDE,
        # No `[models]` entry may name the model Claude Code picks: the window comes from the
        # request (its beta header), or from the table's nearest name when that is ignored.
        model="no-such-model",
        args=lambda work: ["-p", PROMPT, "--output-format", "json", "--allowedTools", "Bash"],
        env=lambda work: {
            k: v for k, v in CLAUDE.env(work).items() if k != "CLAUDE_CODE_MAX_OUTPUT_TOKENS"
        },
    )
    agent.binary()
    result = through_gateway(agent, tmp_path, window=1_000_000, steps=14, output_bytes=15_000, timeout=280)
    run = result.run
    assert run.code == 0 and agent.finished(run), run.output()
    loop = [r for r in result.requests if "tools" in r["body"]]
    models = {r["body"].get("model") for r in loop}
    assert not any(m == "claude-sonnet-4-5" for m in models), models
    betas = {value for r in loop for name, value in r.get("headers", []) if name == "anthropic-beta"}
    assert any("context-1m" in beta for beta in betas), f"Claude Code did not ask for the 1M window: {betas}"
    largest = max(r["input_tokens"] for r in loop)
    assert largest > 200_000, f"the session never outgrew a 200k window ({largest} tokens): the run tests nothing"
    assert counter(result.metrics, "ctxkeeper_compactions_total") == 0, (models, betas, largest)
    assert [r for r in result.requests if overflowed(r, 1_000_000)] == []


SUMMARY_MARK = "[ctxkeeper summary request]"


def test_claude_code_in_a_window_its_fixed_prompt_nearly_fills(tmp_path: Path):
    """Claude Code's system prompt and tools are ~32k tokens of every request; in a 38k window
    with 4,096 output tokens that leaves ~2k for the conversation, less than one 12 KB output.
    Each output is cut at ingest to what that room holds (whole in the archive), a recovery
    cuts the newest one further when the provider still refuses, and compactions there do not
    pay a model summary each: the agent finishes, no error reaches it, and the upstream sees
    well under two calls per agent call."""
    agent = CLAUDE
    agent.binary()
    result = through_gateway(agent, tmp_path, window=38_000, steps=8, output_bytes=12_000)
    run = result.run
    assert run.code == 0 and agent.finished(run), run.output()
    statuses = client_statuses(result.metrics)
    assert {s: n for s, n in statuses.items() if s != "200"} == {}, statuses
    summaries = [r for r in result.requests if SUMMARY_MARK in json.dumps(r["body"])]
    agent_calls = len(result.requests) - len(summaries)
    assert len(result.requests) / agent_calls < 1.5, (len(result.requests), agent_calls, len(summaries))


def test_wrap_passes_the_exit_code_through(tmp_path: Path):
    for code in (0, 3, 42):
        done = ctxkeeper("wrap", "--gateway", "http://127.0.0.1:9", "sh", "--", "-c", f"exit {code}")
        assert done.returncode == code, done.stderr


def test_wrap_reports_a_missing_agent_clearly():
    done = ctxkeeper("wrap", "--gateway", "http://127.0.0.1:9", "claude-not-installed-here", "--", "-p", "x")
    assert done.returncode != 0
    assert "not found on PATH" in done.stderr, done.stderr


def test_wrap_starts_a_gateway_for_the_agent_when_none_is_given(tmp_path: Path):
    """Without --gateway, `wrap` serves an embedded gateway (SQLite store and workspace in the
    data directory) for the agent's lifetime."""
    agent = MINI
    binary = agent.binary()
    mock = scripted_mock(agent, window=128_000, steps=2, output_bytes=500)
    data = tmp_path / "data"
    try:
        run = run_agent(
            agent,
            tmp_path / "agent",
            [gateway_binary(), "wrap", "--upstream", f"{mock.url}/v1", "--anthropic-upstream", mock.url, binary, "--"],
            [],
            {"XDG_DATA_HOME": str(data)},
            timeout=120,
        )
        seen = mock.requests()
    finally:
        mock.process.stop()
    assert run.code == 0 and agent.finished(run), run.output()
    assert "ctxkeeper: gateway at http://127.0.0.1:" in run.stderr
    assert all(r["status"] == 200 for r in seen) and len(seen) == 3
    stored = sessions(f"sqlite://{data / 'ctxkeeper' / 'sessions.db'}", agent.key)
    assert len(stored) == 1, stored

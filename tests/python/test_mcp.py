"""End-to-end tests of the MCP server driven by the official `mcp` Python SDK: `ctxkeeper mcp`
over stdio and streamable HTTP, and the `/mcp` endpoint `ctxkeeper serve` mounts.

A real trace is replayed under the default policy with a small window and stored
(`ctxkeeper replay … --store sqlite://… --session S --workspace DIR`); the MCP server is then
started over each transport and every tool is called against that session:

- the largest archived tool output is read back through `context_read` in pages of a few KB
  (several pages) and compared byte-for-byte with the tool output in the original trace and
  with the file the replay wrote into the workspace;
- `session_search` finds a word that only appears in a compacted tool output (it is in the
  archive but in none of the final request's messages);
- hostile inputs (`../`, absolute paths, NUL, another tenant's reference, a 1 MB query, an
  invalid regex) come back as tool errors, never as content;
- `compact` shrinks a private copy of the stored session over stdio, streamable HTTP and
  serve's `/mcp`;
- serve's `/mcp` picks the tenant like the gateway does for model calls (a tenant token,
  else the API key's hash, else `default`), or the one `--mcp-tenant` pins; it refuses foreign
  Host headers, keeps an MCP session in the tenant that opened it, and does not hold up a
  graceful shutdown.

The binary is `$CTXKEEPER_BIN` (default `target/debug/ctxkeeper`, or under `$CARGO_TARGET_DIR`),
the traces `$CTXKEEPER_TRACES` (default /work/shared/data/traces). When either is missing the
tests are skipped with a message, except under CI=true, where they fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import AsyncIterator

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from conftest import LISTENING, RunningProcess, start_process
from mcp_client import http_session, input_schema, is_error, structured

REPO = Path(__file__).resolve().parents[2]
TRACE_NAME = "claude-code/37f83ec9-f2ea-42a9-925e-0d5c105cb6e8.jsonl"
SESSION = "mcp-e2e"
OTHER_TENANT = "acme"
OTHER_SESSION = "acme-secret"
WINDOW = 8000
# Small enough that the largest archived output takes several pages.
READ_LIMIT = 2000
EXPECTED_TOOLS = {
    "session_list",
    "session_history",
    "session_search",
    "context_read",
    "context_grep",
    "context_list",
    "memory_search",
    "memory_get",
    "context_stats",
    "compact",
}
INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "t", "version": "1"}},
}
MCP_ACCEPT = "application/json, text/event-stream"


def skip_or_fail(message: str) -> None:
    """A missing prerequisite skips the test, except under CI=true where it fails."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def ctxkeeper_bin() -> Path:
    configured = os.environ.get("CTXKEEPER_BIN")
    if configured:
        path = Path(configured)
        return path if path.is_absolute() else REPO / path
    target = os.environ.get("CARGO_TARGET_DIR")
    base = Path(target) if target else REPO / "target"
    if not base.is_absolute():
        base = REPO / base
    return base / "debug" / "ctxkeeper"


def run(*args: str | Path) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(ctxkeeper_bin()), *map(str, args)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"ctxkeeper {' '.join(map(str, args))} failed:\n{done.stderr}"
    return done


def trace_tool_outputs(trace: Path) -> dict[str, list]:
    """Every tool result's content in a Claude Code trace, by tool_use_id."""
    outputs: dict[str, list] = {}
    for line in trace.read_text().splitlines():
        message = json.loads(line).get("message") or {}
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                outputs.setdefault(block["tool_use_id"], []).append(block.get("content"))
    return outputs


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> dict:
    """A replayed, stored session plus another tenant's session in the same store and
    workspace."""
    exe = ctxkeeper_bin()
    if not (exe.is_file() and os.access(exe, os.X_OK)):
        skip_or_fail(f"ctxkeeper binary not found at {exe}; run `cargo build` or set CTXKEEPER_BIN")
    traces = Path(os.environ.get("CTXKEEPER_TRACES", "/work/shared/data/traces"))
    trace = traces / TRACE_NAME
    if not trace.is_file():
        skip_or_fail(f"trace {trace} not found; set CTXKEEPER_TRACES to the shared traces")

    root = tmp_path_factory.mktemp("mcp")
    store = f"sqlite://{root / 'sessions.db'}"
    workspace = root / "workspace"
    requests = root / "requests"
    run(
        "replay", trace, "--store", store, "--session", SESSION, "--workspace", workspace,
        "--policy", "default", "--window", str(WINDOW), "--emit-requests", requests,
    )
    # Another tenant's session with its own archived output, in the same store and workspace.
    run(
        "replay", traces / "swe-agent/marshmallow-code__marshmallow-1867.function_calling.traj",
        "--store", store, "--session", OTHER_SESSION, "--tenant", OTHER_TENANT,
        "--workspace", workspace, "--policy", "default", "--window", "4000",
    )

    session_dir = workspace / "sessions" / SESSION
    outputs = sorted(session_dir.glob("tool_result-*.txt"), key=lambda p: p.stat().st_size)
    assert outputs, f"the replay archived no tool output under {session_dir}"

    # The largest archived output whose original in the trace is one plain string: the bytes
    # context_read returns must be the tool's own output, not only what the archive holds.
    originals = trace_tool_outputs(trace)
    largest, original = None, None
    for path in reversed(outputs):
        found = originals.get(path.name.removeprefix("tool_result-").removesuffix(".txt"), [])
        if len(found) == 1 and isinstance(found[0], str):
            largest, original = path, found[0]
            break
    assert largest is not None, "no archived output maps to a plain-string tool result"
    assert len(original.encode()) > 3 * READ_LIMIT, "the output must span several pages"

    # A word that is archived but in none of the messages of the last request sent.
    final_request = sorted(requests.glob("step-*.json"))[-1].read_text()
    word = None
    for path in reversed(outputs):
        for candidate in re.findall(r"[A-Za-z][A-Za-z0-9]{9,}", path.read_text()):
            if candidate not in final_request:
                word = candidate
                break
        if word:
            break
    assert word, "no archived word is missing from the final context"

    other_outputs = sorted(
        (workspace / "tenants" / OTHER_TENANT / "sessions" / OTHER_SESSION).glob("tool_result-*")
    )
    assert other_outputs, "the other tenant's replay archived nothing"
    (workspace / "MEMORY.md").write_text("# Facts\n\nThe staging database is reset every Friday.\n")
    return {
        "store": store,
        "workspace": workspace,
        "largest": largest,
        "original": original,
        "reference": f"sessions/{SESSION}/{largest.name}",
        "word": word,
        "other_reference": f"sessions/{OTHER_SESSION}/{other_outputs[0].name}",
        "other_content": other_outputs[0].read_bytes().decode("utf-8"),
    }


@pytest.fixture
def fresh(stored, tmp_path) -> dict:
    """A private copy of the stored sessions and workspace, for tests that change them."""
    db = Path(stored["store"].removeprefix("sqlite://"))
    for part in db.parent.glob(db.name + "*"):  # the database and its WAL files
        shutil.copy2(part, tmp_path / part.name)
    shutil.copytree(stored["workspace"], tmp_path / "workspace")
    return {**stored, "store": f"sqlite://{tmp_path / db.name}", "workspace": tmp_path / "workspace"}


def server_args(stored: dict, *extra: str, window: int = WINDOW) -> list[str]:
    return [
        "mcp", "--store", stored["store"], "--workspace", str(stored["workspace"]),
        "--window", str(window), *extra,
    ]


def start_mcp_http(stored: dict, *extra: str, window: int = WINDOW) -> RunningProcess:
    """`ctxkeeper mcp --listen 127.0.0.1:0`; its url is the /mcp endpoint."""
    argv = [ctxkeeper_bin(), *server_args(stored, *extra, "--listen", "127.0.0.1:0", window=window)]
    return start_process(argv, LISTENING)


def start_serve(stored: dict, *extra: str, upstream: str = "http://127.0.0.1:9",
                window: int = WINDOW) -> RunningProcess:
    """`ctxkeeper serve` over the stored sessions and workspace; its url is the gateway's root.
    The upstream is only contacted by model calls (port 9 is discard: none are expected unless
    a test passes the mock)."""
    argv = [
        ctxkeeper_bin(), "serve", "--listen", "127.0.0.1:0",
        "--upstream", f"{upstream}/v1", "--anthropic-upstream", upstream,
        "--store", stored["store"], "--workspace", str(stored["workspace"]),
        "--mcp-window", str(window), *extra,
    ]
    return start_process(argv, LISTENING)


def stop(process: RunningProcess) -> None:
    """Stops a server; a graceful shutdown exits 0 (an MCP session must not hold it up)."""
    code = process.stop()
    assert code == 0, f"exit code {code}:\n{process.logs()[-3000:]}"


@contextlib.asynccontextmanager
async def stdio_session(argv: list[str]) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with `ctxkeeper ARGV` over stdio."""
    params = StdioServerParameters(command=str(ctxkeeper_bin()), args=argv)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


def data(result) -> dict:
    """The structured content of a successful call."""
    return structured(result)


def error_text(result) -> str:
    assert is_error(result), f"expected a tool error, got {result}"
    return result.content[0].text


async def sessions_of(session: ClientSession) -> list[str]:
    listed = data(await session.call_tool("session_list", {}))
    return [s["session"] for s in listed["sessions"]]


async def read_all(session: ClientSession, reference: str, limit: int = READ_LIMIT) -> tuple[str, int]:
    """An archived item read through context_read paging: its text and the number of pages."""
    offset, chunks = 0, []
    while True:
        page = data(
            await session.call_tool(
                "context_read", {"reference": reference, "offset": offset, "limit": limit}
            )
        )
        content = page["content"]
        assert len(content.encode()) <= limit
        chunks.append(content)
        if page["next_offset"] is None:
            assert page["complete"] is True
            assert offset + len(content.encode()) == page["total_bytes"]
            break
        assert page["next_offset"] == offset + len(content.encode())
        offset = page["next_offset"]
        assert len(chunks) < 1000
    return "".join(chunks), len(chunks)


async def exercise(session: ClientSession, stored: dict, confined: bool) -> None:
    """Calls every tool against the stored session and checks the results. `confined`: the
    server serves only SESSION (`--session`), so calls need not name it."""
    scope = {} if confined else {"session": SESSION}
    listed = await session.list_tools()
    names = {tool.name for tool in listed.tools}
    assert names == EXPECTED_TOOLS
    for tool in listed.tools:
        assert input_schema(tool)["type"] == "object", tool.name
        assert tool.description and len(tool.description) > 60, tool.name

    sessions = data(await session.call_tool("session_list", {}))
    assert [s["session"] for s in sessions["sessions"]] == [SESSION]
    log_entries = sessions["sessions"][0]["log_entries"]
    assert log_entries > 50

    history = data(await session.call_tool("session_history", {"last": 5, **scope}))
    seqs = [e["seq"] for e in history["entries"]]
    assert seqs == list(range(log_entries - 4, log_entries + 1))
    older = data(
        await session.call_tool(
            "session_history", {"last": 5, "before_seq": history["next_before_seq"], **scope}
        )
    )
    assert [e["seq"] for e in older["entries"]] == list(range(log_entries - 9, log_entries - 4))

    # A word only a compacted tool output holds is found in the full session log.
    found = data(await session.call_tool("session_search", {"query": stored["word"]}))
    assert found["hits"], f"{stored['word']!r} not found"
    assert all(hit["session"] == SESSION for hit in found["hits"])
    assert any(stored["word"].lower() in hit["snippet"].lower() for hit in found["hits"])

    # The largest archived output, paged back: the tool's original output, byte for byte.
    text, pages = await read_all(session, stored["reference"])
    original = stored["original"].encode()
    assert pages > 1 and pages >= -(-len(original) // READ_LIMIT), pages
    assert text.encode() == original
    assert stored["largest"].read_bytes() == original

    grep = data(
        await session.call_tool("context_grep", {"pattern": re.escape(stored["word"]), **scope})
    )
    assert grep["hits"], grep
    hit = grep["hits"][0]
    assert hit["line"] >= 1 and stored["word"] in hit["text"]
    archived_lines = (stored["workspace"] / hit["reference"]).read_text().splitlines()
    assert stored["word"] in archived_lines[hit["line"] - 1]

    listing = data(
        await session.call_tool("context_list", {"pattern": "tool_result-*", **scope})
    )
    assert stored["reference"] in [item["reference"] for item in listing["items"]]
    assert all(item["reference"].startswith(f"sessions/{SESSION}/") for item in listing["items"])

    memory = data(await session.call_tool("memory_search", {"query": "staging database"}))
    assert memory["hits"][0]["path"] == "MEMORY.md"
    got = data(await session.call_tool("memory_get", {"path": "MEMORY.md", "from_line": 3}))
    assert got["text"] == "The staging database is reset every Friday."

    stats = data(await session.call_tool("context_stats", scope))
    assert stats["window_tokens"] == WINDOW
    assert 0 < stats["context_tokens"] <= WINDOW
    assert stats["log_entries"] == log_entries
    assert stats["archived_items"] >= len(listing["items"])
    assert stats["tool_calls"] >= 1 and stats["messages"] >= 1

    await hostile(session, stored, confined)


async def hostile(session: ClientSession, stored: dict, confined: bool) -> None:
    """Hostile inputs: tool errors, never content."""
    secret = stored["other_content"][:40]
    for reference in [
        "../MEMORY.md",
        f"sessions/{SESSION}/../../MEMORY.md",
        "/etc/passwd",
        str(stored["largest"]),
        f"{stored['reference']}\u0000",
        f"tenants/{OTHER_TENANT}/{stored['other_reference']}",
        stored["other_reference"],
    ]:
        result = await session.call_tool("context_read", {"reference": reference})
        message = error_text(result)
        assert message.startswith(("invalid:", "not found:")), (reference, message)
        assert secret not in message
    message = error_text(await session.call_tool("session_search", {"query": "x" * (1 << 20)}))
    assert "limit" in message
    scope = {} if confined else {"session": SESSION}
    message = error_text(
        await session.call_tool("context_grep", {"pattern": "(unclosed[", **scope})
    )
    assert "invalid regular expression" in message
    message = error_text(await session.call_tool("context_list", {"pattern": "../*", **scope}))
    assert message.startswith("invalid:")
    # Another tenant's session id: outside the confined session, and absent from this tenant.
    message = error_text(await session.call_tool("session_history", {"session": OTHER_SESSION}))
    if confined:
        assert "outside this server's scope" in message
    else:
        assert message.startswith("not found:") and "no stored session" in message
    message = error_text(await session.call_tool("memory_get", {"path": "../../etc/passwd"}))
    assert message.startswith("invalid:")
    # The server is still healthy after all of that.
    assert data(await session.call_tool("session_list", {}))["total"] == 1


def test_every_tool_over_stdio(stored):
    async def main() -> None:
        async with stdio_session(server_args(stored, "--session", SESSION)) as session:
            await exercise(session, stored, confined=True)

    asyncio.run(main())


def test_every_tool_over_streamable_http(stored):
    server = start_mcp_http(stored, "--session", SESSION)
    try:
        assert server.url.endswith("/mcp")

        async def main() -> None:
            async with http_session(server.url) as session:
                await exercise(session, stored, confined=True)

        asyncio.run(main())
    finally:
        server.stop()
    print(server.logs()[-2000:], file=sys.stderr)


def test_every_tool_over_serve(stored):
    """serve's /mcp, no tenant header and no API key: the `default` tenant's sessions, all of
    them (not confined to one), the same tools and the same refusals."""
    gateway = start_serve(stored)
    try:
        async def main() -> None:
            async with http_session(f"{gateway.url}/mcp") as session:
                await exercise(session, stored, confined=False)

        asyncio.run(main())
    finally:
        stop(gateway)


async def check_compact(session: ClientSession, scope: dict) -> None:
    before = data(await session.call_tool("context_stats", scope))
    report = data(
        await session.call_tool(
            "compact", {"focus": "keep the open questions", "force": True, **scope})
    )
    after = data(await session.call_tool("context_stats", scope))
    assert report["compacted"] is True, report
    assert report["tokens_before"] == before["context_tokens"]
    assert report["tokens_after"] < report["tokens_before"]
    assert after["context_tokens"] == report["tokens_after"]
    assert after["state_version"] == before["state_version"] + 1
    assert report["archived"], report
    for reference in report["archived"]:
        page = data(await session.call_tool("context_read", {"reference": reference}))
        assert page["total_bytes"] > 0


@pytest.mark.parametrize("transport", ["stdio", "streamable-http", "serve"])
def test_compact_shrinks_the_stored_session(fresh, transport):
    """`compact` over each transport, each on its own copy of the stored session."""
    window = 2000
    confined = ("--session", SESSION)

    async def main(url: str | None) -> None:
        if transport == "stdio":
            async with stdio_session(server_args(fresh, *confined, window=window)) as session:
                await check_compact(session, {})
        elif transport == "streamable-http":
            async with http_session(url) as session:
                await check_compact(session, {})
        else:
            async with http_session(url) as session:
                await check_compact(session, {"session": SESSION})

    if transport == "stdio":
        asyncio.run(main(None))
        return
    if transport == "streamable-http":
        server = start_mcp_http(fresh, *confined, window=window)
        url = server.url
    else:
        server = start_serve(fresh, window=window)
        url = f"{server.url}/mcp"
    try:
        asyncio.run(main(url))
    finally:
        # `mcp --listen` stops on ctrl-c only; serve's graceful shutdown is checked.
        stop(server) if transport == "serve" else server.stop()


def test_http_refuses_a_foreign_host_header(stored):
    """rmcp's DNS-rebinding guard: only loopback Host headers unless --allow-host names more."""
    server = start_mcp_http(stored)
    try:
        headers = {"accept": MCP_ACCEPT, "host": "evil.example"}
        answer = httpx.post(server.url, json=INITIALIZE, headers=headers, timeout=10)
        assert answer.status_code in (400, 403, 421), answer.status_code
        headers["host"] = server.url.split("/")[2]
        answer = httpx.post(server.url, json=INITIALIZE, headers=headers, timeout=10)
        assert answer.status_code == 200, (answer.status_code, answer.text)
    finally:
        server.stop()


def test_tenant_scope_over_stdio(stored):
    """A server for the other tenant sees only its session, and none of ours."""

    async def main() -> None:
        async with stdio_session(server_args(stored, "--tenant", OTHER_TENANT)) as session:
            await check_other_tenant(session, stored)

    asyncio.run(main())


async def check_other_tenant(session: ClientSession, stored: dict) -> None:
    """`session` serves OTHER_TENANT: its session and archive only."""
    assert await sessions_of(session) == [OTHER_SESSION]
    theirs = data(await session.call_tool("context_read", {"reference": stored["other_reference"]}))
    assert theirs["content"] == stored["other_content"][: len(theirs["content"])]
    ours = await session.call_tool("context_read", {"reference": stored["reference"]})
    assert error_text(ours).startswith("not found:")
    search = data(await session.call_tool("session_search", {"query": stored["word"]}))
    assert all(hit["session"] == OTHER_SESSION for hit in search["hits"])


def test_serve_mcp_uses_the_gateways_tenant_rule(fresh, mock_upstream):
    """A model call through the gateway with an API key lands in that key's tenant; an MCP
    client sending the same key reads exactly that tenant, a tenant token names its tenant as
    it does for model calls, x-ctxkeeper-tenant alone is refused (the gateway does not trust
    it by default), and no headers mean `default`."""
    token = "acme-e2e-token-0123"
    gateway = start_serve(fresh, "--tenant-token", f"{OTHER_TENANT}={token}",
                          upstream=mock_upstream.url)
    key = "sk-mcp-e2e-tenant-key"
    codeword = "QUASARPELICAN"
    try:
        answer = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            headers={"authorization": f"Bearer {key}", "x-ctxkeeper-session": "gw-chat"},
            json={"model": "gpt-4o",
                  "messages": [{"role": "user", "content": f"The codeword is {codeword}."}]},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text

        async def main() -> None:
            async with http_session(f"{gateway.url}/mcp", {"authorization": f"Bearer {key}"}) as s:
                assert await sessions_of(s) == ["gw-chat"]
                hits = data(await s.call_tool("session_search", {"query": codeword}))["hits"]
                assert [hit["session"] for hit in hits] == ["gw-chat"]
                history = data(await s.call_tool("session_history", {"session": "gw-chat"}))
                assert codeword in history["entries"][0]["text"]
                ours = await s.call_tool("context_read", {"reference": fresh["reference"]})
                assert error_text(ours).startswith("not found:")
            async with http_session(f"{gateway.url}/mcp") as s:
                assert await sessions_of(s) == [SESSION]
                hits = data(await s.call_tool("session_search", {"query": codeword}))["hits"]
                assert hits == []
            # A tenant token wins over the key, exactly as for model calls.
            headers = {"authorization": f"Bearer {key}", "x-ctxkeeper-tenant-token": token}
            async with http_session(f"{gateway.url}/mcp", headers) as s:
                await check_other_tenant(s, fresh)

        asyncio.run(main())
        # Naming a tenant without its token reads nothing of it.
        for headers, status in [
            ({"x-ctxkeeper-tenant": OTHER_TENANT}, 403),
            ({"x-ctxkeeper-tenant-token": "not-a-known-token"}, 401),
            ({"x-ctxkeeper-tenant-token": token, "x-ctxkeeper-tenant": "default"}, 403),
        ]:
            answer = httpx.post(f"{gateway.url}/mcp", json=INITIALIZE, timeout=10,
                                headers={"accept": MCP_ACCEPT, **headers})
            assert answer.status_code == status, (headers, answer.status_code, answer.text)
    finally:
        stop(gateway)
    assert key not in gateway.logs()


def test_serve_mcp_tenant_pinned_by_flag(stored):
    """--mcp-tenant: every client reads that tenant, whatever its API key; a header naming
    another tenant is refused."""
    gateway = start_serve(stored, "--mcp-tenant", OTHER_TENANT)
    url = f"{gateway.url}/mcp"
    try:
        async def main() -> None:
            async with http_session(url) as session:
                await check_other_tenant(session, stored)
            async with http_session(url, {"authorization": "Bearer sk-any"}) as session:
                assert await sessions_of(session) == [OTHER_SESSION]

        asyncio.run(main())
        for tenant, status in [("default", 403), (OTHER_TENANT, 200)]:
            answer = httpx.post(
                url, json=INITIALIZE, timeout=10,
                headers={"accept": MCP_ACCEPT, "x-ctxkeeper-tenant": tenant},
            )
            assert answer.status_code == status, (tenant, answer.status_code, answer.text)
    finally:
        stop(gateway)


def test_serve_mcp_refuses_foreign_hosts_bad_tenants_and_borrowed_sessions(stored):
    # Behind a proxy that names tenants, so that sessions of two tenants can be compared.
    gateway = start_serve(stored, "--trust-tenant-header")
    url = f"{gateway.url}/mcp"
    try:
        def post(body: dict, **headers: str) -> httpx.Response:
            headers = {"accept": MCP_ACCEPT, **{k.replace("_", "-"): v for k, v in headers.items()}}
            return httpx.post(url, json=body, headers=headers, timeout=10)

        # The loopback Host check of the standalone server applies at serve's /mcp too.
        assert post(INITIALIZE, host="evil.example").status_code == 403
        assert post(INITIALIZE, host=url.split("/")[2]).status_code == 200
        # A tenant that is not an identifier never reaches a tool.
        for tenant in ["../acme", "a/b", "/etc"]:
            answer = post(INITIALIZE, x_ctxkeeper_tenant=tenant)
            assert answer.status_code == 400, (tenant, answer.status_code)
        # An MCP session opened for acme is unknown to any other tenant.
        opened = post(INITIALIZE, x_ctxkeeper_tenant=OTHER_TENANT)
        assert opened.status_code == 200
        session_id = opened.headers["mcp-session-id"]
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "session_list", "arguments": {}}}
        borrowed = post(call, mcp_session_id=session_id)
        assert borrowed.status_code == 404, (borrowed.status_code, borrowed.text)
        assert OTHER_SESSION not in borrowed.text

        # An open MCP event stream does not hold up the graceful shutdown.
        post({"jsonrpc": "2.0", "method": "notifications/initialized"},
             x_ctxkeeper_tenant=OTHER_TENANT, mcp_session_id=session_id)
        with httpx.stream(
            "GET", url, timeout=30,
            headers={"accept": "text/event-stream", "x-ctxkeeper-tenant": OTHER_TENANT,
                     "mcp-session-id": session_id, "mcp-protocol-version": "2025-06-18"},
        ) as events:
            assert events.status_code == 200
            stop(gateway)
    finally:
        gateway.stop()


def test_serve_mcp_over_memory_backends(mock_upstream):
    """With --store memory:// and --workspace memory:// nothing outlives the gateway's own
    handles: /mcp is mounted over them, so a tool output the gateway archived at ingest is read
    back whole over MCP."""
    gateway = start_serve({"store": "memory://", "workspace": "memory://"}, upstream=mock_upstream.url)
    # gpt-4's window is 8,192 tokens: an output over 40 % of it is archived and cut at ingest.
    output = "".join(f"line {i:03}: {'build log entry ' * 4}\n" for i in range(300))
    call = {"id": "call_1", "type": "function", "function": {"name": "run_build", "arguments": "{}"}}
    auth = {"authorization": "Bearer sk-memory-backends"}
    try:
        answer = httpx.post(
            f"{gateway.url}/v1/chat/completions",
            headers={**auth, "x-ctxkeeper-session": "in-memory"},
            json={"model": "gpt-4", "messages": [
                {"role": "user", "content": "Run the build."},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_1", "content": output},
            ]},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text

        async def main() -> None:
            async with http_session(f"{gateway.url}/mcp", auth) as s:
                assert await sessions_of(s) == ["in-memory"]
                listing = data(await s.call_tool(
                    "context_list", {"session": "in-memory", "pattern": "tool_result-*"}))
                references = [item["reference"] for item in listing["items"]]
                assert len(references) == 1, listing
                text, _ = await read_all(s, references[0])
                assert text == output

        asyncio.run(main())
    finally:
        stop(gateway)


def test_serve_without_mcp(stored):
    gateway = start_serve(stored, "--no-mcp")
    try:
        answer = httpx.post(f"{gateway.url}/mcp", json=INITIALIZE,
                            headers={"accept": MCP_ACCEPT}, timeout=10)
        assert answer.status_code == 404
        assert httpx.get(f"{gateway.url}/healthz", timeout=10).status_code == 200
    finally:
        stop(gateway)


def test_compact_at_serve_mcp_then_the_agent_continues(fresh, mock_upstream):
    """The scenario that broke: an agent runs 30 tool rounds through `ctxkeeper serve`, then
    calls the advertised MCP tool `compact` at /mcp on its own session; its next requests
    (official openai client) must keep working, reuse the compacted context, and log only
    what is new. Before the shared snapshot codec every later request answered 500
    ("missing field `format`")."""
    from openai import OpenAI

    gateway = start_serve(fresh, upstream=mock_upstream.url)
    key = "sk-compact-then-continue"
    session = "agent-compacted"
    client = OpenAI(base_url=f"{gateway.url}/v1", api_key=key,
                    default_headers={"x-ctxkeeper-session": session})
    tools = [{"type": "function", "function": {"name": "read_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}}}}}]
    messages = [{"role": "system", "content": "You are a careful coding agent."},
                {"role": "user", "content": "Fix the failing invoice test."}]

    def step(i: int) -> None:
        call = f"call_{i}"
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call, "type": "function",
             "function": {"name": "read_file", "arguments": json.dumps({"path": f"src/f{i}.py"})}}]})
        messages.append({"role": "tool", "tool_call_id": call,
                         "content": f"contents of src/f{i}.py: " + "def total(x): return round(x, 2)\n" * 60})
        answer = client.chat.completions.create(model="gpt-4o", messages=messages, tools=tools)
        assert answer.choices[0].message is not None

    try:
        for i in range(30):
            step(i)

        async def compact() -> dict:
            async with http_session(f"{gateway.url}/mcp", {"authorization": f"Bearer {key}"}) as s:
                # Forced: the gateway has just compacted, so the context is below the trigger.
                return data(await s.call_tool("compact", {"session": session, "force": True}))

        result = asyncio.run(compact())
        assert result["compacted"], result
        assert result["tokens_after"] < result["tokens_before"], result

        # The agent goes on: 200s, its session continued (not rebuilt, not forked).
        for i in range(30, 33):
            step(i)
        last = client.chat.completions.with_raw_response.create(
            model="gpt-4o", messages=messages, tools=tools)
        assert last.headers["x-ctxkeeper-session"] == session
        # The compacted context was reused: upstream got fewer messages than the client sent.
        forwarded = mock_upstream.requests()[-1]["body"]["messages"]
        assert len(forwarded) < len(messages), (len(forwarded), len(messages))
        metrics = httpx.get(f"{gateway.url}/metrics", timeout=10).text
        assert re.search(r"^ctxkeeper_history_divergences_total 0$", metrics, re.M), metrics
        assert re.search(r"^ctxkeeper_session_forks_total 0$", metrics, re.M), metrics
        # Every message was logged once.
        async def history() -> dict:
            async with http_session(f"{gateway.url}/mcp", {"authorization": f"Bearer {key}"}) as s:
                return data(await s.call_tool("session_history", {"session": session, "last": 500}))

        entries = asyncio.run(history())["entries"]
        assert len(entries) == len(messages), (len(entries), len(messages))
    finally:
        stop(gateway)

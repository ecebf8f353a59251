"""The official `mcp` Python SDK as the MCP tests' client, across its two API generations.

The agent frameworks tested alongside (openai-agents, agentscope) hold the SDK below 2.0, while
a user's own client may be 2.x; the server must serve both, so the tests read results through
these helpers rather than one generation's attribute names:

- 1.x names fields in camelCase (`isError`, `structuredContent`, `inputSchema`) and its
  streamable-HTTP client yields `(read, write, get_session_id)`;
- 2.x names them in snake_case and yields `(read, write)`.

    async with http_session(url) as session:
        result = await session.call_tool("session_list", {})
        assert not is_error(result)
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, AsyncIterator

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def field(model: Any, snake: str, camel: str) -> Any:
    """A field of an SDK model under its 2.x (snake_case) or 1.x (camelCase) name."""
    if hasattr(model, snake):
        return getattr(model, snake)
    return getattr(model, camel)


def is_error(result: Any) -> bool:
    return bool(field(result, "is_error", "isError"))


def structured_content(result: Any) -> Any:
    return field(result, "structured_content", "structuredContent")


def input_schema(tool: Any) -> dict:
    return field(tool, "input_schema", "inputSchema")


def structured(result: Any) -> dict:
    """The structured content of a successful call (or its JSON text when a server sent none)."""
    assert not is_error(result), f"tool error: {result.content}"
    content = structured_content(result)
    if content is not None:
        return content
    return json.loads(result.content[0].text)


@contextlib.asynccontextmanager
async def http_session(url: str, headers: dict | None = None) -> AsyncIterator[ClientSession]:
    """An initialized MCP session over streamable HTTP, sending `headers` on every request."""
    async with create_mcp_http_client(headers=headers) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            read, write = streams[0], streams[1]
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session

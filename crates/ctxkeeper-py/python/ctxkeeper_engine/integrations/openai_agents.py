"""ctxkeeper as an OpenAI Agents SDK ``Session``, with the per-call input filter its runs take.

The session keeps a conversation's items in a :class:`~ctxkeeper_engine.ContextManager`
(``wire="responses"``): ``get_items`` returns the managed context (big outputs cut to previews,
older rounds compacted), not the raw log. Within one run the SDK sends every model call the
run's whole input plus what the run generated so far, without asking the session again; the
session's :meth:`~CtxkeeperSession.model_input_filter` (``RunConfig(call_model_input_filter=...)``,
or :meth:`~CtxkeeperSession.run_config`) makes every call of the run managed too::

    from agents import Agent, Runner
    from ctxkeeper_engine.integrations.openai_agents import CtxkeeperSession

    session = CtxkeeperSession("task-1", model="gpt-4o", window=128_000)
    result = await Runner.run(agent, "Fix the failing test", session=session,
                              run_config=session.run_config())
    session.manager.search("Traceback")   # what left the context is still there

The items the SDK adds are ingested at the next model call or ``get_items`` (a function call and
its output arrive in one batch). ``pop_item`` takes back an item not yet ingested at no cost; an
older one rebuilds the manager from the items kept so far.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from typing import Any

from agents import RunConfig
from agents.run_config import CallModelData, ModelInputData

from .. import ContextManager

__all__ = ["CtxkeeperSession"]


class CtxkeeperSession:
    """A ``Session`` (``agents.memory.Session`` protocol) whose history is ctxkeeper's managed
    context.

    ``policy``, ``model``, ``window`` and every other keyword go to
    :class:`~ctxkeeper_engine.ContextManager` (``store=`` persists the session under
    ``session_id``; ``workspace=`` keeps the archive). The agent's instructions and tools are
    counted from its first model call on (they reach the session only then).
    """

    session_settings = None

    def __init__(self, session_id: str, policy: Any = "default", *, model: str = "gpt-4o", window: int | None = None, **options: Any) -> None:
        self.session_id = session_id
        self._policy = policy
        self._options = {"model": model, "window": window, **options}
        if self._options.get("store") is not None:
            self._options.setdefault("session", session_id)
        self._manager: ContextManager | None = None
        self._instructions: Any = None  # learnt at the first model call, kept for a rebuild
        self._tools: list[dict[str, Any]] = []
        self._log: list[dict[str, Any]] = []  # every item added, as given (for pop_item)
        self._pending: list[dict[str, Any]] = []  # added, not ingested yet
        self._history = 0  # items of the run's input that came from get_items
        self._since_get = 0  # items added since that get_items
        self._absorbed = 0  # items the filter ingested before the SDK added them
        self._calls = 0  # model calls the filter prepared
        self._lock = asyncio.Lock()

    # ----- what a caller reads --------------------------------------------------------------

    @property
    def manager(self) -> ContextManager:
        """The session's manager: ``search``, ``read``, ``stats``, ``events``."""
        return self._ensure()

    def run_config(self, **fields: Any) -> RunConfig:
        """A ``RunConfig`` whose every model call goes through :meth:`model_input_filter`."""
        return RunConfig(call_model_input_filter=self.model_input_filter, **fields)

    # ----- the Session protocol -------------------------------------------------------------

    async def get_items(self, limit: int | None = None) -> list[dict[str, Any]]:
        async with self._lock:
            items = self._flush().messages
            if limit is not None:
                items = items[-limit:] if limit > 0 else []
            self._history = len(items)
            self._since_get = 0
            self._absorbed = 0
            return items

    async def add_items(self, items: list[Any]) -> None:
        async with self._lock:
            items = [_plain(item) for item in items]
            self._since_get += len(items)
            skip = min(self._absorbed, len(items))
            self._absorbed -= skip
            self._log.extend(items)
            self._pending.extend(items[skip:])

    async def pop_item(self) -> dict[str, Any] | None:
        async with self._lock:
            if not self._log:
                return None
            item = self._log.pop()
            if self._pending:
                self._pending.pop()
            else:
                # Already in the manager, which takes nothing back: rebuild it from the log.
                self._manager = None
                self._pending = list(self._log)
            self._since_get = max(self._since_get - 1, 0)
            return item

    async def clear_session(self) -> None:
        async with self._lock:
            self._manager = None
            self._log.clear()
            self._pending.clear()
            self._history = self._since_get = self._absorbed = 0

    # ----- every model call of a run ----------------------------------------------------------

    async def model_input_filter(self, data: CallModelData[Any]) -> ModelInputData:
        """``RunConfig.call_model_input_filter``: the run's input becomes the managed context.

        The run's input is the history ``get_items`` returned, then the run's new input and
        what it generated; whatever of it the SDK has not added to the session yet is ingested
        now (and skipped when the SDK adds it).
        """
        async with self._lock:
            model_data = data.model_data
            if self._manager is None:
                self._instructions = model_data.instructions
                self._tools = _tool_schemas(data.agent)
            fresh = [_plain(item) for item in model_data.input[self._history :]]
            extra = fresh[self._since_get :]
            self._absorbed += len(extra)
            self._since_get += len(extra)
            self._log.extend(extra)
            self._pending.extend(extra)
            if self._manager is not None and self._calls:
                # The SDK does not show the filter the previous call's usage: anchor the count
                # on that request's exact size, so only what is new is estimated.
                self._manager.usage(self._manager.count_tokens())
            self._calls += 1
            prepared = self._flush()
            return ModelInputData(input=prepared.messages, instructions=model_data.instructions)

    # ----- the work -------------------------------------------------------------------------

    def _ensure(self) -> ContextManager:
        if self._manager is None:
            options = dict(self._options)
            if self._instructions:
                options.setdefault("system", self._instructions)
            if self._tools:
                options.setdefault("tools", self._tools)
            self._manager = ContextManager(self._policy, wire="responses", **options)
        return self._manager

    def _flush(self):
        manager = self._ensure()
        pending, self._pending = self._pending, []
        try:
            return manager.prepare(pending)
        except BaseException:
            self._pending = pending + self._pending
            raise


def _plain(item: Any) -> dict[str, Any]:
    """An input item as a plain dict (the SDK passes TypedDicts, sometimes pydantic models)."""
    if isinstance(item, dict):
        return item
    dump = getattr(item, "model_dump", None)
    if dump is not None:
        return dump(exclude_unset=True)
    return json.loads(json.dumps(item, default=lambda o: dataclasses.asdict(o)))


def _tool_schemas(agent: Any) -> list[dict[str, Any]]:
    """The agent's function tools in the Responses shape (what each request declares)."""
    schemas = []
    for tool in getattr(agent, "tools", None) or []:
        parameters = getattr(tool, "params_json_schema", None)
        if parameters is None:
            continue
        schemas.append({"type": "function", "name": tool.name, "description": getattr(tool, "description", "") or "", "parameters": parameters})
    return schemas

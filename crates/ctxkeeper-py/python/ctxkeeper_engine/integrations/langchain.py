"""ctxkeeper as LangChain v1 agent middleware: ``create_agent(..., middleware=[CtxkeeperMiddleware()])``.

Before every model call the middleware hands the messages the agent added since the previous
call to a :class:`~ctxkeeper_engine.ContextManager` and sends what it prepares instead of the
whole history: big tool outputs are cut to previews at ingest (the whole text goes to the
archive), older rounds are compacted when the context nears the window, and a provider's
context-overflow error is answered by compacting harder and retrying once more. The agent's own
state (``state["messages"]``, a checkpointer's threads) keeps everything as it was::

    from langchain.agents import create_agent
    from ctxkeeper_engine.integrations.langchain import CtxkeeperMiddleware

    keeper = CtxkeeperMiddleware(model="gpt-4o", window=128_000)
    agent = create_agent("openai:gpt-4o", tools=[...], middleware=[keeper])
    agent.invoke({"messages": [{"role": "user", "content": "Fix the failing test"}]})
    keeper.manager().search("Traceback")   # what left the context is still there

One manager per LangGraph thread (``config={"configurable": {"thread_id": ...}}``); a history
that no longer starts like the one the manager was fed (another run without a checkpointer, a
middleware that rewrote it) starts a fresh manager.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, convert_to_messages, convert_to_openai_messages
from langchain_core.utils.function_calling import convert_to_openai_tool

from .. import ContextManager, Prepared

__all__ = ["CtxkeeperMiddleware"]

DEFAULT_THREAD = "default"


class _Thread:
    """One thread's manager and what it was fed."""

    def __init__(self, manager: ContextManager) -> None:
        self.manager = manager
        self.seen = 0  # messages of the agent state ingested
        self.last_id: str | None = None  # the id of the last one, to notice a rewritten history
        self.sent: list[BaseMessage] = []  # the conversation of the last request, in LangChain messages
        self.system: Any = None  # the system prompt the manager was created with


class CtxkeeperMiddleware(AgentMiddleware):
    """Keeps a LangChain agent's model calls inside the window, losing nothing.

    ``policy``, ``model``, ``window`` and every other keyword go to
    :class:`~ctxkeeper_engine.ContextManager` (``store=`` and ``workspace=`` persist sessions
    and archives; the thread id is the session id). ``max_overflow_retries``: how many times a
    context-overflow error from the provider is answered by a harder compaction and a retry.
    """

    def __init__(
        self,
        policy: Any = "default",
        *,
        model: str = "gpt-4o",
        window: int | None = None,
        max_overflow_retries: int = 2,
        **options: Any,
    ) -> None:
        super().__init__()
        self._options = {"model": model, "window": window, **options}
        self._policy = policy
        self._threads: dict[str, _Thread] = {}
        self._lock = threading.Lock()
        self.max_overflow_retries = max_overflow_retries
        self.overflows_recovered = 0

    # ----- what a caller reads --------------------------------------------------------------

    def manager(self, thread_id: str | None = None) -> ContextManager:
        """The manager of a thread (the only one when ``thread_id`` is None): ``search``,
        ``read``, ``stats``, ``events`` on what the agent's context held."""
        with self._lock:
            if thread_id is None and len(self._threads) == 1:
                return next(iter(self._threads.values())).manager
            thread = self._threads.get(thread_id or DEFAULT_THREAD)
        if thread is None:
            raise KeyError(f"no model call was made on thread {thread_id!r}")
        return thread.manager

    # ----- the hook -------------------------------------------------------------------------

    def wrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], ModelResponse]) -> Any:
        thread = self._thread(request)
        managed = self._prepare(thread, request)
        for attempt in range(self.max_overflow_retries + 1):
            try:
                response = handler(managed)
                break
            except Exception as error:  # noqa: BLE001 - only context overflows are answered
                managed = self._recover(thread, request, error, attempt)
        self._usage(thread, response)
        return response

    async def awrap_model_call(self, request: ModelRequest, handler: Callable[[ModelRequest], Any]) -> Any:
        thread = self._thread(request)
        managed = self._prepare(thread, request)
        for attempt in range(self.max_overflow_retries + 1):
            try:
                response = await handler(managed)
                break
            except Exception as error:  # noqa: BLE001
                managed = self._recover(thread, request, error, attempt)
        self._usage(thread, response)
        return response

    # ----- the work -------------------------------------------------------------------------

    def _thread(self, request: ModelRequest) -> _Thread:
        key = _thread_id()
        with self._lock:
            thread = self._threads.get(key)
            messages = request.messages
            stale = thread is not None and (
                thread.seen > len(messages)
                or (thread.seen > 0 and getattr(messages[thread.seen - 1], "id", None) != thread.last_id)
            )
            if thread is None or stale:
                thread = self._threads[key] = _Thread(self._new_manager(request, key))
            return thread

    def _new_manager(self, request: ModelRequest, key: str) -> ContextManager:
        options = dict(self._options)
        system = request.system_message
        if system is not None:
            options.setdefault("system", _system_text(system))
        tools = [_tool_schema(tool) for tool in request.tools]
        if tools:
            options.setdefault("tools", tools)
        if options.get("store") is not None:
            options.setdefault("session", key)
        return ContextManager(self._policy, wire="openai-chat", **options)

    def _prepare(self, thread: _Thread, request: ModelRequest) -> ModelRequest:
        new = request.messages[thread.seen :]
        max_tokens = getattr(request.model, "max_tokens", None)
        prepared = thread.manager.prepare(convert_to_openai_messages(new), max_tokens=max_tokens)
        thread.seen = len(request.messages)
        thread.last_id = getattr(request.messages[-1], "id", None) if request.messages else None
        if prepared.changed:
            thread.sent = _conversation(prepared)
        else:
            thread.sent = thread.sent + list(new)
        return request.override(messages=list(thread.sent))

    def _recover(self, thread: _Thread, request: ModelRequest, error: Exception, attempt: int) -> ModelRequest:
        if attempt >= self.max_overflow_retries:
            raise error
        prepared = thread.manager.on_overflow(error)
        if prepared is None:
            raise error
        self.overflows_recovered += 1
        thread.sent = _conversation(prepared)
        return request.override(messages=list(thread.sent))

    def _usage(self, thread: _Thread, response: Any) -> None:
        """Calibrates the count with the input tokens the provider reported."""
        if isinstance(response, AIMessage):
            messages = [response]
        else:
            inner = getattr(response, "model_response", response)  # ExtendedModelResponse
            messages = getattr(inner, "result", None) or []
        for message in messages:
            usage = getattr(message, "usage_metadata", None)
            if usage and usage.get("input_tokens"):
                thread.manager.usage(int(usage["input_tokens"]))
                return


def _conversation(prepared: Prepared) -> list[BaseMessage]:
    """The prepared request as LangChain messages, without the system prompt the request
    carries apart (``request.system_message``)."""
    messages = prepared.messages
    if messages and messages[0].get("role") == "system":
        messages = messages[1:]
    return convert_to_messages(messages)


def _system_text(system: SystemMessage) -> Any:
    content = system.content
    return content if isinstance(content, str) else system.text


def _tool_schema(tool: Any) -> Any:
    """A tool as the provider sees it (a provider's built-in tool dict stays as given)."""
    if isinstance(tool, Mapping) and "type" in tool and tool.get("type") != "function":
        return dict(tool)
    return convert_to_openai_tool(tool)


def _thread_id() -> str:
    """The LangGraph thread of the running graph (its ``thread_id``), else the default one."""
    try:
        from langgraph.config import get_config

        configurable = get_config().get("configurable") or {}
    except (ImportError, RuntimeError):
        return DEFAULT_THREAD
    thread = configurable.get("thread_id")
    return str(thread) if thread is not None else DEFAULT_THREAD

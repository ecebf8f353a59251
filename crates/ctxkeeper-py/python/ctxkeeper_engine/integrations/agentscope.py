"""ctxkeeper as AgentScope (2.x) agent middleware: ``Agent(..., middlewares=[CtxkeeperMiddleware()])``.

The middleware sits on AgentScope's ``on_model_call`` hook: before every model call it formats
the agent's messages with the model's own formatter, hands what is new since the previous call
to a :class:`~ctxkeeper_engine.ContextManager`, and calls the model with the managed context
instead (big tool outputs cut to previews with the whole text archived, older rounds compacted
when the context nears the window); a context-overflow error from the provider is answered by
compacting harder and calling again. It also takes AgentScope's ``on_compress_context`` hook
so the agent's own summary compression does not run on top (``replace_compression=False``
keeps it). The agent's state keeps every message as it was::

    from agentscope.agent import Agent
    from ctxkeeper_engine.integrations.agentscope import CtxkeeperMiddleware

    keeper = CtxkeeperMiddleware(model="gpt-4o", window=128_000)
    agent = Agent(name="builder", system_prompt="...", model=model, toolkit=toolkit,
                  middlewares=[keeper])
    await agent.reply(UserMsg("user", "Fix the failing test"))
    keeper.manager.search("Traceback")   # what left the context is still there

One manager per middleware (give each agent its own middleware); a conversation that no longer
starts like the one the manager was fed starts a fresh manager.
"""

from __future__ import annotations

import json
from typing import Any

from agentscope.message import AssistantMsg, Msg, SystemMsg, TextBlock, ToolCallBlock, ToolResultBlock, UserMsg
from agentscope.middleware import MiddlewareBase

from .. import ContextManager

__all__ = ["CtxkeeperMiddleware"]


class CtxkeeperMiddleware(MiddlewareBase):
    """Keeps an AgentScope agent's model calls inside the window, losing nothing.

    ``policy``, ``model``, ``window`` and every other keyword go to
    :class:`~ctxkeeper_engine.ContextManager`; ``window`` defaults to the chat model's
    ``context_size``. ``max_overflow_retries``: how many times a context-overflow error is
    answered by a harder compaction and another call.
    """

    def __init__(
        self,
        policy: Any = "default",
        *,
        model: str = "gpt-4o",
        window: int | None = None,
        replace_compression: bool = True,
        max_overflow_retries: int = 2,
        **options: Any,
    ) -> None:
        super().__init__()
        self._policy = policy
        self._options = {"model": model, "window": window, **options}
        self._manager: ContextManager | None = None
        self._fed: list[dict[str, Any]] = []  # the formatted messages ingested, as formatted
        self._system: Any = None
        self._reported = False  # whether the provider reported the last call's usage
        self.replace_compression = replace_compression
        self.max_overflow_retries = max_overflow_retries
        self.overflows_recovered = 0

    @property
    def manager(self) -> ContextManager:
        """The manager (after the first model call): ``search``, ``read``, ``stats``, ``events``."""
        if self._manager is None:
            raise LookupError("no model call went through this middleware yet")
        return self._manager

    # ----- the hooks ------------------------------------------------------------------------

    async def on_model_call(self, agent: Any, input_kwargs: dict, next_handler: Any) -> Any:
        model = input_kwargs["current_model"]
        formatted = await model.formatter.format(input_kwargs["messages"])
        system, conversation = _split_system(formatted)
        manager = self._manager_for(model, system, conversation, input_kwargs.get("tools") or [])
        if self._fed and not self._reported:
            # No usage came back for the previous call: anchor the count on that request's
            # exact size instead, so the estimate of what is new starts from the truth.
            manager.usage(manager.count_tokens())
        self._reported = False
        new = conversation[len(self._fed) :]
        prepared = manager.prepare(new)
        self._fed = conversation
        messages = _to_msgs(prepared.messages, agent.name)
        for attempt in range(self.max_overflow_retries + 1):
            try:
                response = await next_handler(messages=messages)
                break
            except Exception as error:  # noqa: BLE001 - only context overflows are answered
                recovered = manager.on_overflow(error) if attempt < self.max_overflow_retries else None
                if recovered is None:
                    raise
                self.overflows_recovered += 1
                messages = _to_msgs(recovered.messages, agent.name)
        if hasattr(response, "__aiter__"):
            return self._streamed(manager, response)
        self._report(manager, response)
        return response

    async def _streamed(self, manager: ContextManager, chunks: Any) -> Any:
        """The model's stream as it comes, its usage (on the last chunks) reported."""
        async for chunk in chunks:
            self._report(manager, chunk)
            yield chunk

    def _report(self, manager: ContextManager, response: Any) -> None:
        usage = getattr(response, "usage", None)
        tokens = getattr(usage, "input_tokens", None) if usage is not None else None
        if tokens:
            manager.usage(int(tokens))
            self._reported = True

    async def on_compress_context(self, agent: Any, input_kwargs: dict, next_handler: Any) -> None:
        if not self.replace_compression:
            await next_handler(**input_kwargs)

    # ----- the work -------------------------------------------------------------------------

    def _manager_for(self, model: Any, system: Any, conversation: list[dict], tools: list[dict]) -> ContextManager:
        fed = self._fed
        stale = self._manager is not None and (len(fed) > len(conversation) or (fed and conversation[len(fed) - 1] != fed[-1]))
        if self._manager is None or stale:
            options = dict(self._options)
            if options.get("window") is None and getattr(model, "context_size", None):
                options["window"] = int(model.context_size)
            if system is not None:
                options.setdefault("system", system)
            if tools:
                options.setdefault("tools", tools)
            self._manager = ContextManager(self._policy, wire="openai-chat", **options)
            self._fed = []
            self._system = system
        return self._manager


def _split_system(formatted: list[dict]) -> tuple[Any, list[dict]]:
    """The system prompt (the first message when it is one) and the conversation after it."""
    if formatted and formatted[0].get("role") == "system":
        return _text(formatted[0].get("content")), formatted[1:]
    return None, formatted


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content or [] if isinstance(part, dict))


def _to_msgs(messages: list[dict], agent_name: str) -> list[Msg]:
    """OpenAI chat messages (what the manager prepared) back as AgentScope messages, the way
    AgentScope keeps them: a tool's result in the assistant message that called it."""
    msgs: list[Msg] = []
    names: dict[str, str] = {}
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role in ("system", "developer"):
            msgs.append(SystemMsg(name="system", content=_text(content)))
        elif role == "user":
            msgs.append(UserMsg(name=message.get("name") or "user", content=_text(content)))
        elif role == "assistant":
            blocks: list[Any] = []
            if _text(content):
                blocks.append(TextBlock(text=_text(content)))
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                names[call["id"]] = function.get("name", "")
                arguments = function.get("arguments")
                if not isinstance(arguments, str):
                    arguments = json.dumps(arguments or {})
                blocks.append(ToolCallBlock(id=call["id"], name=function.get("name", ""), input=arguments, state="finished"))
            msgs.append(AssistantMsg(name=message.get("name") or agent_name, content=blocks))
        elif role == "tool":
            call_id = message.get("tool_call_id", "")
            result = ToolResultBlock(id=call_id, name=message.get("name") or names.get(call_id, ""), output=_text(content), state="success")
            last = msgs[-1] if msgs else None
            if last is not None and last.role == "assistant":
                last.content.append(result)
            else:
                msgs.append(AssistantMsg(name=agent_name, content=[result]))
    return msgs

"""Type stubs of the extension module (crates/ctxkeeper-py/src)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal

Wire = Literal["openai-chat", "responses", "anthropic"]
Message = Mapping[str, Any]
Event = dict[str, Any]

def presets() -> list[str]:
    """The presets ``policy=`` accepts by name: ``default``, ``agentscope``, ``reme-compact``, ...

    >>> "default" in presets()
    True
    """

def version() -> str:
    """The version of the engine this module was built from."""

class Prepared:
    """What :meth:`ContextManager.prepare` and :meth:`ContextManager.on_overflow` return.

    >>> cm = ContextManager("default", model="gpt-4o")
    >>> p = cm.prepare([{"role": "user", "content": "hi"}])
    >>> p.messages
    [{'role': 'user', 'content': 'hi'}]
    >>> p.kwargs
    {'messages': [{'role': 'user', 'content': 'hi'}]}
    """

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The messages to send (Responses: the ``input`` items), in the manager's wire shape.

        A new list each time; the dicts in it are shared with earlier requests (and are the
        caller's own objects while the engine keeps those messages as given): copy one before
        changing it.
        """
    @property
    def system(self) -> Any | None:
        """The instruction field (Anthropic ``system``, Responses ``instructions``), or None."""
    @property
    def kwargs(self) -> dict[str, Any]:
        """The request fields to splat into the client call:
        ``client.chat.completions.create(model=..., **p.kwargs)``."""
    def request(self, model: str | None = None, **fields: Any) -> dict[str, Any]:
        """A whole request body: ``model``, the conversation, the manager's ``tools`` and
        ``fields`` (``temperature=0``, ``max_tokens=...``)."""
    @property
    def input_tokens(self) -> int:
        """Estimated input tokens of the request (context + tool schemas)."""
    @property
    def compacted(self) -> bool:
        """Whether a compaction ran for this request."""
    @property
    def changed(self) -> bool:
        """Whether these messages differ from the previous request plus the messages
        ingested since, as they were given. When False, a caller that keeps its own list
        may send that list."""
    @property
    def budget_used_pct(self) -> float:
        """Share of the window the request uses, in percent."""
    @property
    def budget_notice(self) -> str | None:
        """The budget notice added to the last message, if the policy asks for one."""
    @property
    def window(self) -> int:
        """The window the request was budgeted to (the model's, less ``max_tokens``)."""
    @property
    def wire(self) -> Wire: ...
    def __len__(self) -> int: ...

class ContextManager:
    """One session's managed context, in the caller's wire shape.

    >>> cm = ContextManager("default", model="gpt-4o", window=16_000)
    >>> p = cm.prepare([{"role": "user", "content": "Find the failing test"}])
    >>> # reply = client.chat.completions.create(model="gpt-4o", **p.kwargs)
    >>> # cm.usage(reply.usage); cm.ingest(reply.choices[0].message)

    ``policy``: a preset name (:func:`presets`), the path of a TOML config file (the one
    ``ctxkeeper serve --config`` reads), or a dict of ``[policy]`` overrides
    (``{"preset": "default", "trigger_ratio": 0.7}``). ``model`` picks the tokenizer and the
    default window. ``system``: the instructions (Anthropic ``system``, Responses
    ``instructions``; a string for Chat). ``tools``: the tool declarations in the wire shape
    (counted in every request). ``store``: a session store URL (``sqlite:///path.db``,
    ``postgres://...``, ``mysql://...``, ``redis://...``, ``file://dir``, ``memory://``); the
    session ``session`` is resumed when stored and saved at every ``prepare``.
    ``workspace``: where archived content goes (a directory or an archive URL; default: the
    SQL store's own database, else in memory). ``summarizer``: ``extractive`` (no model),
    ``openai`` or ``anthropic`` with ``summarizer_url`` / ``summarizer_model`` (the key from
    ``CTXKEEPER_SUMMARIZER_API_KEY``, else ``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``).
    ``on_event``: called with every event (dict) after the call that emitted it.
    """

    def __init__(
        self,
        policy: str | os.PathLike[str] | Mapping[str, Any] | None = None,
        *,
        model: str = "gpt-4o",
        window: int | None = None,
        wire: Wire = "openai-chat",
        system: Any | None = None,
        tools: Iterable[Mapping[str, Any]] | None = None,
        fixed_tokens: int = 0,
        store: str | None = None,
        session: str | None = None,
        tenant: str = "default",
        user: str | None = None,
        agent: str | None = None,
        workspace: str | None = None,
        summarizer: Literal["extractive", "openai", "anthropic"] = "extractive",
        summarizer_url: str | None = None,
        summarizer_model: str | None = None,
        on_event: Callable[[Event], object] | None = None,
    ) -> None: ...
    def ingest(self, messages: Message | Iterable[Message] | Any) -> None:
        """Appends messages (dicts in the wire shape, or SDK objects with ``model_dump``).

        Bad input (an unknown role, a tool result that answers no call, a call left
        unanswered, an id like ``../../x``) raises :class:`InvalidInputError` and ingests
        nothing:

        >>> cm.ingest([{"role": "narrator", "content": "x"}])
        Traceback (most recent call last):
        InvalidInputError: messages[0].role: unknown role "narrator"
        """
    def prepare(
        self, messages: Message | Iterable[Message] | None = None, *, max_tokens: int | None = None
    ) -> Prepared:
        """Ingests ``messages`` (if given), compacts when a trigger fires, and returns the
        request. ``max_tokens``: the answer budget the request asks for, reserved in the
        window."""
    def on_overflow(
        self,
        error: Any = None,
        *,
        status: int | None = None,
        tokens: int | None = None,
        limit: int | None = None,
        attempt: int | None = None,
    ) -> Prepared | None:
        """The provider said the context is too long (``error``: the body as str, bytes or
        dict, or the SDK's exception): compacts harder so the retry fits and returns the
        smaller request; None when ``error`` is not a context-overflow error. Raises
        :class:`NoRoomError` when what must stay does not fit, :class:`UnrecoverableError`
        after the policy's attempts.

        >>> try:
        ...     reply = client.chat.completions.create(model="gpt-4o", **p.kwargs)
        ... except openai.BadRequestError as err:
        ...     if (p := cm.on_overflow(err)) is None:
        ...         raise
        """
    def usage(self, report: int | Mapping[str, Any] | Any) -> int:
        """The provider's usage report for the last request (an int, or the ``usage`` of a
        Chat, Responses or Anthropic answer): calibrates the count. Returns the input
        tokens read."""
    def compact(self, *, focus: str | None = None, overrides: str | None = None) -> bool:
        """Compacts now; ``overrides`` is a TOML fragment of policy settings for this once."""
    def events(self) -> Iterator[Event]:
        """The events since the last call, oldest first (``{"type": "context_compaction_end",
        ...}``). With ``on_event`` they go to the callback instead."""
    def search(self, query: str, *, regex: bool = False, limit: int = 50) -> list[dict[str, Any]]:
        """Lines of this session's archive containing ``query`` (case-insensitive):
        ``[{"reference", "line", "text"}]``."""
    def read(self, reference: str, *, offset: int = 0, limit: int | None = None) -> str:
        """An archived item's text (or ``limit`` bytes of it from ``offset``). Raises
        :class:`NotFoundError` for an unknown reference."""
    def archived(self) -> list[dict[str, Any]]:
        """This session's archived items: ``[{"reference", "bytes"}]``."""
    def count_tokens(self) -> int:
        """Exact tokens of the context plus the tool schemas."""
    def save(self) -> None:
        """Saves the session now (a stored manager also saves at every ``prepare``)."""
    def stats(self) -> dict[str, Any]:
        """Messages, compactions, archived bytes, window, policy, the running summary."""
    @property
    def session(self) -> dict[str, Any]:
        """The session's key (tenant, session; with a store: user, agent, stored)."""
    @property
    def wire(self) -> Wire: ...
    def _emit_full(self) -> list[dict[str, Any]]: ...

class Sessions:
    """A session store, as ``ctxkeeper sessions --store URL`` opens it.

    >>> s = Sessions("sqlite:///tmp/sessions.db")
    >>> [info["key"]["session"] for info in s.list()]
    ['task-1']
    >>> cm = ContextManager("default", store="sqlite:///tmp/sessions.db", session="task-1")  # resumes
    """

    def __init__(self, store: str, *, tenant: str = "default") -> None: ...
    def list(self, *, user: str | None = None, agent: str | None = None) -> list[dict[str, Any]]:
        """Sessions of the tenant, most recently updated first."""
    def history(
        self, session: str, *, last: int = 20, before: int | None = None, user: str | None = None, agent: str | None = None
    ) -> list[dict[str, Any]]:
        """The last entries of a session's log (``seq``, ``at_ms``, ``message``)."""
    def search(self, query: str, *, session: str | None = None, limit: int = 20) -> list[dict[str, Any]]:
        """Ranked full-text search over the tenant's logs (or one session's)."""
    def delete(self, session: str, *, user: str | None = None, agent: str | None = None) -> bool:
        """Removes a session's state and log."""
    @property
    def url(self) -> str: ...
    @property
    def tenant(self) -> str: ...

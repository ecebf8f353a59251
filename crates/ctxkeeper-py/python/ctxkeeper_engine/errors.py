"""The exceptions ctxkeeper_engine raises: one hierarchy under :class:`CtxkeeperError`.

Every exception keeps its cause: an archive failure's ``__cause__`` is the store error
beneath it, and so on down the chain the engine reported. Input the engine refuses raises
:class:`InvalidInputError` (also a ``ValueError``) and changes nothing::

    try:
        cm.ingest([{"role": "narrator", "content": "..."}])
    except InvalidInputError as err:
        print(err.path)      # messages[0].role
"""

from __future__ import annotations

__all__ = [
    "CtxkeeperError",
    "InvalidInputError",
    "ConfigError",
    "StoreError",
    "ConflictError",
    "ArchiveError",
    "NotFoundError",
    "ContextOverflowError",
    "NoRoomError",
    "UnrecoverableError",
]


class CtxkeeperError(Exception):
    """Base class of every ctxkeeper_engine error. Keyword arguments become attributes."""

    def __init__(self, message: str = "", **attrs: object) -> None:
        super().__init__(message)
        self.message = message
        for name, value in attrs.items():
            setattr(self, name, value)


class InvalidInputError(CtxkeeperError, ValueError):
    """Messages, tools or arguments the engine refuses; nothing was ingested or stored.

    ``path`` names the place (``messages[2].tool_call_id``), ``index`` the message of the
    batch when one is to blame, ``kind`` the rule (``tool_pairing``, ``hostile_id``,
    ``invalid_message``) when it is not a parse error.
    """

    path: str | None = None
    index: int | None = None
    kind: str | None = None


class ConfigError(CtxkeeperError, ValueError):
    """An unknown preset, an invalid policy override, a bad option."""


class StoreError(CtxkeeperError):
    """The session store or the archive failed (connection, permissions, IO)."""


class ConflictError(StoreError):
    """Another writer saved the same session first (compare-and-swap lost)."""


class ArchiveError(StoreError):
    """Archiving failed: nothing left the context (its ``__cause__`` says why)."""


class NotFoundError(CtxkeeperError, LookupError):
    """An archive reference or a session that does not exist."""


class ContextOverflowError(CtxkeeperError):
    """The context cannot be made to fit."""


class NoRoomError(ContextOverflowError):
    """What must stay (instructions, tool schemas, the user's latest request, the newest round)
    alone needs ``needed`` tokens, over ``limit``: nothing is sent rather than an empty
    conversation."""

    needed: int = 0
    limit: int = 0


class UnrecoverableError(ContextOverflowError):
    """Overflow recovery gave up after ``attempts`` (the context still had ``tokens``)."""

    attempts: int = 0
    tokens: int = 0

"""ctxkeeper's context engine, in-process (the ``ctxkeeper-engine`` distribution).

:class:`ContextManager` runs one session's context: ``ingest`` messages as they arrive,
``prepare`` before every model call (it compacts when a trigger fires), ``usage`` with what the
provider reported, ``on_overflow`` when the provider says the context is too long. Messages
are plain dicts in the caller's own wire shape (``wire="openai-chat"``, ``"responses"`` or
``"anthropic"``)::

    from ctxkeeper_engine import ContextManager

    cm = ContextManager("default", model="gpt-4o", window=16_000)
    cm.ingest([{"role": "user", "content": "Find the failing test"}])
    prepared = cm.prepare()
    # client.chat.completions.create(model="gpt-4o", **prepared.kwargs)
"""

from __future__ import annotations

from . import errors
from ._native import ContextManager, Prepared, Sessions, presets, version
from .errors import (
    ArchiveError,
    ConfigError,
    ConflictError,
    ContextOverflowError,
    CtxkeeperError,
    InvalidInputError,
    NoRoomError,
    NotFoundError,
    StoreError,
    UnrecoverableError,
)

__version__ = version()

__all__ = [
    "ContextManager",
    "Prepared",
    "Sessions",
    "presets",
    "version",
    "errors",
    "ArchiveError",
    "ConfigError",
    "ConflictError",
    "ContextOverflowError",
    "CtxkeeperError",
    "InvalidInputError",
    "NoRoomError",
    "NotFoundError",
    "StoreError",
    "UnrecoverableError",
]

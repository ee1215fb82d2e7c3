"""The requests an operation makes of its runner (sans-I/O).

Operations in `ops` are generators: they yield one of these, the runner (sync in `memory`, async in
`async_memory`) performs it and sends back the result. So every decision, SQL statement and row
decoding is shared, and the two runners differ only in the lines that do I/O. An embedder failure
is thrown into the generator as `EmbeddingError`, which recall turns into a degraded result.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from psycopg import sql

T = TypeVar("T")


class Planning(Enum):
    """How the server plans a statement (see `scope_sizes` for which statements get which)."""

    FRESH = "fresh"
    """Planned with its actual values at every run: psycopg does not prepare it."""
    CACHED = "cached"
    """Prepared on the connection: PostgreSQL plans it with the actual values for five runs, then
    may keep a generic plan (it does when that plan is estimated to cost no more)."""
    GENERIC = "generic"
    """Prepared and always run on its generic plan (`plan_cache_mode` forced for this statement
    alone). For autocommit connections (recall), where the runner restores a statement left half
    done before the connection goes back to the pool."""


@dataclass(frozen=True)
class Execute:
    """Run one statement inside the operation's transaction; reply: list of row tuples."""

    statement: sql.Composed | sql.SQL
    params: Mapping[str, Any] | tuple[Any, ...] | None = None
    planning: Planning = Planning.FRESH


@dataclass(frozen=True)
class Concurrently:
    """Run independent read-only statements, at once where the pool has a spare connection (each
    outside any transaction, so each sees its own snapshot); reply: one list of rows per statement,
    in order. Used by recall only, which runs in autocommit mode."""

    statements: tuple[Execute, ...]


@dataclass(frozen=True)
class Maintain:
    """Run one statement outside the operation's transaction, in autocommit mode (what the
    operation wrote before is committed first); for CREATE INDEX CONCURRENTLY and the like.
    Reply: list of row tuples, or None if it failed: maintenance never fails a write, it is
    logged and retried by the next one."""

    statement: sql.Composed
    params: Mapping[str, Any] | tuple[Any, ...] | None = None


@dataclass(frozen=True)
class Peek:
    """A best-effort read on a connection borrowed for it alone and returned at once, before the
    operation's own connection is taken (so none is held while a model embeds next). Reply: list
    of row tuples, or None if it failed; the operation must not depend on it for correctness."""

    statement: sql.Composed | sql.SQL
    params: Mapping[str, Any] | tuple[Any, ...] | None = None


@dataclass(frozen=True)
class EmbedDocuments:
    """Embed texts for storage; reply: checked vectors (EmbeddingError thrown in on failure)."""

    texts: tuple[str, ...]


@dataclass(frozen=True)
class EmbedQuery:
    """Embed a query (cached, with a timeout); reply: a checked vector."""

    text: str
    timeout_s: float


@dataclass(frozen=True)
class Synthesize:
    """Ask the configured chat model for prose over the rendered block; reply: str."""

    context: str
    query: str | None


Request = Execute | Concurrently | Maintain | Peek | EmbedDocuments | EmbedQuery | Synthesize
Operation = Generator[Request, Any, T]

"""The requests an operation makes of its runner (sans-I/O), each with its typed reply.

Operations are generators: they yield one of these requests, the runner (`runner.async_runner`,
and `runner.sync_runner` generated from it) performs it and sends back the reply. So every
decision, SQL statement and row decoding is shared, and the runners are the only code that does
I/O. An operation asks through the helpers at the bottom (`rows = yield from execute(...)`), which
give mypy the reply's type; a bare `yield Request(...)` would be typed `Any`. An embedder failure
is thrown into the generator as `EmbeddingError`, which recall turns into a degraded result.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

from psycopg import sql
from psycopg.rows import RowFactory, class_row, tuple_row

from memsoda_core.embedders.protocol import Vector
from memsoda_core.runner.compiled import Compiled
from memsoda_core.scope_growth import Growth

T = TypeVar("T")
R = TypeVar("R")

Row = tuple[Any, ...]
Params = Mapping[str, Any] | tuple[Any, ...] | None
Statement = sql.Composed | sql.SQL | Compiled
"""A statement to run: compiled once (`runner.compiled`: named parameters, given as a mapping or
None), or composed (read by psycopg at every run)."""


class Planning(Enum):
    """How the server plans a statement (see `recall.planning` for which statements get which)."""

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
    """Run one statement inside the operation's transaction. Reply: its rows, as `row_factory`
    makes them (psycopg's row factories: tuples by default, `class_row` for named rows)."""

    statement: Statement
    params: Params = None
    planning: Planning = Planning.FRESH
    row_factory: RowFactory[Any] = tuple_row


@dataclass(frozen=True)
class Concurrently:
    """Run independent read-only statements, at once where the pool has a spare connection (each
    outside any transaction, so each sees its own snapshot). Reply: one list of rows per
    statement, in order. Used by recall only, which runs in autocommit mode."""

    statements: tuple[Execute, ...]


@dataclass(frozen=True)
class OutsideTransaction:
    """Run one statement outside the operation's transaction, in autocommit mode (what the
    operation wrote before is committed first): CREATE INDEX CONCURRENTLY, session advisory locks,
    settings for those. Reply: its rows, or None if it failed (logged): such a statement never
    fails the operation, whose next write retries it."""

    statement: sql.Composed
    params: Params = None


@dataclass(frozen=True)
class Commit:
    """Commit what the operation wrote so far, releasing its locks; its next statement opens a new
    transaction (an operation over many scopes, each all or nothing, that must not hold every
    scope's locks at once). Reply: None."""


@dataclass(frozen=True)
class OwnTransaction:
    """Run statements in one transaction of their own, after committing what the operation wrote:
    a change that must be all or nothing but must not wait on the operation's locks (moving a
    tenant to its partitions). Reply: the last statement's rows, or None if any failed (it is
    rolled back whole, logged), so such a step never fails the operation, whose next write retries it."""

    statements: tuple[sql.Composed, ...]


@dataclass(frozen=True)
class ReadAside:
    """A best-effort read on a connection borrowed for it alone and returned at once, before the
    operation's own connection is taken (so none is held while a model embeds next). Reply: its
    rows, or None if it failed; the operation must not depend on it for correctness."""

    statement: Statement
    params: Params = None


class NotRead(Enum):
    """Why a `ReadOnNode` was not read on its node (then the operation reads another way)."""

    NOT_TRIED = "not tried"
    """The run is not read-only (a node's own connection would not see its writes), or the node
    could not be reached lately."""
    FAILED = "failed"
    """The node was reached and the statement failed there (logged): what placed it there may be
    out of date."""


@dataclass(frozen=True)
class ReadOnNode:
    """A read-only statement on another node of the cluster (a Citus worker), on a pooled
    connection of its own, in autocommit mode. Reply: its rows, or a `NotRead`."""

    statement: Execute
    host: str
    port: int


@dataclass(frozen=True)
class EmbedDocuments:
    """Embed texts for storage. Reply: one checked vector per text (EmbeddingError thrown in)."""

    texts: tuple[str, ...]


@dataclass(frozen=True)
class EmbedQuery:
    """Embed a query (cached, with a timeout). Reply: a checked vector (EmbeddingError thrown in)."""

    text: str
    timeout_s: float


@dataclass(frozen=True)
class Synthesize:
    """Ask the configured chat model for prose over the rendered block. Reply: str (its error
    thrown in)."""

    context: str
    query: str | None


@dataclass(frozen=True)
class Emit:
    """Hand output lines to the caller's sink (an export's file). Reply: None."""

    lines: tuple[str, ...]


@dataclass(frozen=True)
class Progress:
    """Report that `done` more items are written (an import's progress bar). Reply: None."""

    done: int


@dataclass(frozen=True)
class Wrote:
    """Report what a write did to its scope, for what the memory remembers of it; answered by
    `reported` around the write, else by the runner. Reply: None."""

    growth: Growth


@dataclass(frozen=True)
class AfterCommit:
    """Do `action` once the operation's transaction has committed, never if it fails (a run that is
    run again does it once, after the run that commits): what the memory remembers of a scope
    follows what is stored. Reply: None."""

    action: Callable[[], None]


Request = (
    Execute
    | Concurrently
    | OutsideTransaction
    | Commit
    | OwnTransaction
    | ReadAside
    | ReadOnNode
    | EmbedDocuments
    | EmbedQuery
    | Synthesize
    | Emit
    | Progress
    | Wrote
    | AfterCommit
)
Operation = Generator[Request, Any, T]
"""An operation: yields requests, receives their replies, returns T."""


# --- typed requests: `rows = yield from execute(...)` ------------------------------------------------


def execute(statement: Statement, params: Params = None, planning: Planning = Planning.FRESH) -> Operation[list[Row]]:
    """Run a statement in the operation's transaction; its rows as tuples."""
    rows: list[Row] = yield Execute(statement, params, planning)
    return rows


def execute_as(
    shape: type[R], statement: Statement, params: Params = None, planning: Planning = Planning.FRESH
) -> Operation[list[R]]:
    """Run a statement in the operation's transaction; each row built as `shape(**columns)`, so
    the statement's column names, not their order, are the contract (psycopg's `class_row`)."""
    rows: list[R] = yield Execute(statement, params, planning, class_row(shape))
    return rows


def concurrently(statements: Sequence[Execute]) -> Operation[list[list[Any]]]:
    """Run read-only statements at once; one list of rows per statement, in order."""
    results: list[list[Any]] = yield Concurrently(tuple(statements))
    return results


def outside_transaction(statement: sql.Composed, params: Params = None) -> Operation[list[Row] | None]:
    """Run a statement in autocommit mode after committing what the operation wrote; None if it
    failed."""
    rows: list[Row] | None = yield OutsideTransaction(statement, params)
    return rows


def commit() -> Operation[None]:
    """Commit what the operation wrote so far (see `Commit`)."""
    yield Commit()


def own_transaction(statements: Sequence[sql.Composed]) -> Operation[list[Row] | None]:
    """Run `statements` in one transaction of their own (see `OwnTransaction`); None if it failed."""
    rows: list[Row] | None = yield OwnTransaction(tuple(statements))
    return rows


def read_aside(statement: Statement, params: Params = None) -> Operation[list[Row] | None]:
    """A best-effort read on a borrowed connection; None if it failed."""
    rows: list[Row] | None = yield ReadAside(statement, params)
    return rows


def read_on_node(statement: Execute, host: str, port: int) -> Operation[list[Any] | NotRead]:
    """Run a read-only statement on the node at `host`:`port`; its rows, or why it was not read."""
    rows: list[Any] | NotRead = yield ReadOnNode(statement, host, port)
    return rows


def embed_documents(texts: Sequence[str]) -> Operation[list[Vector]]:
    """Embed texts for storage."""
    vectors: list[Vector] = yield EmbedDocuments(tuple(texts))
    return vectors


def embed_query(text: str, timeout_s: float) -> Operation[Vector]:
    """Embed a query."""
    vector: Vector = yield EmbedQuery(text, timeout_s)
    return vector


def synthesize(context: str, query: str | None) -> Operation[str]:
    """Prose over the rendered block from the configured chat model."""
    prose: str = yield Synthesize(context, query)
    return prose


def emit(lines: Sequence[str]) -> Operation[None]:
    """Hand output lines to the caller's sink."""
    yield Emit(tuple(lines))


def progress(done: int) -> Operation[None]:
    """Report progress to the caller."""
    yield Progress(done)


def wrote(growth: Growth) -> Operation[None]:
    """Report what the write did to its scope."""
    yield Wrote(growth)


def after_commit(action: Callable[[], None]) -> Operation[None]:
    """Have `action` done once the operation has committed."""
    yield AfterCommit(action)


def reported(op: Operation[T]) -> Operation[tuple[T, list[Growth]]]:
    """`op`, whose `Wrote` reports are answered here: its result, and its reports in order. Every
    other request goes on to the runner, and the runner's reply (or error) back to `op`."""
    growths: list[Growth] = []
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = op.throw(error) if error is not None else op.send(reply)
        except StopIteration as stop:
            return stop.value, growths
        reply, error = None, None
        if isinstance(request, Wrote):
            growths.append(request.growth)
            continue
        try:
            reply = yield request
        except BaseException as exc:  # thrown in by the runner (an embedder's error), or closing
            error = exc

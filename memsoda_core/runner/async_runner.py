# sync: """`Runner`: performs the requests of operations (`runner.steps`) with psycopg's pool.
"""`AsyncRunner`: performs the requests of operations (`runner.steps`) with psycopg's async pool.

The runners' I/O policy (spare connections, pipelines, the generic-plan guard, cancel on failure,
pool lending order) is written once, in the async runner; `tools/async_to_sync.py` rewrites it as
the sync runner, and a line that must differ there carries its sync form in a `# sync: <line>`
comment just above it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, suppress
from typing import Any, TypeVar, assert_never

import psycopg
from psycopg_pool import PoolTimeout

from memsoda_core.embedders import Embedder, check_vectors
from memsoda_core.errors import MemsodaError
from memsoda_core.runner.async_pool import Node, NodePools, Pool, PooledConnection, check, configure, filled, probe
from memsoda_core.runner.compiled import Compiled

# sync: from memsoda_core.runner.embedding import EmbeddingCache, call_with_timeout, embedding_failure
from memsoda_core.runner.embedding import EmbeddingCache, embedding_failure
from memsoda_core.runner.event_loop import check_loop
from memsoda_core.runner.policy import (
    CANCEL_TIMEOUT_S,
    CONNECTION_KWARGS,
    END_GENERIC_PLAN,
    FORCE_GENERIC_PLAN,
    GENERIC_PLAN_PENDING,
    NODE_CONNECTION_WAIT_S,
    PIPELINE_SUPPORTED,
    POOL_MIN_SIZE,
    READ_ASIDE_CONNECTION_WAIT_S,
    RECONNECT_TIMEOUT_S,
    SNAPSHOT,
    SPARE_CONNECTION_WAIT_S,
    RunEffects,
    connection_failed,
    may_rerun,
    outside_transaction_failed,
    own_transaction_failed,
    pool_exhausted,
    probe_wait,
    read_aside_failed,
    rerun_delay,
    translate_db_error,
)
from memsoda_core.runner.steps import (
    AfterCommit,
    Commit,
    Concurrently,
    EmbedDocuments,
    EmbedQuery,
    Emit,
    Execute,
    NotRead,
    Operation,
    OutsideTransaction,
    OwnTransaction,
    Planning,
    Progress,
    ReadAside,
    ReadOnNode,
    Synthesize,
    Wrote,
)
from memsoda_core.runner.target import Target
from memsoda_core.store.info import StoreInfo
from memsoda_core.synthesis import Synthesizer

T = TypeVar("T")

logger = logging.getLogger(__name__)

Connection = psycopg.AsyncConnection[Any]
Sink = Callable[[Sequence[str]], None]
"""Where `Emit` lines go (an export's file)."""
Advance = Callable[[int], None]
"""What `Progress` calls (an import's progress bar)."""


def _cursor(conn: Connection, request: Execute) -> psycopg.AsyncCursor[Any]:
    """A raw cursor for a compiled statement (sent as it is; a pooled connection's own, kept), else
    psycopg's own (which reads the text for `%(name)s` placeholders). Never closed: a client-side
    cursor holds no server resource, and a new one is dropped with its rows."""
    if isinstance(request.statement, Compiled):
        if isinstance(conn, PooledConnection):
            return conn.raw_cursor(request.row_factory)
        return psycopg.AsyncRawCursor(conn, row_factory=request.row_factory)
    return conn.cursor(row_factory=request.row_factory)


async def _execute(cursor: psycopg.AsyncCursor[Any], request: Execute) -> None:
    prepare = request.planning is not Planning.FRESH
    statement = request.statement
    if isinstance(statement, Compiled):
        await cursor.execute(statement.query, statement.bind(request.params), prepare=prepare)
    else:
        await cursor.execute(statement, request.params, prepare=prepare)


async def _fetch(conn: Connection, request: Execute) -> list[Any]:
    if request.planning is Planning.GENERIC and PIPELINE_SUPPORTED:
        return (await _fetch_at_once([conn], [request]))[0]
    cursor = _cursor(conn, request)
    await _execute(cursor, request)
    return await cursor.fetchall() if cursor.rownumber is not None else []


async def _fetch_at_once(conns: Sequence[Connection], requests: Sequence[Execute]) -> list[list[Any]]:
    """Each request on its own connection, every one sent before any reply is awaited (one pipeline
    per connection, so one thread or task runs them at once); a GENERIC request between its setting
    and the reset (see `policy.END_GENERIC_PLAN` for how the setting never outlives the statement)."""
    cursors = [_cursor(conn, request) for conn, request in zip(conns, requests, strict=True)]
    async with AsyncExitStack() as pipelines:
        for conn, cursor, request in zip(conns, cursors, requests, strict=True):
            await pipelines.enter_async_context(conn.pipeline())
            pipelines.push_async_exit(_cancel_when_failing(conn))
            if request.planning is Planning.GENERIC:
                GENERIC_PLAN_PENDING.add(conn)
                await conn.execute(FORCE_GENERIC_PLAN)
            await _execute(cursor, request)
            if request.planning is Planning.GENERIC:
                await conn.execute(END_GENERIC_PLAN)
    for conn in conns:
        GENERIC_PLAN_PENDING.discard(conn)
    return [await cursor.fetchall() if cursor.rownumber is not None else [] for cursor in cursors]


def _cancel_when_failing(conn: Connection) -> Callable[..., Awaitable[bool]]:
    """An exit callback for `conn`'s pipeline: when the wait for another statement fails or is
    interrupted (Ctrl-C, a cancelled task), cancel `conn`'s statement too, so its pipeline closes
    at once instead of waiting for it."""

    async def cancel(exc_type: type[BaseException] | None, *_: object) -> bool:
        if exc_type is not None:
            with suppress(psycopg.Error):
                await conn.cancel_safe(timeout=CANCEL_TIMEOUT_S)
        return False

    return cancel


async def _finish_pending(conn: Connection) -> None:
    """Before the pool lends `conn` again, a GENERIC statement left half done on it (a client-side
    error or a cancelled task between its SET and RESET) is finished."""
    if not conn.closed and conn in GENERIC_PLAN_PENDING:
        try:
            await conn.execute(END_GENERIC_PLAN)
        except psycopg.Error:
            await conn.close()  # the pool drops a closed connection rather than lend it with the setting
        GENERIC_PLAN_PENDING.discard(conn)


async def _autocommit(conn: Connection, on: bool) -> None:
    """`conn` in autocommit mode (`on`) or in transactions. A pooled connection keeps the mode its
    last run left it in, so only a run of the other kind (a write after recalls) switches it."""
    if conn.autocommit is not on:
        await conn.set_autocommit(on)


async def _ready(conn: Connection) -> Connection:
    return conn


class AsyncRunner:
    """Drives operations on a pool of connections to one store; every other module is free of I/O."""

    def __init__(
        self,
        *,
        pool: Pool,
        target: Target,
        info: StoreInfo,
        embedder: Embedder,
        synthesizer: Synthesizer | None,
        cache_size: int,
        pool_timeout: float,
        nodes: NodePools | None = None,
    ) -> None:
        """`nodes`: the pools of reads on other nodes (`ReadOnNode`), another runner's to share."""
        self.pool = pool
        self.target = target
        self.info = info
        self.embedder = embedder
        self.synthesizer = synthesizer
        self._cache = EmbeddingCache(cache_size)
        self._cache_size = cache_size
        self._pool_timeout = pool_timeout
        self._nodes = nodes if nodes is not None else NodePools(target.dsn, pool.max_size)

    def with_embedder(self, embedder: Embedder, info: StoreInfo) -> AsyncRunner:
        """A runner on the same pool that embeds with `embedder` into `info`'s vector space, with an
        empty query cache (a re-embed's runner, and the memory's once the store has switched)."""
        return type(self)(
            pool=self.pool,
            target=self.target,
            info=info,
            embedder=embedder,
            synthesizer=self.synthesizer,
            cache_size=self._cache_size,
            pool_timeout=self._pool_timeout,
            nodes=self._nodes,
        )

    @classmethod
    async def open(
        cls,
        target: Target,
        opening: Operation[StoreInfo],
        *,
        embedder: Embedder,
        synthesizer: Synthesizer | None,
        cache_size: int,
        pool_size: int,
        pool_timeout: float,
    ) -> AsyncRunner:
        """Run `opening` (schema checks and migrations) on a connection of its own, then open the
        pool, waiting for its first connections so the first recall finds its spare one."""
        try:
            conn = await psycopg.AsyncConnection.connect(target.dsn, **CONNECTION_KWARGS)
        except psycopg.OperationalError as exc:
            raise connection_failed(exc) from exc
        try:
            async with conn:
                info = await cls.run_on(conn, opening)
            pool = Pool(
                target.dsn,
                min_size=min(POOL_MIN_SIZE, pool_size),
                max_size=pool_size,
                timeout=pool_timeout,
                kwargs=CONNECTION_KWARGS,
                configure=configure,
                check=check,
                reconnect_timeout=RECONNECT_TIMEOUT_S,
                open=False,
            )
            try:
                await pool.open()
                await filled(pool, target.dsn, pool_timeout)
            except BaseException:
                await pool.close()
                raise
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate_db_error(exc) from exc
        return cls(
            pool=pool,
            target=target,
            info=info,
            embedder=embedder,
            synthesizer=synthesizer,
            cache_size=cache_size,
            pool_timeout=pool_timeout,
        )

    def pools(self) -> list[Pool]:
        """Its pool, then those of the other nodes it has read on."""
        return [self.pool, *self._nodes.opened()]

    async def close(self) -> None:
        try:
            await self._nodes.close()
        finally:
            await self.pool.close()

    @classmethod
    async def run_on(cls, conn: Connection, op: Operation[T]) -> T:
        """Drive `op` on `conn` alone, outside any pool (opening or distributing a store): only
        statements are performed, and database errors raise as memsoda errors."""
        try:
            return await cls._drive(op, lambda: _ready(conn))
        except psycopg.Error as exc:
            raise translate_db_error(exc) from exc

    async def run(
        self,
        op: Operation[T] | Callable[[], Operation[T]],
        *,
        read_only: bool = False,
        snapshot: bool = False,
        sink: Sink | None = None,
        advance: Advance | None = None,
    ) -> T:
        """Drive `op` on one pooled connection, in one transaction; `read_only` operations (recall,
        whose statements each stand alone) run in autocommit mode instead (no BEGIN / COMMIT), but
        with `snapshot` in one read-only transaction that reads one snapshot (`policy.SNAPSHOT`: an
        export, whose pages must show the store at one instant). `Emit` lines go to `sink`,
        `Progress` counts to `advance`.

        Given as a function that builds the operation, it is run again (up to
        `policy.RERUN_ATTEMPTS` runs in all, after a short wait) when PostgreSQL ends its
        transaction as a deadlock or serialization victim before anything of it left the
        transaction (`policy.may_rerun`)."""
        check_loop(self.pool)  # async only
        runs = 0
        while True:
            runs += 1
            effects = RunEffects()
            try:
                built = op() if callable(op) else op
                result = await self._run_once(built, read_only, snapshot, sink, advance, effects)
            except (psycopg.Error, PoolTimeout) as exc:
                if callable(op) and not effects.left_transaction and may_rerun(exc, runs):
                    logger.info("running the operation again after %s (run %d)", exc, runs)
                    # sync: time.sleep(rerun_delay(runs))
                    await asyncio.sleep(rerun_delay(runs))
                    continue
                raise translate_db_error(exc, retry_safe=not effects.left_transaction, runs=runs) from exc
            for action in effects.after_commit:
                action()
            return result

    async def _run_once(
        self,
        op: Operation[T],
        read_only: bool,
        snapshot: bool,
        sink: Sink | None,
        advance: Advance | None,
        effects: RunEffects,
    ) -> T:
        autocommit = read_only and not snapshot
        async with AsyncExitStack() as stack:
            conns: list[Connection] = []

            async def connection() -> Connection:
                if not conns:
                    conn = await self._checkout(stack, autocommit)
                    if snapshot:
                        await conn.execute(SNAPSHOT)  # the transaction's first statement
                    conns.append(conn)
                return conns[0]

            # a snapshot's reads stay on its connection: a node's would not read its snapshot
            return await self._drive(op, connection, self, sink, advance, effects, autocommit)

    async def _checkout(self, stack: AsyncExitStack, read_only: bool) -> Connection:
        """A pooled connection, waiting at most `pool_timeout`, returned when `stack` closes. While
        waiting, probe the server every `PROBE_AFTER_S` (`async_pool.probe`), so a stopped or
        refusing PostgreSQL fails fast and says so; at the end, the error says how many connections
        were in use. A read-only operation's is in autocommit mode: it has no transaction to end, so it
        is returned as it is (and left in that mode: `_autocommit`), not through the pool's
        `connection()` block."""
        deadline = time.monotonic() + self._pool_timeout
        while True:
            try:
                if not read_only:
                    conn = await stack.enter_async_context(self.pool.connection(timeout=probe_wait(deadline)))
                    await _autocommit(conn, False)  # one transaction, which the pool's block ends
                    return conn
                conn = await self.pool.getconn(timeout=probe_wait(deadline))
                break
            except PoolTimeout:
                if time.monotonic() >= deadline:
                    raise pool_exhausted(self._pool_timeout, self.pool.in_use, self.pool.max_size) from None
                await probe(self.target.dsn, deadline - time.monotonic())
        stack.push_async_callback(self.pool.putconn, conn)
        stack.push_async_callback(_finish_pending, conn)
        await _autocommit(conn, True)
        return conn

    @staticmethod
    async def _drive(
        op: Operation[T],
        connection: Callable[[], Awaitable[Connection]],
        runner: AsyncRunner | None = None,
        sink: Sink | None = None,
        advance: Advance | None = None,
        effects: RunEffects | None = None,
        read_only: bool = False,
    ) -> T:
        """Send each reply into `op` (or throw its error) until it returns. Without a `runner`
        (opening a store) only statements can be performed. `effects` records whether anything
        of `op` left its transaction; a `read_only` run may read on other nodes (`ReadOnNode`)."""
        reply: Any = None
        error: BaseException | None = None
        while True:
            try:
                request = op.throw(error) if error is not None else op.send(reply)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            reply, error = None, None
            if effects is not None and isinstance(
                request, OutsideTransaction | OwnTransaction | Commit | Emit | Progress
            ):
                effects.left_transaction = True
            match request:
                case Execute():
                    reply = await _fetch(await connection(), request)
                case Concurrently() if runner is not None:
                    reply = await runner._concurrently(await connection(), request.statements)
                case OutsideTransaction():
                    reply = await _outside_transaction(await connection(), request)
                case OwnTransaction():
                    reply = await _own_transaction(await connection(), request)
                case Commit():
                    await (await connection()).commit()
                case ReadAside() if runner is not None:
                    reply = await runner._read_aside(request)
                case ReadOnNode() if runner is not None and read_only:
                    reply = await runner._read_on_node(request)
                case ReadOnNode():  # its own connection would not see the operation's writes
                    reply = NotRead.NOT_TRIED
                case EmbedQuery() | EmbedDocuments() if runner is not None:
                    try:
                        reply = await runner._embed(request)
                    except MemsodaError as exc:
                        error = exc
                case Synthesize() if runner is not None:
                    try:
                        assert runner.synthesizer is not None
                        reply = await runner.synthesizer.asynthesize(request.context, request.query)
                    except Exception as exc:
                        error = exc
                case Emit():
                    if sink is not None:
                        sink(request.lines)
                case Progress():
                    if advance is not None:
                        advance(request.done)
                case Wrote():  # a write run without `steps.reported` around it: nothing remembers
                    pass
                case AfterCommit() if effects is not None:
                    effects.after_commit.append(request.action)
                case AfterCommit():  # no transaction of the runner's here (opening a store)
                    request.action()
                case Concurrently() | ReadAside() | EmbedQuery() | EmbedDocuments() | Synthesize():
                    raise RuntimeError(f"{type(request).__name__} needs an open store")
                case _:
                    assert_never(request)

    async def _concurrently(self, conn: Connection, statements: Sequence[Execute]) -> list[list[Any]]:
        """The first statement on `conn` and the others on spare pooled connections, all at once;
        those left without a spare (a busy pool, or no pipelines) after them on `conn`."""
        spares: list[Connection] = []
        try:
            while PIPELINE_SUPPORTED and len(spares) < len(statements) - 1:
                try:
                    spares.append(await self.pool.getconn(timeout=SPARE_CONNECTION_WAIT_S))
                except PoolTimeout:
                    break
                await _autocommit(spares[-1], True)
            if not spares:
                return [await _fetch(conn, statement) for statement in statements]
            together = len(spares) + 1
            at_once = await _fetch_at_once([conn, *spares], statements[:together])
            return at_once + [await _fetch(conn, statement) for statement in statements[together:]]
        finally:
            for spare in spares:
                try:
                    await _finish_pending(spare)
                finally:
                    await self.pool.putconn(spare)

    async def _read_aside(self, request: ReadAside) -> list[Any] | None:
        try:
            async with self.pool.connection(timeout=READ_ASIDE_CONNECTION_WAIT_S) as conn:
                return await _fetch(conn, Execute(request.statement, request.params))
        except (psycopg.Error, PoolTimeout) as exc:
            read_aside_failed(request, exc)
            return None

    async def _read_on_node(self, request: ReadOnNode) -> list[Any] | NotRead:
        """`request`'s statement on a connection to its node, in autocommit mode. Not tried while
        the node is marked unreachable; marked so when its pool gives no connection in
        `NODE_CONNECTION_WAIT_S` though none of its connections is busy (it cannot connect)."""
        node: Node = (request.host, request.port)
        if not self._nodes.reachable(node):
            return NotRead.NOT_TRIED
        pool = await self._nodes.pool(node)
        if pool is None:
            return NotRead.NOT_TRIED
        try:
            conn = await pool.getconn(timeout=NODE_CONNECTION_WAIT_S)
        except PoolTimeout:
            if pool.in_use == 0:
                logger.warning("node %s:%d gave no connection; reading through the coordinator", *node)
                self._nodes.unreachable(node)
            return NotRead.NOT_TRIED
        try:
            await _autocommit(conn, True)
            return await _fetch(conn, request.statement)
        except psycopg.Error as exc:
            logger.warning("reading on node %s:%d failed (%s); reading through the coordinator", *node, exc)
            return NotRead.FAILED
        finally:
            try:
                await _finish_pending(conn)
            finally:
                await pool.putconn(conn)

    async def _embed(self, request: EmbedQuery | EmbedDocuments) -> Any:
        dims = self.info.dimensions
        if isinstance(request, EmbedDocuments):
            try:
                vectors = await self.embedder.aembed_documents(list(request.texts))
            except Exception as exc:
                raise embedding_failure(exc) from exc
            return check_vectors(vectors, count=len(request.texts), dimensions=dims)
        cached = self._cache.get(request.text)
        if cached is not None:
            return cached
        try:
            # sync: vector = call_with_timeout(self.embedder.embed_query, request.text, request.timeout_s)
            vector = await asyncio.wait_for(self.embedder.aembed_query(request.text), request.timeout_s)
        except Exception as exc:
            raise embedding_failure(exc) from exc
        (checked,) = check_vectors([vector], count=1, dimensions=dims)
        self._cache.put(request.text, checked)
        return checked


async def _outside_transaction(conn: Connection, request: OutsideTransaction) -> list[Any] | None:
    """Commit what the operation wrote, then run the statement in autocommit mode; None (logged)
    if it fails, so such a statement never fails the operation."""
    await conn.commit()
    try:
        await conn.set_autocommit(True)
        try:
            return await _fetch(conn, Execute(request.statement, request.params))
        finally:
            await conn.set_autocommit(False)
    except psycopg.Error as exc:
        outside_transaction_failed(request, exc)
        return None


async def _own_transaction(conn: Connection, request: OwnTransaction) -> list[Any] | None:
    """Commit what the operation wrote, then run the statements in one transaction; None (logged,
    rolled back) if one fails."""
    await conn.commit()
    rows: list[Any] = []
    try:
        async with conn.transaction():
            for statement in request.statements:
                rows = await _fetch(conn, Execute(statement))
    except psycopg.Error as exc:
        own_transaction_failed(request, exc)
        return None
    return rows


__all__ = ["Advance", "AsyncRunner", "Sink"]

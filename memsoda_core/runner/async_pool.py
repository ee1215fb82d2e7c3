# sync: """The pool as `Runner` uses it: its connections' setup and check, lending order and count,
"""The pool as `AsyncRunner` uses it: its connections' setup and check, lending order and count,
and the probe that says why no connection can be had (`sync_pool.py` is generated from it)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
from pgvector.psycopg import register_vector_async
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import RowFactory
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from memsoda_core.runner.policy import (
    CONNECTION_KWARGS,
    NODE_RETRY_S,
    POOL_FILL_POLL_S,
    PREPARED_MAX,
    PROBE_CONNECT_TIMEOUT_S,
    RECONNECT_TIMEOUT_S,
    SESSION_SETTINGS,
    connection_failed,
    lend_newest_first,
    lend_oldest_first,
    may_be_dropped,
    rejected,
)

Connection = psycopg.AsyncConnection[Any]


async def configure(conn: Connection) -> None:
    await register_vector_async(conn)
    conn.prepared_max = PREPARED_MAX
    for statement in SESSION_SETTINGS:
        await conn.execute(statement)
    await conn.commit()


class PooledConnection(psycopg.AsyncConnection[Any]):
    """psycopg's connection, keeping a raw cursor for the compiled statements it runs (`raw_cursor`).
    A cursor keeps its adaptation of the statement it ran last (its parameters' dumpers, its
    columns' loaders), which a new cursor looks up again at each run: a recall's statement runs
    on the same cursor each time (bench/RESULTS.md, "The Python around the statement, second pass")."""

    _raw_cursor: tuple[RowFactory[Any], psycopg.AsyncRawCursor[Any]] | None = None

    def raw_cursor(self, row_factory: RowFactory[Any]) -> psycopg.AsyncRawCursor[Any]:
        """The kept raw cursor (holding the last statement's rows until the next one: a connection
        runs one statement at a time); a new one for another row factory, which a cursor would
        otherwise apply to the rows it holds."""
        kept = self._raw_cursor
        if kept is not None and kept[0] is row_factory and not kept[1].closed:
            return kept[1]
        cursor = psycopg.AsyncRawCursor(self, row_factory=row_factory)
        self._raw_cursor = (row_factory, cursor)
        return cursor


class Pool(AsyncConnectionPool[Connection]):
    """psycopg_pool's pool of `PooledConnection`s, lending the most recently returned connection
    first (see `policy.lend_newest_first`), and counting the connections it has lent (`in_use`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, connection_class=PooledConnection, **kwargs)
        self.loop = asyncio.get_running_loop()  # async only
        self.in_use = 0
        self._counting = threading.Lock()

    async def getconn(self, timeout: float | None = None) -> Connection:  # noqa: ASYNC109 (psycopg_pool's)
        conn = await super().getconn(timeout)
        with self._counting:
            self.in_use += 1
        return conn

    async def putconn(self, conn: Connection) -> None:
        with self._counting:
            self.in_use -= 1
        await super().putconn(conn)

    async def _get_ready_connection(self, timeout: float | None) -> Connection | None:  # noqa: ASYNC109 (psycopg_pool's)
        idle = getattr(self, "_pool", None)
        turned = lend_newest_first(idle)
        try:
            conn = await super()._get_ready_connection(timeout)
        except BaseException:
            if turned:
                lend_oldest_first(idle)
            raise
        return conn


Node = tuple[str, int]
"""Another node of the cluster: its host and port."""


def node_conninfo(dsn: str, node: Node) -> str:
    """`dsn` (user, database, password, options...) at `node`'s address instead of its own. Its
    `hostaddr` is set empty: libpq takes a parameter left out from `PGHOSTADDR` or the DSN's
    `service=` file, whose address (the coordinator's) would win over the node's host."""
    params = conninfo_to_dict(dsn)
    params["host"], params["port"], params["hostaddr"] = node[0], str(node[1]), ""
    return make_conninfo("", **params)


class NodePools:
    """A pool per other node of the cluster read directly (a Citus worker), opened on first use
    with the store's connection settings at that node's address, connecting in the background;
    a node `unreachable` says is not read again for `policy.NODE_RETRY_S`."""

    def __init__(self, dsn: str, max_size: int) -> None:
        self._dsn = dsn
        self._max_size = max_size
        self._pools: dict[Node, Pool] = {}
        self._retry_at: dict[Node, float] = {}
        self._closed = False

    def reachable(self, node: Node) -> bool:
        return self._retry_at.get(node, 0.0) <= time.monotonic()

    def unreachable(self, node: Node) -> None:
        self._retry_at[node] = time.monotonic() + NODE_RETRY_S

    async def pool(self, node: Node) -> Pool | None:
        """`node`'s pool, opened on first use; None once `close` has run (a recall racing the close
        reads through the coordinator, on a pool that is closed too, so it fails as it should)."""
        pool = self._pools.get(node)
        if pool is not None or self._closed:
            return pool
        pool = Pool(
            node_conninfo(self._dsn, node),
            min_size=1,
            max_size=self._max_size,
            kwargs=CONNECTION_KWARGS,
            configure=configure,
            check=check,
            reconnect_timeout=RECONNECT_TIMEOUT_S,
            open=False,
        )
        await pool.open()
        kept = self._pools.setdefault(node, pool)  # another caller may have opened one meanwhile
        if kept is not pool or self._closed:  # (closed meanwhile: `close` did not see this one)
            await pool.close()
        return None if self._closed else kept

    def opened(self) -> list[Pool]:
        return list(self._pools.values())

    async def close(self) -> None:
        self._closed = True
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.close()


async def check(conn: Connection) -> None:
    """The pool's check before lending `conn`: a round trip only when `policy.may_be_dropped`."""
    if may_be_dropped(conn):
        await AsyncConnectionPool.check_connection(conn)


async def filled(pool: Pool, dsn: str, pool_timeout: float) -> None:
    """Wait until the pool holds its first connections (`pool.wait` would close the pool when it
    gives up, so what kept it from connecting could no longer be seen): at `pool_timeout`, probe
    the server with the pool's connections still open, raising why a new one fails, else
    `PoolTimeout`."""
    deadline = time.monotonic() + pool_timeout
    while pool.get_stats().get("pool_available", 0) < pool.min_size:
        if time.monotonic() >= deadline:
            await probe(dsn, PROBE_CONNECT_TIMEOUT_S)
            raise PoolTimeout(f"the pool's first {pool.min_size} connections were not ready in {pool_timeout:g} s")
        # sync: time.sleep(POOL_FILL_POLL_S)
        await asyncio.sleep(POOL_FILL_POLL_S)


async def probe(dsn: str, within_s: float) -> None:
    """Open and set up a connection as the pool does, and close it: raise `StoreUnavailableError`
    saying why if PostgreSQL is unreachable, or reachable but refusing the connection or its
    setup; return if it could be made."""
    try:
        probe = await psycopg.AsyncConnection.connect(
            dsn, connect_timeout=max(1, min(PROBE_CONNECT_TIMEOUT_S, round(within_s))), **CONNECTION_KWARGS
        )
    except psycopg.OperationalError as exc:
        raise connection_failed(exc) from exc
    try:
        await configure(probe)
    except psycopg.Error as exc:
        raise rejected(exc) from exc
    finally:
        await probe.close()

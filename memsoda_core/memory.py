"""`Memory`: the synchronous store. Only the lines that do I/O live here; see `base` and `ops`."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack, suppress
from types import TracebackType
from typing import Any, TextIO, TypeVar

import numpy as np
import psycopg
from pgvector.psycopg import register_vector
from psycopg_pool import ConnectionPool, PoolTimeout

from memsoda_core.embedders import Embedder, check_vectors
from memsoda_core.errors import MemsodaError
from memsoda_core.files import open_sink, progress_callback, read_jsonl
from memsoda_core.memory_base import MemoryBase, check_import_args, open_args
from memsoda_core.models import EpisodeInput, FactInput, ImportReport, RecallResult
from memsoda_core.ops.opening import open_store
from memsoda_core.options import RecallOptions
from memsoda_core.runner.embedding import call_with_timeout, embedding_failure
from memsoda_core.runner.policy import (
    CANCEL_TIMEOUT_S,
    CONNECTION_KWARGS,
    END_GENERIC_PLAN,
    FORCE_GENERIC_PLAN,
    GENERIC_PLAN_PENDING,
    PEEK_CONNECTION_WAIT_S,
    PIPELINE_SUPPORTED,
    POOL_MIN_SIZE,
    PREPARED_MAX,
    PROBE_CONNECT_TIMEOUT_S,
    SESSION_SETTINGS,
    SPARE_CONNECTION_WAIT_S,
    check_pool_args,
    lend_newest_first,
    lend_oldest_first,
    maintenance_failed,
    may_be_dropped,
    peek_failed,
    probe_wait,
    translate_db_error,
    unreachable,
)
from memsoda_core.runner.steps import (
    Concurrently,
    EmbedDocuments,
    EmbedQuery,
    Execute,
    Maintain,
    Operation,
    Peek,
    Planning,
    Synthesize,
)
from memsoda_core.runner.target import release_target, resolve_target

T = TypeVar("T")


def _configure(conn: psycopg.Connection[Any]) -> None:
    register_vector(conn)
    conn.prepared_max = PREPARED_MAX
    for statement in SESSION_SETTINGS:
        conn.execute(statement)
    conn.commit()


class _Pool(ConnectionPool[psycopg.Connection[Any]]):
    """psycopg_pool's pool, lending the most recently returned connection first (see
    `base.lend_newest_first`)."""

    def _get_ready_connection(self, timeout: float | None) -> psycopg.Connection[Any] | None:
        idle = getattr(self, "_pool", None)
        turned = lend_newest_first(idle)
        try:
            conn = super()._get_ready_connection(timeout)
        except BaseException:
            if turned:
                lend_oldest_first(idle)
            raise
        return conn


def _check(conn: psycopg.Connection[Any]) -> None:
    """The pool's check before lending `conn`, a round trip only when `base.may_be_dropped`."""
    if may_be_dropped(conn):
        ConnectionPool.check_connection(conn)


def _fetch(conn: psycopg.Connection[Any], request: Execute) -> list[Any]:
    if request.planning is Planning.GENERIC and PIPELINE_SUPPORTED:
        return _fetch_at_once([conn], [request])[0]
    with conn.cursor() as cursor:
        cursor.execute(request.statement, request.params, prepare=request.planning is not Planning.FRESH)
        return cursor.fetchall() if cursor.rownumber is not None else []


def _fetch_at_once(conns: Sequence[psycopg.Connection[Any]], requests: Sequence[Execute]) -> list[list[Any]]:
    """Each request on its own connection, every one sent before any reply is awaited (one pipeline
    per connection, so one thread runs them at once); a GENERIC request between its setting and
    the reset (see `base.END_GENERIC_PLAN` for how the setting never outlives the statement)."""
    cursors = [conn.cursor() for conn in conns]
    with ExitStack() as pipelines:
        for conn, cursor, request in zip(conns, cursors, requests, strict=True):
            pipelines.enter_context(conn.pipeline())
            pipelines.push(_cancel_when_failing(conn))
            if request.planning is Planning.GENERIC:
                GENERIC_PLAN_PENDING.add(conn)
                conn.execute(FORCE_GENERIC_PLAN)
            cursor.execute(request.statement, request.params, prepare=request.planning is not Planning.FRESH)
            if request.planning is Planning.GENERIC:
                conn.execute(END_GENERIC_PLAN)
    for conn in conns:
        GENERIC_PLAN_PENDING.discard(conn)
    return [cursor.fetchall() if cursor.rownumber is not None else [] for cursor in cursors]


def _cancel_when_failing(conn: psycopg.Connection[Any]) -> Callable[..., bool]:
    """An exit callback for `conn`'s pipeline: when the wait for another statement fails or is
    interrupted, cancel `conn`'s statement too, so its pipeline closes at once."""

    def cancel(exc_type: type[BaseException] | None, *_: object) -> bool:
        if exc_type is not None:
            with suppress(psycopg.Error):
                conn.cancel_safe(timeout=CANCEL_TIMEOUT_S)
        return False

    return cancel


def _end_autocommit(conn: psycopg.Connection[Any]) -> None:
    """Back to transactions before the pool lends `conn` again; a GENERIC statement left half done
    on it (a client-side error between its SET and RESET) is finished first."""
    if not conn.closed and conn in GENERIC_PLAN_PENDING:
        try:
            conn.execute(END_GENERIC_PLAN)
        except psycopg.Error:
            conn.close()  # the pool drops a closed connection rather than lend it with the setting
        GENERIC_PLAN_PENDING.discard(conn)
    if not conn.closed:
        conn.autocommit = False


class Memory(MemoryBase):
    """Long-term memory of facts in PostgreSQL + pgvector. Open with `Memory.open()`."""

    _pool: ConnectionPool[psycopg.Connection[Any]]

    @classmethod
    def open(
        cls,
        dsn: str | None = None,
        embedder: Embedder | None = None,
        *,
        home: str | os.PathLike[str] | None = None,
        schema: str = "memsoda",
        options: RecallOptions | None = None,
        synthesizer: Any = None,
        pool_size: int = 10,
        pool_timeout: float = 10.0,
        text_search_config: str = "english",
        cache_size: int = 1024,
        tenant_index_min_facts: int | None = None,
    ) -> Memory:
        """Open (creating or upgrading the schema) the store at `dsn`, `MEMSODA_DSN`, or the embedded
        server under `home` / `MEMSODA_HOME`. `embedder` defaults to OpenAI when `OPENAI_API_KEY` is
        set, else the offline all-MiniLM-L6-v2 model. A dataset/project gets its own vector and
        keyword indexes once it holds `tenant_index_min_facts` facts (built concurrently by the
        write that crosses it); smaller ones are searched exactly. The threshold is recorded in the
        store; None uses the recorded one (2,000 for a new store)."""
        check_pool_args(pool_size, pool_timeout)
        args = open_args(embedder, schema, text_search_config, tenant_index_min_facts)
        target = resolve_target(dsn, home)
        self = cls()
        try:
            with psycopg.connect(target.dsn, **CONNECTION_KWARGS) as conn:
                info = self._drive(open_store(**args["op"]), lambda: conn)
            self._pool = _Pool(
                target.dsn,
                min_size=min(POOL_MIN_SIZE, pool_size),
                max_size=pool_size,
                timeout=pool_timeout,
                kwargs=CONNECTION_KWARGS,
                configure=_configure,
                check=_check,
                open=True,
            )
            try:
                self._pool.wait(timeout=pool_timeout)  # so the first recall finds its spare connection
                self._setup(
                    info=info,
                    embedder=args["embedder"],
                    options=options,
                    synthesizer=synthesizer,
                    target=target,
                    cache_size=cache_size,
                )
            except BaseException:
                self._pool.close()
                raise
        except psycopg.Error as exc:
            release_target(target)
            raise translate_db_error(exc) from exc
        except BaseException:
            release_target(target)
            raise
        self._pool_timeout = pool_timeout
        return self

    def close(self) -> None:
        """Close the pool, and stop the embedded server if this was its last user."""
        self._pool.close()
        release_target(self._target)

    def __enter__(self) -> Memory:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- the runner: the only place that does I/O --------------------------------------------------

    def _run(self, op: Operation[T], *, read_only: bool = False) -> T:
        """Drive `op` on one pooled connection, in one transaction; `read_only` operations (recall,
        whose statements each stand alone) run in autocommit mode instead (no BEGIN / COMMIT)."""
        with ExitStack() as stack:
            conns: list[psycopg.Connection[Any]] = []

            def connection() -> psycopg.Connection[Any]:
                if not conns:
                    conn = self._checkout(stack)
                    if read_only:
                        conn.autocommit = True
                        stack.callback(_end_autocommit, conn)
                    conns.append(conn)
                return conns[0]

            try:
                return self._drive(op, connection)
            except (psycopg.Error, PoolTimeout) as exc:
                raise translate_db_error(exc) from exc

    def _checkout(self, stack: ExitStack) -> psycopg.Connection[Any]:
        """A pooled connection. While waiting, probe the server every `PROBE_AFTER_S`, so a stopped
        PostgreSQL fails fast as StoreUnavailableError instead of after the whole pool timeout."""
        deadline = time.monotonic() + self._pool_timeout
        while True:
            try:
                return stack.enter_context(self._pool.connection(timeout=probe_wait(deadline)))
            except PoolTimeout:
                if time.monotonic() >= deadline:
                    raise
                try:
                    psycopg.connect(self._target.dsn, connect_timeout=PROBE_CONNECT_TIMEOUT_S).close()
                except psycopg.OperationalError as exc:
                    raise unreachable(exc) from exc

    def _drive(self, op: Operation[T], connection: Any) -> T:
        reply: Any = None
        error: BaseException | None = None
        while True:
            try:
                request = op.throw(error) if error is not None else op.send(reply)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            reply, error = None, None
            if isinstance(request, Execute):
                reply = _fetch(connection(), request)
            elif isinstance(request, Concurrently):
                reply = self._concurrently(connection(), request.statements)
            elif isinstance(request, Maintain):
                reply = self._maintain(connection(), request)
            elif isinstance(request, Peek):
                reply = self._peek(request)
            elif isinstance(request, EmbedQuery | EmbedDocuments):
                try:
                    reply = self._embed(request)
                except MemsodaError as exc:
                    error = exc
            elif isinstance(request, Synthesize):
                try:
                    assert self._synthesizer is not None
                    reply = self._synthesizer.synthesize(request.context, request.query)
                except Exception as exc:
                    error = exc

    def _concurrently(self, conn: psycopg.Connection[Any], statements: Sequence[Execute]) -> list[list[Any]]:
        """The first statement on `conn` and the others on spare pooled connections, all at once;
        those left without a spare (a busy pool, or no pipelines) after them on `conn`."""
        spares: list[psycopg.Connection[Any]] = []
        try:
            while PIPELINE_SUPPORTED and len(spares) < len(statements) - 1:
                try:
                    spares.append(self._pool.getconn(timeout=SPARE_CONNECTION_WAIT_S))
                except PoolTimeout:
                    break
                spares[-1].autocommit = True
            if not spares:
                return [_fetch(conn, statement) for statement in statements]
            together = len(spares) + 1
            at_once = _fetch_at_once([conn, *spares], statements[:together])
            return at_once + [_fetch(conn, statement) for statement in statements[together:]]
        finally:
            for spare in spares:
                try:
                    _end_autocommit(spare)
                finally:
                    self._pool.putconn(spare)

    def _peek(self, request: Peek) -> list[Any] | None:
        try:
            with self._pool.connection(timeout=PEEK_CONNECTION_WAIT_S) as conn:
                return _fetch(conn, Execute(request.statement, request.params))
        except (psycopg.Error, PoolTimeout) as exc:
            peek_failed(request, exc)
            return None

    @staticmethod
    def _maintain(conn: psycopg.Connection[Any], request: Maintain) -> list[Any] | None:
        conn.commit()
        try:
            conn.autocommit = True
            try:
                return _fetch(conn, Execute(request.statement, request.params))
            finally:
                conn.autocommit = False
        except psycopg.Error as exc:
            maintenance_failed(request, exc)
            return None

    def _embed(self, request: EmbedQuery | EmbedDocuments) -> Any:
        dims = self._info.dimensions
        if isinstance(request, EmbedDocuments):
            try:
                vectors = self._embedder.embed_documents(list(request.texts))
            except Exception as exc:
                raise embedding_failure(exc) from exc
            return check_vectors(vectors, count=len(request.texts), dimensions=dims)
        cached = self._cache.get(request.text)
        if cached is not None:
            return cached
        try:
            vector = call_with_timeout(self._embedder.embed_query, request.text, request.timeout_s)
        except Exception as exc:
            raise embedding_failure(exc) from exc
        (checked,) = check_vectors([vector], count=1, dimensions=dims)
        self._cache.put(request.text, checked)
        return checked

    # --- public API --------------------------------------------------------------------------------

    def add_facts(
        self,
        facts: Sequence[FactInput | Mapping[str, Any]],
        *,
        dataset: str,
        project: str,
        vectors: Sequence[Sequence[float]] | np.ndarray[Any, Any] | None = None,
    ) -> list[int]:
        """Store facts (dicts or FactInput) in one transaction with one embedding call; returns
        their ids in input order. `vectors`, one per fact, are stored as the facts' embeddings
        instead of embedding their texts (entity names are still embedded by the store's
        embedder). Invalid input raises before anything is written."""
        return self._run(self._add_facts_op(facts, dataset, project, vectors))

    def invalidate(self, fact_id: int, *, dataset: str, project: str, at: Any = None) -> bool:
        """End a fact's validity at `at` (default now). False if it had already ended by then."""
        return self._run(self._invalidate_op(fact_id, dataset, project, at))

    def supersede(self, fact_id: int, new_fact: FactInput | Mapping[str, Any], *, dataset: str, project: str) -> int:
        """Store `new_fact` and end `fact_id` at its valid_at, atomically; returns the new id."""
        return self._run(self._supersede_op(fact_id, new_fact, dataset, project))

    def add_episodes(
        self, episodes: Sequence[EpisodeInput | Mapping[str, Any]], *, dataset: str, project: str
    ) -> list[int]:
        """Store cross-thread episode summaries; returns their ids."""
        return self._run(self._add_episodes_op(episodes, dataset, project))

    def forget(self, *, dataset: str, project: str, entity: str | None = None) -> int:
        """Delete an entity and every fact touching it, or the whole dataset/project when
        `entity` is None. Returns the number of facts deleted."""
        return self._run(self._forget_op(dataset, project, entity))

    def recall(
        self,
        query: str | None = None,
        *,
        dataset: str,
        project: str,
        facts_in_context: int | None = None,
        min_confidence: float | None = None,
        anchor_vector_top_k: int | None = None,
        anchor_vector_min: float | None = None,
        rrf_k: int | None = None,
        include: Iterable[str] = (),
        query_embedding: Sequence[float] | None = None,
        as_of: Any = None,
        options: RecallOptions | None = None,
    ) -> RecallResult:
        """The facts that matter for `query`, fused from vector, entity-anchor and keyword signals
        and rendered for a prompt. No query: the most recent live facts. Never raises for an
        embedder failure: the result is then `degraded`."""
        return self._run(
            self._recall_op(
                query,
                dataset=dataset,
                project=project,
                include=include,
                query_embedding=query_embedding,
                as_of=as_of,
                options=options,
                overrides={
                    "facts_in_context": facts_in_context,
                    "min_confidence": min_confidence,
                    "anchor_vector_top_k": anchor_vector_top_k,
                    "anchor_vector_min": anchor_vector_min,
                    "rrf_k": rrf_k,
                },
            ),
            read_only=True,
        )

    def stats(self, *, dataset: str | None = None, project: str | None = None) -> list[dict[str, Any]]:
        """Per scope: facts, live facts, entities, episodes."""
        return self._run(self._stats_op(dataset, project))

    def maintain(self) -> list[str]:
        """Refresh statistics and build the tenant indexes of every dataset/project at or above
        `tenant_index_min_facts` facts that lacks them (writes through memsoda do this on their
        own; call it after loading rows with COPY). Returns the names of the indexes built."""
        return self._run(self._maintain_op())

    def export_jsonl(self, target: str | os.PathLike[str] | TextIO, *, dataset: str, project: str) -> int:
        """Write the scope's facts and episodes as JSON lines; returns the number of lines."""
        with open_sink(target) as sink:
            return self._run(self._export_op(sink, dataset, project))

    def import_jsonl(
        self,
        source: str | os.PathLike[str] | TextIO,
        *,
        dataset: str,
        project: str,
        on_error: str = "raise",
        batch_size: int = 500,
        progress: bool = False,
        rebuild_index: bool | None = None,
    ) -> ImportReport:
        """Import JSON lines (as written by `export_jsonl`) in one transaction: every line is
        validated first; `on_error="raise"` rejects the file at the first bad line (nothing
        written), `"skip"` imports the rest and reports bad lines with their numbers.

        Into a scope with its own fact HNSW index, `rebuild_index=True` drops it first and builds
        it once after the rows (several times faster than maintaining it row by row, but the
        scope's vector search is exact, so slower, until it is back); `False` keeps it; `None`
        (default) rebuilds when the import brings at least 1/4 as many facts as the scope holds."""
        check_import_args(on_error, batch_size, rebuild_index)
        parsed = self._parse_import(read_jsonl(source), dataset, project, on_error)
        with progress_callback(parsed.total, progress) as advance:
            try:
                counts = self._run(self._import_op(parsed, batch_size, advance, rebuild_index))
            except Exception:
                with suppress(MemsodaError):  # best effort; the next write or open retries it
                    self._run(self._restore_indexes_op(parsed))
                raise
        return parsed.report(*counts)

"""What `Memory` and `AsyncMemory` share: argument checking, operation building, the query-embedding
cache, connection settings and error translation. The two classes add only the I/O lines."""

from __future__ import annotations

import logging
import os
import select
import sys
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO, TypeVar

import numpy as np
import psycopg
from psycopg import sql

from . import ops
from .embedders import Embedder, check_vectors, default_embedder
from .embedders.protocol import Vector
from .errors import (
    ConfigurationError,
    EmbeddingError,
    MemsodaError,
    StoreError,
    StoreUnavailableError,
    ValidationError,
)
from .models import EpisodeInput, FactInput, ImportReport, IncludeOption, RecallResult
from .ops import StoreInfo
from .options import DEFAULT_OPTIONS, RecallOptions
from .scope_sizes import ScopeSizes
from .steps import Maintain, Operation, Peek
from .synthesis import Synthesizer, as_synthesizer
from .validation import (
    Scope,
    ValidEpisode,
    ValidFact,
    check_entity_name,
    check_optional_scope,
    check_query,
    check_scope,
    parse_time,
)

T = TypeVar("T")

logger = logging.getLogger(__name__)

INCLUDE_OPTIONS: frozenset[str] = frozenset({"raw", "episodes", "synthesis"})

SESSION_SETTINGS = (
    # Filtered HNSW scans stop early and under-fill a tenant's top-k; iterative scans keep going.
    sql.SQL("SET hnsw.iterative_scan = relaxed_order"),
    sql.SQL("SET hnsw.ef_search = 100"),
)
"""Run on every new pooled connection."""

FORCE_GENERIC_PLAN = sql.SQL("SET plan_cache_mode = force_generic_plan")
END_GENERIC_PLAN = sql.SQL("RESET plan_cache_mode")
"""Sent before and after a `Planning.GENERIC` statement, in one pipeline (one round trip). If the
statement fails on the server, the pipeline's implicit transaction (autocommit) or the operation's
transaction rolls the setting back; if the client stops in between (an error before sending, a
cancelled task), the connection stays in `GENERIC_PLAN_PENDING` and the runner restores it when it
ends autocommit, before the connection goes back to the pool. (Not the pool's `reset` callback:
with one, psycopg_pool returns every connection through a worker thread, later.)"""

GENERIC_PLAN_PENDING: weakref.WeakSet[Any] = weakref.WeakSet()
"""Connections where a `Planning.GENERIC` statement started and did not finish."""

PIPELINE_SUPPORTED = psycopg.Pipeline.is_supported()
"""Pipelines need libpq 14+ (psycopg[binary] ships it); without, GENERIC statements run as CACHED
and recall's statements run one after the other on one connection."""

PREPARE_ONLY_WHEN_ASKED = sys.maxsize
"""psycopg's threshold for preparing a statement by itself: never reached. `None` would disable
preparing altogether, even the statements memsoda asks for (`Execute.planning`)."""

PREPARED_MAX = 40
"""Prepared statements kept per pooled connection (psycopg drops the least recently used). Each
recall statement's kept plan holds ~0.4 MB of server memory (pg_backend_memory_contexts), so 40 is
~16 MB per connection: the shared statements and the own statements of ~18 indexed scopes."""

CONNECTION_KWARGS: dict[str, Any] = {
    # Automatic prepared statements share one generic plan across tenants of very different sizes
    # (PERF-NOTES measured 110 ms instead of 11 ms); only statements whose one plan suits every
    # scope they run for are prepared, on request (see `scope_sizes`).
    "prepare_threshold": PREPARE_ONLY_WHEN_ASKED,
    "autocommit": False,
}


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where the store is: a DSN, and the embedded server's data dir when we started one."""

    dsn: str
    pgdata: Path | None


def resolve_target(dsn: str | None, home: str | os.PathLike[str] | None) -> Target:
    """`dsn`, else `MEMSODA_DSN`, else the embedded server under `home` / `MEMSODA_HOME`."""
    chosen = dsn or os.environ.get("MEMSODA_DSN")
    if chosen:
        return Target(dsn=chosen, pgdata=None)
    from . import server

    pgdata, uri = server.acquire(Path(home) if home is not None else None)
    return Target(dsn=uri, pgdata=pgdata)


def release_target(target: Target) -> None:
    if target.pgdata is not None:
        from . import server

        server.release(target.pgdata)


def check_schema_name(schema: str) -> str:
    """Any PostgreSQL name (it is always quoted), except one with `%`, which psycopg would read as
    a placeholder in every statement that names the schema, or NUL."""
    if not isinstance(schema, str) or not schema or len(schema) > 63:
        raise ConfigurationError("schema must be a non-empty name of at most 63 characters")
    if "%" in schema or "\x00" in schema:
        raise ConfigurationError("schema names cannot contain '%' or NUL characters")
    return schema


PROBE_AFTER_S = 1.0
"""While waiting for a pooled connection, check this often whether PostgreSQL is reachable."""
PROBE_CONNECT_TIMEOUT_S = 2

SPARE_CONNECTION_WAIT_S = 0.002
"""How long a recall waits for a second pooled connection to run its statements at once; without
one (a busy pool) it runs them one after the other on its own connection, so recalls never wait
on each other for spare connections."""

CANCEL_TIMEOUT_S = 5.0
"""How long a recall whose other statement failed (or whose task was cancelled) waits for the
server to accept the cancel request for the statement still running."""

PEEK_CONNECTION_WAIT_S = 0.05
"""How long a write waits for a connection to look up known entities before embedding (`Peek`).
The look-up only saves work, so on a busy pool it is skipped (every name is embedded) rather than
adding a wait to the one the write's own connection may need."""

POOL_MIN_SIZE = 2
"""Connections kept open: a recall's two statements run at once on two of them."""


def lend_newest_first(idle: object) -> bool:
    """Before psycopg_pool takes the oldest idle connection (it lends first in, first out), move the
    newest to the front, so the pool lends last in, first out. A recall uses two connections; with
    first in, first out every recall got the two that had been idle longest (their server
    processes and caches cold), and a pool that grew once kept cycling through all of them: a
    10k-fact tenant's recall took 7.1-7.4 ms p50 that way and 6.3-6.4 ms last in, first out,
    interleaved with another store's recalls. The least used stay idle and close after `max_idle`
    (down to the pool's minimum). psycopg_pool has no option for this; `idle` is its private
    queue, left alone if that ever changes shape. Returns whether it was turned."""
    if isinstance(idle, deque) and len(idle) > 1:
        idle.rotate(1)
        return True
    return False


def lend_oldest_first(idle: object) -> None:
    """Undo `lend_newest_first` when the pool then lent nothing (a spent timeout, an error)."""
    if isinstance(idle, deque):
        idle.rotate(-1)


def may_be_dropped(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """Whether a pooled connection needs the pool's round-trip check before it is lent: only when
    it is closed or its socket has something to read. An idle connection is sent nothing, so news
    means the server closed or terminated it (a restart, `pg_terminate_backend`, an idle timeout:
    each sends a message and closes the socket) or a notification came. This keeps the pool's
    self-healing without a round trip per checkout (two per recall)."""
    if conn.closed:
        return True
    try:
        if hasattr(select, "poll"):
            poller = select.poll()  # no limit on descriptor numbers, unlike select()
            poller.register(conn.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([conn.fileno()], [], [], 0)  # Windows has no poll()
        return bool(readable)
    except Exception:
        return True  # unsure: let the pool ping it


def probe_wait(deadline: float) -> float:
    """How long to wait for a pooled connection before probing the server again."""
    return max(0.0, min(PROBE_AFTER_S, deadline - time.monotonic()))


def unreachable(exc: BaseException) -> StoreUnavailableError:
    return StoreUnavailableError(f"PostgreSQL is unavailable (unreachable): {str(exc).strip()}")


def check_pool_args(pool_size: Any, pool_timeout: Any) -> None:
    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < 1:
        raise ConfigurationError(f"pool_size must be an int of at least 1, got {pool_size!r}")
    if isinstance(pool_timeout, bool) or not isinstance(pool_timeout, int | float) or not pool_timeout > 0:
        raise ConfigurationError(f"pool_timeout must be a positive number of seconds, got {pool_timeout!r}")


def translate_db_error(exc: BaseException) -> MemsodaError:
    """A database or pool error as a documented memsoda error."""
    from psycopg_pool import PoolTimeout

    if isinstance(exc, PoolTimeout):
        return StoreUnavailableError(
            f"no database connection became free in time ({exc}); raise pool_size or pool_timeout"
        )
    if isinstance(exc, psycopg.OperationalError):
        return StoreUnavailableError(f"PostgreSQL is unavailable: {str(exc).strip()}")
    return StoreError(f"the database rejected the operation: {str(exc).strip()}")


class EmbeddingCache:
    """A bounded LRU of query embeddings: identical query texts are embedded once."""

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._items: OrderedDict[str, Vector] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str) -> Vector | None:
        with self._lock:
            vector = self._items.get(text)
            if vector is not None:
                self._items.move_to_end(text)
            return vector

    def put(self, text: str, vector: Vector) -> None:
        if self._size <= 0:
            return
        with self._lock:
            self._items[text] = vector
            self._items.move_to_end(text)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


def check_embedder(embedder: Embedder | None) -> Embedder:
    chosen = embedder if embedder is not None else default_embedder()
    for attribute in (
        "embed_documents",
        "embed_query",
        "aembed_documents",
        "aembed_query",
        "model",
        "dimensions",
    ):
        if not hasattr(chosen, attribute):
            raise ConfigurationError(
                f"embedder {type(chosen).__name__} lacks {attribute!r}; wrap LangChain or LlamaIndex models with "
                "memsoda_langchain.LangChainEmbedder / memsoda_llamaindex.LlamaIndexEmbedder"
            )
    return chosen


def call_with_timeout(function: Callable[[str], list[float]], argument: str, timeout_s: float) -> list[float]:
    """Run a blocking embedder call on its own daemon thread and wait at most `timeout_s`.

    A thread per call (not a small pool) so a hung embedder can never starve later recalls:
    the abandoned thread finishes, or not, on its own while the recall degrades."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = function(argument)
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=target, name="memsoda-embed", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"the embedder timed out after {timeout_s:g}s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]  # type: ignore[no-any-return]


def embedding_failure(exc: BaseException) -> EmbeddingError:
    if isinstance(exc, EmbeddingError):
        return exc
    if isinstance(exc, TimeoutError):
        return EmbeddingError(str(exc) or "the embedder timed out")
    return EmbeddingError(f"the embedder failed: {type(exc).__name__}: {exc}")


def peek_failed(request: Peek, exc: BaseException) -> None:
    """Log a failed best-effort read; the operation goes on without what it would have told."""
    logger.info("best-effort read failed, going on without it: %s (%s)", exc, request.statement)


def maintenance_failed(request: Maintain, exc: BaseException) -> None:
    """Log a failed maintenance statement; the operation goes on (the next write retries it)."""
    logger.warning("maintenance statement failed, to be retried by a later write: %s (%s)", exc, request.statement)


@dataclass(frozen=True, kw_only=True)
class ParsedImport:
    """A validated JSONL file, ready to write."""

    scope: Scope
    facts: list[ValidFact]
    episodes: list[ValidEpisode]
    errors: list[tuple[int, str]]

    @property
    def total(self) -> int:
        return len(self.facts) + len(self.episodes)

    def report(self, facts: int, episodes: int) -> ImportReport:
        return ImportReport(facts=facts, episodes=episodes, skipped=len(self.errors), errors=tuple(self.errors))


class MemoryBase:
    """State and operation builders shared by Memory and AsyncMemory."""

    _info: StoreInfo
    _embedder: Embedder
    _options: RecallOptions
    _synthesizer: Synthesizer | None
    _cache: EmbeddingCache
    _target: Target
    _pool_timeout: float

    def _setup(
        self,
        *,
        info: StoreInfo,
        embedder: Embedder,
        options: RecallOptions | None,
        synthesizer: Any,
        target: Target,
        cache_size: int,
    ) -> None:
        self._info = info
        self._embedder = embedder
        self._options = options or DEFAULT_OPTIONS
        self._synthesizer = as_synthesizer(synthesizer)
        self._cache = EmbeddingCache(cache_size)
        self._scope_sizes = ScopeSizes()
        self._target = target

    @property
    def options(self) -> RecallOptions:
        """Default recall options of this memory (frozen; pass `options=` to recall for variants)."""
        return self._options

    @property
    def embedder(self) -> Embedder:
        return self._embedder

    @property
    def dsn(self) -> str:
        """The connection string in use (the embedded server's socket URI when embedded)."""
        return self._target.dsn

    @property
    def info(self) -> StoreInfo:
        """Schema name, embedding model and dimension of the open store."""
        return self._info

    @staticmethod
    def _now() -> datetime:
        return datetime.now(UTC)

    # Operation builders: validate arguments here, eagerly, so bad input raises at the call.

    def _resizing(self, scope: Scope, op: Operation[T]) -> Operation[T]:
        """`op`, a write that changes how many facts `scope` holds; its remembered size is dropped
        once the write is done (see `scope_sizes`)."""
        result = yield from op
        self._scope_sizes.forget(scope)
        return result

    def _add_facts_op(
        self,
        facts: Sequence[FactInput | Mapping[str, Any]],
        dataset: str,
        project: str,
        vectors: Sequence[Sequence[float]] | np.ndarray[Any, Any] | None,
    ) -> Operation[list[int]]:
        scope = check_scope(dataset, project)
        return self._resizing(scope, ops.add_facts(self._info, scope, facts, now=self._now(), vectors=vectors))

    def _invalidate_op(self, fact_id: int, dataset: str, project: str, at: Any) -> Operation[bool]:
        return ops.invalidate(self._info, check_scope(dataset, project), fact_id, at=at, now=self._now())

    def _supersede_op(
        self, fact_id: int, new_fact: FactInput | Mapping[str, Any], dataset: str, project: str
    ) -> Operation[int]:
        scope = check_scope(dataset, project)
        return self._resizing(scope, ops.supersede(self._info, scope, fact_id, new_fact, now=self._now()))

    def _add_episodes_op(
        self, episodes: Sequence[EpisodeInput | Mapping[str, Any]], dataset: str, project: str
    ) -> Operation[list[int]]:
        return ops.add_episodes(self._info, check_scope(dataset, project), episodes, now=self._now())

    def _forget_op(self, dataset: str, project: str, entity: str | None) -> Operation[int]:
        scope = check_scope(dataset, project)
        name = None if entity is None else check_entity_name(entity)
        return self._resizing(scope, ops.forget(self._info, scope, name))

    def _recall_op(
        self,
        query: str | None,
        *,
        dataset: str,
        project: str,
        include: Iterable[str],
        query_embedding: Sequence[float] | None,
        as_of: Any,
        options: RecallOptions | None,
        overrides: dict[str, Any],
    ) -> Operation[RecallResult]:
        scope = check_scope(dataset, project)
        text = check_query(query)
        chosen = (options or self._options).with_overrides({k: v for k, v in overrides.items() if v is not None})
        if isinstance(include, str):
            include = (include,)
        wanted = frozenset(include)
        unknown = sorted(wanted - INCLUDE_OPTIONS)
        if unknown:
            raise ValidationError(f"unknown include option(s) {unknown}; use any of {sorted(INCLUDE_OPTIONS)}")
        if "synthesis" in wanted and self._synthesizer is None:
            raise ConfigurationError("include=['synthesis'] needs Memory.open(synthesizer=...)")
        vector = None
        if query_embedding is not None:
            try:
                vector = check_vectors([query_embedding], count=1, dimensions=self._info.dimensions)[0]
            except EmbeddingError as exc:
                raise ValidationError(f"query_embedding is not usable: {exc}") from None
        when = parse_time(as_of, "as_of")
        typed: frozenset[IncludeOption] = wanted  # type: ignore[assignment]
        return ops.recall(
            self._info,
            scope,
            text,
            options=chosen,
            include=typed,
            query_embedding=vector,
            as_of=when,
            now=self._now(),
            scope_sizes=self._scope_sizes,
        )

    def _parse_import(self, lines: Sequence[str], dataset: str, project: str, on_error: str) -> ParsedImport:
        scope = check_scope(dataset, project)
        facts, episodes, errors = ops.parse_jsonl(lines, now=self._now(), on_error=on_error)
        return ParsedImport(scope=scope, facts=facts, episodes=episodes, errors=errors)

    def _import_op(
        self,
        parsed: ParsedImport,
        batch_size: int,
        progress: Callable[[int], None] | None,
        rebuild_index: bool | None,
    ) -> Operation[tuple[int, int]]:
        return self._resizing(
            parsed.scope,
            ops.import_records(
                self._info,
                parsed.scope,
                parsed.facts,
                parsed.episodes,
                batch_size=batch_size,
                progress=progress,
                rebuild_index=rebuild_index,
            ),
        )

    def _restore_indexes_op(self, parsed: ParsedImport) -> Operation[list[str]]:
        """After a failed import: build the scope's indexes it may have set aside."""
        return ops.ensure_tenant_indexes(self._info, parsed.scope)

    def _stats_op(self, dataset: str | None, project: str | None) -> Operation[list[dict[str, Any]]]:
        return ops.stats(self._info, *check_optional_scope(dataset, project))

    def _maintain_op(self) -> Operation[list[str]]:
        return ops.maintain(self._info)

    def _export_op(self, sink: TextIO, dataset: str, project: str) -> Operation[int]:
        return ops.export_jsonl(self._info, check_scope(dataset, project), sink)


def open_args(
    embedder: Embedder | None, schema: str, text_search_config: str, tenant_index_min_facts: int | None
) -> dict[str, Any]:
    """Arguments of `ops.open_store` for the chosen embedder (this may load a local model)."""
    if tenant_index_min_facts is not None:
        if isinstance(tenant_index_min_facts, bool) or not isinstance(tenant_index_min_facts, int):
            raise ConfigurationError("tenant_index_min_facts must be an int or None")
        if tenant_index_min_facts < 1:
            raise ConfigurationError("tenant_index_min_facts must be at least 1")
    chosen = check_embedder(embedder)
    return {
        "embedder": chosen,
        "op": {
            "schema": check_schema_name(schema),
            "model": str(chosen.model),
            "dimensions": int(chosen.dimensions),
            "text_search_config": text_search_config,
            "tenant_index_min_facts": tenant_index_min_facts,
        },
    }


@contextmanager
def progress_callback(
    total: int, enabled: bool, description: str = "importing"
) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar on stderr advanced by the returned callback, or None when disabled."""
    if not enabled or total == 0:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
    ) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


def read_jsonl(source: str | os.PathLike[str] | TextIO) -> list[str]:
    """All lines of a JSONL file path or open text file."""
    if isinstance(source, str | os.PathLike):
        with open(source, encoding="utf-8") as handle:
            return handle.readlines()
    return source.readlines()


@contextmanager
def open_sink(target: str | os.PathLike[str] | TextIO) -> Iterator[TextIO]:
    """Write to a path (created, utf-8) or to an already open text file."""
    if isinstance(target, str | os.PathLike):
        with open(target, "w", encoding="utf-8") as handle:
            yield handle
    else:
        yield target


IMPORT_ON_ERROR = ("raise", "skip")


def check_import_args(on_error: str, batch_size: int, rebuild_index: bool | None) -> None:
    if rebuild_index is not None and not isinstance(rebuild_index, bool):
        raise ValidationError(f"rebuild_index must be True, False or None, got {rebuild_index!r}")
    if on_error not in IMPORT_ON_ERROR:
        raise ValidationError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    if not 1 <= batch_size <= 10_000:
        raise ValidationError(f"batch_size must be between 1 and 10000, got {batch_size}")

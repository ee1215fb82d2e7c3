"""Every Memory operation as a sans-I/O generator, shared by `Memory` and `AsyncMemory`.

An operation yields `steps` requests and receives their results; it runs in one transaction that
the runner opens at the first `Execute` and commits when the operation returns (rolled back if it
raises). Embedding requests come before the first `Execute` (a write's `Peek` borrows a connection
and returns it at once), so no connection is held while a model runs; an import's later batches
are the exception, as they write inside the transaction of the whole file.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TextIO

import numpy as np
from psycopg import sql

from . import schema as ddl
from . import sql_tenant_index, sql_write
from .embedders.protocol import Vector, check_vectors
from .errors import (
    EmbedderMismatchError,
    EmbeddingError,
    ImportFormatError,
    IntervalError,
    NotFoundError,
    SchemaError,
    StoreError,
    ValidationError,
)
from .models import EpisodeInput, FactInput, IncludeOption, RecallResult
from .options import RecallOptions
from .params import BigintArray
from .recall import (
    assemble,
    decode_episodes,
    decode_fact,
    fuse_hits,
    plan_for,
    scored_facts,
    statement_params,
)
from .scope_sizes import ScopeSizes, recall_statement_choice
from .sql_recall import (
    episodes_statement,
    facts_statement,
    recall_statements,
    recent_episodes_statement,
)
from .steps import (
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
from .validation import (
    Scope,
    ValidEpisode,
    ValidFact,
    check_batch_size,
    parse_time,
    validate_episode,
    validate_facts,
)


@dataclass(frozen=True, kw_only=True)
class StoreInfo:
    """What an open store is: where its tables live and which vector space they hold."""

    schema: str
    model: str
    dimensions: int
    text_search_config: str
    tenant_index_min_facts: int = sql_tenant_index.DEFAULT_MIN_FACTS
    """A scope gets its own HNSW and GIN indexes from this many facts (see `sql_tenant_index`)."""


def _vectors(rows: Sequence[Sequence[float]]) -> list[np.ndarray[Any, np.dtype[np.float32]]]:
    return [np.asarray(row, dtype=np.float32) for row in rows]


# --- opening -------------------------------------------------------------------------------------

TENANT_INDEX_KEY = "tenant_index_min_facts"
"""Meta key of the store's threshold for tenant indexes (set by the last open that gave one)."""


def open_store(
    *, schema: str, model: str, dimensions: int, text_search_config: str, tenant_index_min_facts: int | None
) -> Operation[StoreInfo]:
    """Create or upgrade the schema (under an advisory lock), check the embedder matches, record
    `tenant_index_min_facts` if given (else use the recorded one, or the default), then build any
    tenant indexes a large scope lacks (after an upgrade, or an interrupted build)."""
    statement, params = ddl.lock_statement(schema)
    yield Execute(statement, params)
    for bootstrap in ddl.bootstrap_statements(schema):
        yield Execute(bootstrap)
    meta = dict((yield Execute(ddl.read_meta_statement(schema))))
    current = int(meta.get("schema_version", 0))
    if current > ddl.SCHEMA_VERSION:
        raise SchemaError(
            f"schema {schema!r} is at version {current}, newer than this memsoda supports "
            f"({ddl.SCHEMA_VERSION}); upgrade memsoda"
        )
    if current == 0:
        meta = {
            "model": model,
            "dimensions": str(dimensions),
            "text_search_config": text_search_config,
        }
    stored_model, stored_dims = meta["model"], int(meta["dimensions"])
    if stored_model != model or stored_dims != dimensions:
        raise EmbedderMismatchError(
            f"this store holds {stored_dims}-dimensional vectors of {stored_model!r}, but the embedder is "
            f"{model!r} with {dimensions} dimensions; open it with that embedder, or use another "
            f"schema (schema=...) or MEMSODA_HOME for the new model"
        )
    shape = ddl.StoreShape(schema=schema, dimensions=stored_dims, text_search_config=meta["text_search_config"])
    for version, migration in ddl.pending_migrations(current):
        for statement_ in migration(shape):
            yield Execute(statement_)
        meta["schema_version"] = str(version)
    if tenant_index_min_facts is not None:
        meta[TENANT_INDEX_KEY] = str(tenant_index_min_facts)  # recorded, so every process agrees
    for key, value in sorted(meta.items()):
        yield Execute(ddl.write_meta_statement(schema), (key, value))
    info = StoreInfo(
        schema=schema,
        model=stored_model,
        dimensions=stored_dims,
        text_search_config=shape.text_search_config,
        tenant_index_min_facts=int(meta.get(TENANT_INDEX_KEY, sql_tenant_index.DEFAULT_MIN_FACTS)),
    )
    yield from ensure_all_tenant_indexes(info)
    return info


# --- tenant indexes -----------------------------------------------------------------------------------


def ensure_tenant_indexes(info: StoreInfo, scope: Scope) -> Operation[list[str]]:
    """Once the scope holds `tenant_index_min_facts` facts, build its missing partial indexes
    (committing first what the operation wrote); returns the names built. Skipped when another
    session holds the scope's build lock. An index left invalid by a crashed build is dropped first."""
    indexes = sql_tenant_index.tenant_indexes(scope)
    rows = yield Execute(
        sql_tenant_index.missing_statement(info.schema),
        sql_tenant_index.missing_params(info.schema, scope, info.tenant_index_min_facts),
    )
    missing = {str(name): bool(present) for name, present in rows}
    if not missing:
        return []
    lock = sql_tenant_index.lock_key(info.schema, scope)
    locked = yield Maintain(sql_tenant_index.lock_statement(), lock)
    if not locked or not locked[0][0]:
        return []  # another session is building them, or an import has set them aside
    # Maintain steps never raise (a failure replies None), so the lock is always released.
    steps: list[tuple[str | None, sql.Composed]] = []  # (the index it builds, if any; its DDL)
    for index in indexes:
        if index.name in missing:
            if missing[index.name]:  # left invalid by a crashed build
                steps.append((None, sql_tenant_index.drop_statement(info.schema, index)))
            steps.append((index.name, sql_tenant_index.create_statement(info.schema, scope, index)))
    succeeded = yield from _index_ddl([statement for _, statement in steps])
    yield Maintain(sql_tenant_index.lock_statement(release=True), lock)
    return [name for name, _ in steps[:succeeded] if name is not None]


def _index_ddl(statements: Sequence[sql.Composed]) -> Operation[int]:
    """Run index DDL outside the transaction, under the build settings (memory, lock timeout),
    stopping at the first failure (what stopped it, a lock timeout most likely, would stop the
    rest too). Returns how many succeeded."""
    for setting in sql_tenant_index.build_settings():
        yield Maintain(setting)
    succeeded = 0
    for statement in statements:
        if (yield Maintain(statement)) is None:
            break
        succeeded += 1
    for setting in sql_tenant_index.build_settings(reset=True):
        yield Maintain(setting)
    return succeeded


def ensure_all_tenant_indexes(info: StoreInfo) -> Operation[list[str]]:
    """`ensure_tenant_indexes` for every scope at or above the size threshold: run at open, so a
    store from before tenant indexes, or one whose build was interrupted, is brought up to date."""
    rows = yield Execute(
        sql_tenant_index.large_scopes_statement(info.schema), {"min_facts": info.tenant_index_min_facts}
    )
    built: list[str] = []
    for dataset, project in rows:
        built += yield from ensure_tenant_indexes(info, Scope(dataset=dataset, project=project))
    return built


def maintain(info: StoreInfo) -> Operation[list[str]]:
    """Refresh planner statistics, then build the tenant indexes every large scope lacks (say,
    after rows were loaded around memsoda with COPY). Returns the names of the indexes built."""
    yield from refresh_statistics(info)
    return (yield from ensure_all_tenant_indexes(info))


def scope_fact_count(info: StoreInfo, scope: Scope, planning: Planning = Planning.FRESH) -> Operation[int]:
    """How many facts `scope` holds (0 for a scope never written)."""
    rows = yield Execute(
        sql_tenant_index.scope_facts_statement(info.schema),
        {"dataset": scope.dataset, "project": scope.project},
        planning,
    )
    return int(rows[0][0]) if rows else 0


IMPORT_REBUILD_SHARE = 4
"""An import bringing at least 1/4 as many facts as its scope holds sets the scope's fact HNSW aside
and rebuilds it once after the rows (`set_aside_fact_index`)."""


def set_aside_fact_index(info: StoreInfo, scope: Scope, incoming: int, rebuild: bool | None) -> Operation[bool]:
    """Before an import into a scope with its own fact HNSW: drop that index when `rebuild` (None:
    when the import is large), so the rows are written without per-row HNSW maintenance; the
    import's `ensure_tenant_indexes` builds it again once (and the runner tries again if the
    import fails). On this project's 2-core machine a build ran at ~4,000 facts/s and per-row
    maintenance at ~600, even on a bare table holding nothing but the HNSW index (one-off
    measurements, bench/RESULTS.md "Ingest"), so rebuilding the whole scope wins while the import is
    above ~1/7 of it; 1/4 leaves a margin. Meanwhile the scope's vector search is exact (correct,
    slower).

    The scope's build lock is taken first (nothing is dropped while another session builds) and
    handed over to the import's transaction, so writers into the scope meanwhile do not start a
    build that would wait for the import; it is released when the import commits or rolls back.
    Returns whether the index was dropped."""
    if rebuild is False:
        return False
    held = yield from scope_fact_count(info, scope)
    if held < info.tenant_index_min_facts or (rebuild is None and incoming * IMPORT_REBUILD_SHARE < held):
        return False
    index = sql_tenant_index.fact_vector_index(scope)
    present = yield Execute(sql_tenant_index.present_statement(), {"names": [index.name], "schema": info.schema})
    if not present:
        return False
    lock = sql_tenant_index.lock_key(info.schema, scope)
    locked = yield Maintain(sql_tenant_index.lock_statement(), lock)
    if not locked or not locked[0][0]:
        return False  # being built elsewhere: keep it
    dropped = yield from _index_ddl([sql_tenant_index.drop_statement(info.schema, index)])
    yield Execute(sql_tenant_index.transaction_lock_statement(), lock)  # opens the import's transaction
    yield Execute(sql_tenant_index.lock_statement(release=True), lock)
    return bool(dropped)


def drop_tenant_indexes(info: StoreInfo, scope: Scope) -> Operation[None]:
    """Drop a forgotten scope's partial indexes (after the delete is committed), with the build's
    lock timeout: like a build, DROP INDEX CONCURRENTLY waits for older transactions. One left
    behind by a timeout costs disk only (it matches no row) and is dropped by a later forget."""
    indexes = sql_tenant_index.tenant_indexes(scope)
    rows = yield Execute(
        sql_tenant_index.present_statement(), {"names": [i.name for i in indexes], "schema": info.schema}
    )
    present = {str(name) for (name,) in rows}
    yield from _index_ddl([sql_tenant_index.drop_statement(info.schema, i) for i in indexes if i.name in present])


# --- writing ----------------------------------------------------------------------------------------


def _entity_rows(facts: Sequence[ValidFact]) -> tuple[list[str], list[str], list[int]]:
    """Distinct entity names (sorted, so concurrent writers lock rows in one order), their types
    (the first specific type seen wins over OTHER) and how many of these facts touch each."""
    types: dict[str, str] = {}
    touches: dict[str, int] = {}
    for fact in facts:
        typed = {fact.subject: fact.subject_type}
        if fact.object_is_entity:
            typed[fact.object] = fact.object_type
        for name in fact.entity_roles():
            kind = typed.get(name, "OTHER")
            if types.get(name, "OTHER") == "OTHER":
                types[name] = kind
            touches[name] = touches.get(name, 0) + 1
    names = sorted(types)
    return names, [types[n] for n in names], [touches[n] for n in names]


ENTITY_ROUNDS = 3
"""Rounds of `sql_write.insert_entities` a write may take: a second one is needed only when
another writer created and committed one of its new entities meanwhile (or a `forget` removed one
that another writer had created)."""


@dataclass
class CountDeltas:
    """What written facts add to the scope's counts: per entity name its type (a specific one wins
    over OTHER) and the facts touching it, per lexeme the facts holding it, and the facts. Bumped at
    the end of the write's transaction (`bump_counts`), so other writers into the scope wait for
    these rows only from there to the commit."""

    types: dict[str, str] = field(default_factory=dict)
    touches: Counter[str] = field(default_factory=Counter)
    lexemes: Counter[str] = field(default_factory=Counter)
    facts: int = 0

    def add(self, other: CountDeltas) -> None:
        """Add a later batch's deltas (an earlier batch's specific type is kept)."""
        for name, kind in other.types.items():
            if self.types.get(name, "OTHER") == "OTHER":
                self.types[name] = kind
        self.touches.update(other.touches)
        self.lexemes.update(other.lexemes)
        self.facts += other.facts


def bump_counts(info: StoreInfo, scope: Scope, deltas: CountDeltas) -> Operation[None]:
    """Add `deltas` to the scope's counts, each set of rows in a fixed order (entities by name,
    lexemes, then the scope), so two writers wait for each other instead of deadlocking."""
    if not deltas.facts:
        return
    base = {"dataset": scope.dataset, "project": scope.project}
    names = sorted(deltas.types)
    yield Execute(
        sql_write.bump_entities(info.schema),
        {
            **base,
            "names": names,
            "types": [deltas.types[name] for name in names],
            "touches": [deltas.touches[name] for name in names],
        },
    )
    if deltas.lexemes:
        lexemes = sorted(deltas.lexemes)
        yield Execute(
            sql_write.count_lexemes(info.schema),
            {**base, "lexemes": lexemes, "counts": [deltas.lexemes[lexeme] for lexeme in lexemes]},
        )
    yield Execute(sql_write.bump_scope(info.schema), {**base, "delta": deltas.facts})


def write_facts(
    info: StoreInfo,
    scope: Scope,
    facts: Sequence[ValidFact],
    vectors: Sequence[Vector] | None,
    *,
    peek: bool,
) -> Operation[list[int]]:
    """`insert_fact_rows` then `bump_counts`: one whole write of a batch."""
    ids, deltas = yield from insert_fact_rows(info, scope, facts, vectors, peek=peek)
    yield from bump_counts(info, scope, deltas)
    return ids


def insert_fact_rows(
    info: StoreInfo,
    scope: Scope,
    facts: Sequence[ValidFact],
    vectors: Sequence[Vector] | None,
    *,
    peek: bool,
) -> Operation[tuple[list[int], CountDeltas]]:
    """One embedding call for the batch (the facts, unless their `vectors` are given, and the
    names of entities the scope does not have yet), then the inserts of entities the scope lacks,
    facts and links; returns the facts' ids and what they add to the counts.

    With `peek` (the operation's first step), which entities exist is read first on a borrowed
    connection (`Peek`), so neither a connection nor a transaction is held while a model embeds;
    inside the transaction they are then locked FOR KEY SHARE, and a name a concurrent `forget`
    deleted in between is embedded there (a second, rare call). Without it (the batches of an
    import, whose transaction is open already), they are read and locked at once, and the
    embedding runs inside that transaction."""
    if not facts:
        return [], CountDeltas()
    base = {"dataset": scope.dataset, "project": scope.project}
    names, types, touches = _entity_rows(facts)
    if peek:
        found = yield Peek(sql_write.known_entities(info.schema), {**base, "names": names})
    else:
        found = yield Execute(sql_write.known_entities(info.schema, lock=True), {**base, "names": names})
    known = {name: int(eid) for name, eid in found or ()}
    new_names = [name for name in names if name not in known]
    texts = [] if vectors is not None else [fact.embedding_text for fact in facts]
    embedded = (yield EmbedDocuments(tuple(texts + new_names))) if texts or new_names else []
    fact_vectors = list(vectors) if vectors is not None else _vectors(embedded[: len(texts)])
    new_vectors = dict(zip(new_names, _vectors(embedded[len(texts) :]), strict=True))
    entity_ids = {} if peek else dict(known)  # an import's were locked as they were read
    if known and peek:
        locked = yield Execute(sql_write.known_entities(info.schema, lock=True), {**base, "names": sorted(known)})
        entity_ids = {name: int(eid) for name, eid in locked}
        gone = sorted(set(known) - set(entity_ids))
        if gone:
            new_vectors.update(zip(gone, _vectors((yield EmbedDocuments(tuple(gone)))), strict=True))
    type_of = dict(zip(names, types, strict=True))
    missing = [name for name in names if name not in entity_ids]
    for _ in range(ENTITY_ROUNDS):  # again when another writer created one of them meanwhile
        if not missing:
            break
        rows = yield Execute(
            sql_write.insert_entities(info.schema),
            {
                **base,
                "names": missing,
                "types": [type_of[name] for name in missing],
                "embeddings": [new_vectors[name] for name in missing],
            },
        )
        entity_ids.update((name, int(eid)) for eid, name in rows)
        missing = [name for name in missing if name not in entity_ids]
    if missing:
        raise StoreError("entities of this write kept changing under concurrent writers; try the write again")
    id_rows = yield Execute(
        sql_write.insert_facts(info.schema),
        {
            **base,
            "subjects": [f.subject for f in facts],
            "predicates": [f.predicate for f in facts],
            "objects": [f.object for f in facts],
            "object_types": [f.object_type for f in facts],
            "subject_ids": [entity_ids[f.subject] for f in facts],
            "object_ids": [entity_ids[f.object] if f.object_is_entity else None for f in facts],
            "anchor_ids": [entity_ids[f.anchor] for f in facts],
            "valid_ats": [f.valid_at for f in facts],
            "invalid_ats": [f.invalid_at for f in facts],
            "confidences": [f.confidence for f in facts],
            "quotes": [f.source_quote for f in facts],
            "embeddings": fact_vectors,
        },
    )
    fact_ids = sorted(int(row[0]) for row in id_rows)
    lexeme_counts = Counter(lexeme for row in id_rows for lexeme in row[1])
    links = [
        (fact_id, entity_ids[name], roles)
        for fact_id, fact in zip(fact_ids, facts, strict=True)
        for name, roles in fact.entity_roles().items()
    ]
    yield Execute(
        sql_write.insert_fact_entities(info.schema),
        {
            **base,
            "fact_ids": [link[0] for link in links],
            "entity_ids": [link[1] for link in links],
            "roles": [link[2] for link in links],
        },
    )
    ((analyzed_pages, pages),) = yield Execute(sql_write.facts_pages(), {"schema": info.schema})
    if statistics_stale(int(analyzed_pages), int(pages)):
        yield from refresh_statistics(info)
    deltas = CountDeltas(
        types=type_of,
        touches=Counter(dict(zip(names, touches, strict=True))),
        lexemes=lexeme_counts,
        facts=len(fact_ids),
    )
    return fact_ids, deltas


ANALYZE_FROM_PAGES = 64
"""About 256 facts."""


def statistics_stale(analyzed_pages: int, pages: int) -> bool:
    """True when the facts table has doubled in size since it was last analyzed (and holds at
    least ~256 facts): statistics are then refreshed in the same transaction. A never-analyzed
    store plans recall as nested loops on one-row estimates (bench.soak --no-analyze measured
    175 ms instead of 13 ms at 200 facts), and autovacuum may take a minute to notice. Doubling
    bounds it to log2(size) refreshes in the store's life, however many tenants grow in it; an
    earlier per-tenant rule re-analyzed a 210k-fact table (3.4 s) each time any tenant passed 256,
    512, 1,024... facts."""
    return pages >= ANALYZE_FROM_PAGES and pages >= 2 * analyzed_pages


def refresh_statistics(info: StoreInfo) -> Operation[None]:
    for statement in sql_write.analyze(info.schema):
        yield Execute(statement)


def add_facts(
    info: StoreInfo,
    scope: Scope,
    facts: Sequence[FactInput | Mapping[str, Any]],
    *,
    now: datetime,
    vectors: Sequence[Sequence[float]] | np.ndarray[Any, Any] | None = None,
) -> Operation[list[int]]:
    """Validate the whole batch (and `vectors`, one per fact, which replace embedding the facts'
    texts), then write it in one transaction. Returns ids in input order."""
    valid = validate_facts(facts, now=now)
    given = None
    if vectors is not None:
        try:
            given = check_vectors(vectors, count=len(valid), dimensions=info.dimensions, source="got", items="facts")
        except EmbeddingError as exc:
            raise ValidationError(f"vectors are not usable: {exc}") from None
    ids = yield from write_facts(info, scope, valid, given, peek=True)
    yield from ensure_tenant_indexes(info, scope)
    return ids


def invalidate(info: StoreInfo, scope: Scope, fact_id: int, *, at: Any, now: datetime) -> Operation[bool]:
    """Mark a fact no longer true from `at` (default now). False if it already ended by then."""
    if isinstance(fact_id, bool) or not isinstance(fact_id, int):
        raise ValidationError(f"fact_id must be an int, got {type(fact_id).__name__}")
    when = parse_time(at, "at", default=now)
    assert when is not None
    params = {"dataset": scope.dataset, "project": scope.project, "id": fact_id, "at": when}
    rows = yield Execute(sql_write.fact_interval(info.schema), params)
    if not rows:
        raise NotFoundError(f"no fact {fact_id} in dataset={scope.dataset!r} project={scope.project!r}")
    valid_at, invalid_at = rows[0]
    if when <= valid_at:
        raise IntervalError(
            f"cannot invalidate fact {fact_id} at {when.isoformat()}: it only became valid at {valid_at.isoformat()}"
        )
    if invalid_at is not None and invalid_at <= when:
        return False
    changed = yield Execute(sql_write.invalidate_fact(info.schema), params)
    return bool(changed)


def supersede(
    info: StoreInfo,
    scope: Scope,
    fact_id: int,
    new_fact: FactInput | Mapping[str, Any],
    *,
    now: datetime,
) -> Operation[int]:
    """Store `new_fact` and end `fact_id` at the new fact's valid_at, in one transaction."""
    (valid,) = validate_facts([new_fact], now=now)
    (new_id,) = yield from write_facts(info, scope, [valid], None, peek=True)
    yield from invalidate(info, scope, fact_id, at=valid.valid_at, now=now)
    yield from ensure_tenant_indexes(info, scope)
    return new_id


def add_episodes(
    info: StoreInfo,
    scope: Scope,
    episodes: Sequence[EpisodeInput | Mapping[str, Any]],
    *,
    now: datetime,
) -> Operation[list[int]]:
    """Validate and store episode summaries (one embedding call, one transaction)."""
    if isinstance(episodes, Mapping | EpisodeInput) or not isinstance(episodes, Sequence):
        raise ValidationError("episodes must be a list of dicts or EpisodeInput objects")
    check_batch_size(len(episodes), "episodes")
    valid = [validate_episode(item, now=now, position=i) for i, item in enumerate(episodes, start=1)]
    return (yield from write_episodes(info, scope, valid))


def write_episodes(info: StoreInfo, scope: Scope, episodes: Sequence[ValidEpisode]) -> Operation[list[int]]:
    if not episodes:
        return []
    vectors = yield EmbedDocuments(tuple(e.text for e in episodes))
    base = {"dataset": scope.dataset, "project": scope.project}
    yield Execute(sql_write.ensure_scope(info.schema), base)
    rows = yield Execute(
        sql_write.insert_episodes(info.schema),
        {
            **base,
            "thread_ids": [e.thread_id for e in episodes],
            "texts": [e.text for e in episodes],
            "created_ats": [e.created_at for e in episodes],
            "embeddings": _vectors(vectors),
        },
    )
    return sorted(int(row[0]) for row in rows)


def forget(info: StoreInfo, scope: Scope, entity: str | None) -> Operation[int]:
    """Delete an entity and every fact touching it, or (entity=None) the whole scope.
    Returns the number of facts deleted."""
    base: dict[str, Any] = {"dataset": scope.dataset, "project": scope.project}
    if entity is None:
        ((count,),) = yield Execute(sql_write.count_facts(info.schema), base)
        for statement in sql_write.forget_scope(info.schema):
            yield Execute(statement, base)
        yield from drop_tenant_indexes(info, scope)
        return int(count)
    params = {**base, "name": entity}
    ((count,),) = yield Execute(sql_write.forget_entity(info.schema), params)
    yield Execute(sql_write.delete_orphan_entities(info.schema), params)
    yield Execute(sql_write.delete_spent_lexemes(info.schema), base)
    return int(count)


# --- reading ----------------------------------------------------------------------------------------


def recall(
    info: StoreInfo,
    scope: Scope,
    query: str | None,
    *,
    options: RecallOptions,
    include: frozenset[IncludeOption],
    query_embedding: Sequence[float] | np.ndarray[Any, Any] | None,
    as_of: datetime | None,
    now: datetime,
    scope_sizes: ScopeSizes,
) -> Operation[RecallResult]:
    """The signals in two statements run at once, RRF, the kept facts read, grouping and
    rendering; see `recall.py`. Statements whose plan fits every scope they serve are prepared
    (the kept facts' read; the signals of a scope under the tenant-index threshold): see
    `scope_sizes`, which also remembers the scope's size between recalls."""
    timings: dict[str, float] = {}
    started = time.perf_counter()
    embedding: Sequence[float] | np.ndarray[Any, Any] | None = None
    degraded: str | None = None
    if query_embedding is not None:
        embedding = query_embedding
    elif query is not None:
        try:
            embedding = yield EmbedQuery(query, options.embed_timeout_s)
        except EmbeddingError as exc:
            degraded = f"embedding failed, recalled by keyword, named anchors and recency: {exc}"
        timings["embed"] = _ms(started)
    at = as_of or now
    params = statement_params(
        scope=scope,
        query=query,
        embedding=embedding,
        at=at,
        options=options,
        text_search_config=info.text_search_config,
    )
    mark = time.perf_counter()
    scope_facts = scope_sizes.get(scope)
    if scope_facts is None:
        scope_facts = yield from scope_fact_count(info, scope, Planning.CACHED)
        scope_sizes.put(scope, scope_facts)
    indexed, planning = recall_statement_choice(scope, scope_facts, info.tenant_index_min_facts)
    statements = recall_statements(info.schema, plan_for(query, embedding is not None, options), indexed)
    results = yield Concurrently(tuple(Execute(statement, params, planning) for statement in statements))
    timings["query"] = _ms(mark)
    mark = time.perf_counter()
    kept = fuse_hits((row for rows in results for row in rows), options)
    timings["fuse"] = _ms(mark)
    mark = time.perf_counter()
    fact_ids = BigintArray(k.fact_id for k in kept)
    fact_rows = yield Execute(facts_statement(info.schema), {**params, "fact_ids": fact_ids}, Planning.CACHED)
    scored = scored_facts(kept, fact_rows)
    timings["facts"] = _ms(mark)
    episodes = []
    if "episodes" in include:
        mark = time.perf_counter()
        statement = episodes_statement if embedding is not None else recent_episodes_statement
        episodes = decode_episodes((yield Execute(statement(info.schema), params)))
        timings["episodes"] = _ms(mark)
    mark = time.perf_counter()
    result = assemble(scored, episodes=episodes, degraded_reason=degraded)
    timings["render"] = _ms(mark)
    synthesis: str | None = None
    errors: dict[str, str] = {}
    if "synthesis" in include and result.context:
        mark = time.perf_counter()
        try:
            synthesis = yield Synthesize(result.context, query)
        except Exception as exc:
            errors["synthesis"] = f"{type(exc).__name__}: {exc}"
        timings["synthesis"] = _ms(mark)
    timings["total"] = _ms(started)
    return replace(result, synthesis=synthesis, errors=errors, timings_ms=timings)


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)


def stats(info: StoreInfo, dataset: str | None, project: str | None) -> Operation[list[dict[str, Any]]]:
    rows = yield Execute(sql_write.stats(info.schema), {"dataset": dataset, "project": project})
    keys = ("dataset", "project", "facts", "live_facts", "entities", "episodes")
    return [dict(zip(keys, row, strict=True)) for row in rows]


# --- JSONL ------------------------------------------------------------------------------------------

_EXPORT_PAGE = 1000


def fact_record(fact_row: Sequence[Any]) -> dict[str, Any]:
    """An exported line: the fact's fields, ready for `import_jsonl`."""
    fact = decode_fact(fact_row)
    subject_type = fact_row[-1]
    record: dict[str, Any] = {
        "kind": "fact",
        "id": fact.id,
        "subject": fact.subject,
        "subject_type": subject_type,
        "predicate": fact.predicate,
        "object": fact.object,
        "object_type": fact.object_type,
        "mentions": list(fact.mentions),
        "anchor": fact.anchor,
        "valid_at": fact.valid_at.isoformat(),
        "invalid_at": fact.invalid_at.isoformat() if fact.invalid_at else None,
        "confidence": fact.confidence,
        "source_quote": fact.source_quote,
    }
    return record


_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}


def jsonl_line(record: Mapping[str, Any]) -> str:
    """One JSON line, readable (non-ASCII kept) but with the characters that some line splitters
    (`str.splitlines`) treat as line breaks escaped, so every record stays on one line."""
    text = json.dumps(record, ensure_ascii=False)
    for char, escaped in _LINE_BREAKS.items():
        text = text.replace(char, escaped)
    return text + "\n"


def export_jsonl(info: StoreInfo, scope: Scope, sink: TextIO) -> Operation[int]:
    """Write every fact, then every episode, of the scope as JSON lines. Returns lines written."""
    base: dict[str, Any] = {"dataset": scope.dataset, "project": scope.project}
    written = 0
    after = 0
    while True:
        rows = yield Execute(sql_write.export_facts(info.schema), {**base, "after": after, "limit": _EXPORT_PAGE})
        for row in rows:
            sink.write(jsonl_line(fact_record(row)))
        written += len(rows)
        if len(rows) < _EXPORT_PAGE:
            break
        after = int(rows[-1][0])
    for eid, thread, text, created in (yield Execute(sql_write.export_episodes(info.schema), base)):
        record = {
            "kind": "episode",
            "id": int(eid),
            "thread_id": thread,
            "text": text,
            "created_at": created.isoformat(),
        }
        sink.write(jsonl_line(record))
        written += 1
    return written


_FACT_RECORD_IGNORED = {"kind", "id"}


def parse_jsonl(
    lines: Iterable[str], *, now: datetime, on_error: str
) -> tuple[list[ValidFact], list[ValidEpisode], list[tuple[int, str]]]:
    """Validate every line first. `on_error="raise"` raises ImportFormatError at the first bad
    line (nothing is written); `"skip"` collects (line number, message) and goes on."""
    facts: list[ValidFact] = []
    episodes: list[ValidEpisode] = []
    errors: list[tuple[int, str]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ImportFormatError(f"not valid JSON ({exc.msg})", line=number) from None
            except RecursionError:
                raise ImportFormatError("JSON nested too deeply", line=number) from None
            if not isinstance(record, dict):
                raise ImportFormatError("each line must be a JSON object", line=number)
            kind = record.get("kind", "fact")
            body = {k: v for k, v in record.items() if k not in _FACT_RECORD_IGNORED}
            try:
                if kind == "fact":
                    facts.extend(validate_facts([body], now=now))
                elif kind == "episode":
                    episodes.append(validate_episode(body, now=now))
                else:
                    raise ImportFormatError(f"unknown kind {kind!r}; use 'fact' or 'episode'", line=number)
            except ImportFormatError:
                raise
            except ValidationError as exc:
                raise ImportFormatError(str(exc).removeprefix("fact #1: "), line=number) from None
        except ImportFormatError as exc:
            if on_error == "raise":
                raise
            errors.append((number, str(exc)))
    return facts, episodes, errors


def import_records(
    info: StoreInfo,
    scope: Scope,
    facts: Sequence[ValidFact],
    episodes: Sequence[ValidEpisode],
    *,
    batch_size: int,
    progress: Callable[[int], None] | None,
    rebuild_index: bool | None = None,
) -> Operation[tuple[int, int]]:
    """Write validated records in batches inside one transaction: all or nothing, the counts bumped
    once after the rows. An import into a scope with its own fact HNSW may rebuild it after the rows
    (`set_aside_fact_index`)."""
    if facts:
        yield from set_aside_fact_index(info, scope, len(facts), rebuild_index)
    deltas = CountDeltas()
    for start in range(0, len(facts), batch_size):
        batch = facts[start : start + batch_size]
        _, added = yield from insert_fact_rows(info, scope, batch, None, peek=False)
        deltas.add(added)
        if progress is not None:
            progress(len(batch))
    yield from bump_counts(info, scope, deltas)  # once, at the end: see `CountDeltas`
    for start in range(0, len(episodes), batch_size):
        chunk = episodes[start : start + batch_size]
        yield from write_episodes(info, scope, chunk)
        if progress is not None:
            progress(len(chunk))
    if facts or episodes:
        # Built once, after the rows: much faster than maintaining HNSW row by row. (Statistics are
        # refreshed by `insert_fact_rows` whenever the table has doubled, as for any write.)
        yield from ensure_tenant_indexes(info, scope)
    return len(facts), len(episodes)


__all__ = [
    "StoreInfo",
    "add_episodes",
    "add_facts",
    "export_jsonl",
    "forget",
    "import_records",
    "invalidate",
    "maintain",
    "open_store",
    "parse_jsonl",
    "recall",
    "stats",
    "supersede",
]

"""Recall as one operation: the signals, fusion, the kept facts read, the rendered result."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import numpy as np

from memsoda_core.errors import (
    EmbeddingError,
)
from memsoda_core.layouts import layout_of
from memsoda_core.layouts.access import ScopeAccess
from memsoda_core.layouts.shards import placed_statement
from memsoda_core.models import IncludeOption, RecallResult
from memsoda_core.options import RecallOptions
from memsoda_core.recall.adaptive import choose
from memsoda_core.recall.asof import question_as_of
from memsoda_core.recall.dates import question_window
from memsoda_core.recall.hits import HitRow, hit_rows
from memsoda_core.recall.planning import ScopeSizes, statement_planning
from memsoda_core.recall.relevance import CalibrationCache, query_relevance
from memsoda_core.recall.remembered import ticket
from memsoda_core.recall.result import (
    decode_episodes,
    fuse_hits,
    render_context,
    scored_facts,
    statement_params,
    vector_similarities,
)
from memsoda_core.recall.scope_stats import ScopeStatsCache
from memsoda_core.recall.scope_stats import scope_stats as read_stats
from memsoda_core.recall.signals import REGISTRY, RecallPlan, RecallRequest, plan_for, planned_signals
from memsoda_core.recall.statements import (
    episodes_statement,
    facts_statement,
    kept_hits_statement,
    one_statement,
    recall_groups,
    recall_statements,
    recent_episodes_statement,
)
from memsoda_core.runner.steps import (
    Execute,
    NotRead,
    Operation,
    Planning,
    Row,
    concurrently,
    embed_query,
    execute,
    read_on_node,
    synthesize,
)
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.params import BigintArray
from memsoda_core.validation import (
    Scope,
)

KEPT_MARGIN = 1
"""Facts read beyond those fusion keeps (`kept_hits_statement`): SQL's RRF sums are not Python's, so a
tie at the cut may fall the other way; a kept fact left unread is read after fusion. Both break
ties alike, so one is enough (bench/RESULTS.md, "One scan of a small scope")."""


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
    worker_reads: bool = True,
    known_at: datetime | None = None,
    conversation: Sequence[tuple[str, str]] | None = None,
    exclude: frozenset[int] = frozenset(),
    scope_stats: ScopeStatsCache | None = None,
    calibrations: CalibrationCache | None = None,
    within: Sequence[int] | None = None,
) -> Operation[RecallResult]:
    """The signals (one statement for a small scope, else two run at once), RRF, the kept facts
    read, grouping and rendering; see `recall.result`. A scope searched exactly (under the tenant-index threshold)
    runs its signals in one statement that also reads the facts RRF puts first
    (`statements.kept_hits_statement`), so the read after fusion is sent only for a kept fact it
    did not read. Statements whose plan fits every scope they serve are prepared
    (the kept facts' read; the signals of a scope under the tenant-index threshold): see
    `recall.planning`, which also remembers the scope's size between recalls. A date the query
    names (`recall.dates`) and a `conversation` ((role, content) pairs, oldest first) add one
    statement with their signals; without either it is not sent. A question that asks what held
    in a past window ("where did I live in 2019?") is read as of that window's end when neither
    `as_of` nor `known_at` is given (`recall.asof`, `RecallOptions.as_of_from_question`).

    `known_at` (transaction time): what memory knew then, as it knew it (statements of their own,
    `RecallPlan.known`); the default statements are untouched by it. Facts in `exclude` are not
    kept (`result.fuse_hits`). Options left at None are chosen from the scope's statistics
    (`recall.adaptive`, read through `scope_stats`), and the choice is `RecallResult.fusion`.

    `within`: the only facts ranked (`RecallRequest.within`; an item search's filter), searched
    exactly (`RecallPlan.within`); the default statements are untouched by it too."""
    timings: dict[str, float] = {}
    started = time.perf_counter()
    embedding: Sequence[float] | np.ndarray[Any, Any] | None = None
    degraded: str | None = None
    if query_embedding is not None:
        embedding = query_embedding
    elif query is not None:
        try:
            embedding = yield from embed_query(query, options.embed_timeout_s)
        except EmbeddingError as exc:
            degraded = f"embedding failed, recalled by keyword, named anchors and recency: {exc}"
        timings["embed"] = _ms(started)
    request = RecallRequest(
        scope=scope,
        query=query,
        options=options,
        at=as_of or now,
        known_at=known_at,
        embedding=embedding,
        conversation=tuple(conversation or ()),
        text_search_config=info.text_search_config,
        within=None if within is None else tuple(within),
    )
    vectors: dict[str, Sequence[float] | np.ndarray[Any, Any]] = {}
    for spec in REGISTRY:  # what each signal asks embedded (the conversation's turns)
        text = spec.embeds(request)
        if text is None:
            continue
        try:
            vectors[spec.name] = yield from embed_query(text, options.embed_timeout_s)
        except EmbeddingError as exc:
            degraded = f"embedding the {spec.name} failed, recalled without it: {exc}"
        timings["embed"] = _ms(started)
    # the fusion the memory chooses: one read of the scope's statistics, remembered (recall.adaptive)
    stats = None
    if query is not None and options.left_to_memory():
        stats = yield from read_stats(info, scope, scope_stats)
    options, fusion = choose(options, stats)
    request = replace(request, options=options, vectors=vectors)
    held = None  # never over the caller's as_of or known_at
    if as_of is None and known_at is None and options.as_of_from_question:
        held = question_as_of(query, question_window(query, request.at), request.at)
    if held is not None:  # the question's words stay resolved against the time it is asked
        request = replace(request, at=held.at, asked_at=request.at)
    params = statement_params(request)
    params["kept_candidates"] = options.facts_in_context + len(exclude) + KEPT_MARGIN
    mark = time.perf_counter()
    plan = plan_for(request)
    results, access, scope_facts = yield from _hits(info, scope, plan, params, scope_sizes, worker_reads)
    timings["query"] = _ms(mark)
    mark = time.perf_counter()
    rows = [row for statement_rows in results for row in statement_rows]
    scope_empty = not scope_facts and not rows  # a size remembered as 0 is out of date once it has hits
    relevance, irrelevant = None, False  # measured only when a floor asks: the levels remembered
    if options.min_relevance is not None and embedding is not None:
        nearest = max(vector_similarities(rows), default=None)
        relevance = yield from query_relevance(info, scope, params, nearest, calibrations)
        irrelevant = relevance is not None and relevance < options.min_relevance
        timings["relevance"] = _ms(mark)
        mark = time.perf_counter()
    kept = [] if irrelevant else fuse_hits(rows, options, exclude=exclude)
    timings["fuse"] = _ms(mark)
    mark = time.perf_counter()
    read = {row.fact_id: row.fact for row in rows if row.fact is not None}
    fact_rows: list[Row] = [read[k.fact_id] for k in kept if k.fact_id in read]
    unread = [k.fact_id for k in kept if k.fact_id not in read]
    if unread:
        fact_rows += yield from _kept_facts(info, access, params, unread)
    scored = scored_facts(kept, fact_rows, known_at)
    timings["facts"] = _ms(mark)
    episodes = []
    if "episodes" in include:
        mark = time.perf_counter()
        statement = episodes_statement if embedding is not None else recent_episodes_statement
        episodes = decode_episodes((yield from execute(statement(info.schema), params)))
        timings["episodes"] = _ms(mark)
    mark = time.perf_counter()
    context, entities = render_context(scored, episodes)
    timings["render"] = _ms(mark)
    synthesis: str | None = None
    errors: dict[str, str] = {}
    if "synthesis" in include and context:
        mark = time.perf_counter()
        try:
            synthesis = yield from synthesize(context, query)
        except Exception as exc:
            errors["synthesis"] = f"{type(exc).__name__}: {exc}"
        timings["synthesis"] = _ms(mark)
    timings["total"] = _ms(started)
    return RecallResult(
        context=context,
        facts=tuple(scored),
        entities=tuple(entities),
        episodes=tuple(episodes),
        degraded=degraded is not None,
        degraded_reason=degraded,
        synthesis=synthesis,
        errors=errors,
        timings_ms=timings,
        as_of=held.at if held is not None else as_of,
        as_of_reason=None if held is None else held.reason,
        scope_empty=scope_empty,
        fusion=fusion,
        relevance=relevance,
    )


def _hits(
    info: StoreInfo,
    scope: Scope,
    plan: RecallPlan,
    params: dict[str, Any],
    scope_sizes: ScopeSizes,
    worker_reads: bool,
) -> Operation[tuple[list[list[HitRow]], ScopeAccess, int]]:
    """The hit rows of the recall statements `plan` runs for `scope`, the scope's access they ran
    with, and the scope's fact count it was derived from (`ScopeSizes`: remembered, or read here).

    The access may say where the scope's rows are should another process have moved them since
    its size was read (`ScopeAccess.moved`: a small scope of a partitioned store, read in the
    DEFAULT partitions). Then these statements find nothing although the scope holds facts, and
    they run again where it moved."""
    layout = layout_of(info)
    size = scope_sizes.get(scope)
    if size is None:
        place = scope_sizes.place(scope) if worker_reads else None  # a write does not move it
        read_at = ticket()
        size = yield from layout.scope_size(info, scope, Planning.CACHED, shards=worker_reads and place is None)
        if place is not None:
            size = size._replace(shards=place)
        scope_sizes.put(scope, size, read_at)
    access = layout.access(info, scope, size)
    if access.direct is not None:
        direct = yield from _read_direct(info, plan, access.direct, params, size.facts)
        if not isinstance(direct, NotRead):
            return direct, access, size.facts
        if direct is NotRead.FAILED:  # read its place again at the next recall
            scope_sizes.forget_place(scope)
    results = yield from concurrently(_executes(info, plan, access, params, size.facts))
    if access.moved is not None and size.facts and not any(results):
        scope_sizes.forget(scope)
        access = access.moved
        results = yield from concurrently(_executes(info, plan, access, params, size.facts))
    return results, access, size.facts


def _read_direct(
    info: StoreInfo, plan: RecallPlan, direct: ScopeAccess, params: dict[str, Any], scope_facts: int
) -> Operation[list[list[HitRow]] | NotRead]:
    """The hit rows of a recall that runs as one statement, read straight from the node holding the
    scope's shards (`ScopeAccess.direct`), or why they must be read through the coordinator: not
    read there, or `FAILED` when that node no longer holds them. The statement's guard
    (`layouts.shards.placed_guard`) returns nothing then; so an empty read is an answer only when
    the guard, read alone after it, still holds (a recall that rightly finds nothing)."""
    executes = _executes(info, plan, direct, params, scope_facts)
    place = direct.shards
    if len(executes) != 1 or place is None:
        return NotRead.NOT_TRIED
    rows = yield from read_on_node(executes[0], place.host, place.port)
    if isinstance(rows, NotRead):
        return rows
    if rows:
        return [rows]
    placed = yield from read_on_node(Execute(placed_statement(place)), place.host, place.port)
    if isinstance(placed, NotRead) or not placed or not placed[0][0]:
        return NotRead.FAILED
    return [rows]


def _kept_facts(info: StoreInfo, access: ScopeAccess, params: dict[str, Any], ids: list[int]) -> Operation[list[Row]]:
    """The columns of the kept facts `ids`, read where `access` says, or where the scope moved."""
    fact_ids = BigintArray(ids)
    read = facts_statement(info.schema, access)
    fact_rows: list[Row] = yield from execute(read, {**params, "fact_ids": fact_ids}, access.kept_planning)
    if access.moved is not None and len(fact_rows) < len(fact_ids):  # moved meanwhile: read them where they are
        fact_rows = yield from execute(facts_statement(info.schema), {**params, "fact_ids": fact_ids})
    return fact_rows


def _executes(
    info: StoreInfo, plan: RecallPlan, access: ScopeAccess, params: dict[str, Any], scope_facts: int
) -> list[Execute]:
    if one_statement(scope_facts, info.tenant_index_min_facts, planned_signals(plan)):
        statement = kept_hits_statement(info.schema, plan, access)
        return [Execute(statement, params, access.planning, hit_rows)]
    statements = recall_statements(info.schema, plan, access)
    groups = recall_groups(plan)
    return [
        Execute(statement, params, statement_planning(group, access.planning), hit_rows)
        for statement, group in zip(statements, groups, strict=True)
    ]


def _ms(since: float) -> float:
    return round((time.perf_counter() - since) * 1000, 3)

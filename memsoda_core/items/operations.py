"""Items: write, read, search and list key-addressed JSON documents (operations; `memsoda_core.items.values`
says what an item is).

A write of items is one transaction. Their facts go through the reconciling write path
(`writing.operation.write_facts`: one embedding call, the facts' relation locks), which also locks the
relations of the facts the items refer to now; then each item's own advisory lock is taken, the
facts they refer to are read again under it, the items are stored or deleted, and each fact of
items' own that no item refers to any more is ended: superseded by its item's new fact, or just
ended when the item went or lost its text. A fact is items' own (`facts.item_owned`) when an item's
put created it and no other write (`add_facts`, `remember`, an import) has written it since; an
item whose text equals a live fact refers to that fact, and a fact the application wrote itself
outlives the items that shared it. So a fact of items' own is live exactly while some item refers
to it. The mark changes only under the fact's relation lock, which every write of it holds.

A search by query ranks the items its prefix and filter select (in SQL, before any ranking): those
whose fact memsoda's recall of their scope keeps (RRF over vector, anchor and keyword signals) by
the fused score, then the rest (`_ranked_page`). Under a filter, recall ranks the facts of the
items it selects only (`_filtered_facts`, `RecallRequest.within`), so that facts outside it, however
near the query, take no place in its lists.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg import sql

from memsoda_core.embedders.protocol import Vector
from memsoda_core.errors import EmbeddingError, LimitError
from memsoda_core.forgetting import retention_statements as sql_retention
from memsoda_core.forgetting.operations import delete_fact_set, hold_scope
from memsoda_core.items import statements as sql_items
from memsoda_core.items.links import batch_json, end_orphans
from memsoda_core.items.values import (
    MAX_SEARCH_SCOPES,
    Condition,
    ItemInput,
    Namespace,
    NamespaceMatch,
    StoredItem,
    validate_items,
)
from memsoda_core.limits import MAX_K
from memsoda_core.models import RecallResult
from memsoda_core.ops.maintenance import ensure_tenant_indexes
from memsoda_core.runner.steps import Operation, embed_query, execute, execute_as, read_aside
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope
from memsoda_core.writing import inserts
from memsoda_core.writing import reconcile_statements as sql_reconcile
from memsoda_core.writing.insert_rows import insert_rows
from memsoda_core.writing.operation import lock_facts, write_facts

RecallIn = Callable[[Scope, int, Vector | None, Sequence[int] | None], Operation[RecallResult]]
"""Recall of the search's query in a scope, keeping that many facts, with the query's embedding
when there is one, of those facts only when given (`RecallRequest.within`; built by the memory,
which holds the recall options and scope sizes)."""

MAX_WITHIN_FACTS = 10_000
"""The most facts a filtered search restricts recall to (`RecallRequest.within`): recall then reads
each of them by its primary key and computes its distance to the query (the restricted search is
exact), and they are bound as one array. A filter selecting more items than this selects much of
a scope; the search then ranks as an unfiltered one does, recall over the whole scope through its
indexes, and the filter applies to the items recall keeps (with its unkept items after them)."""


def put_items(
    info: StoreInfo, scope: Scope, items: Sequence[ItemInput | Mapping[str, Any]], *, now: datetime
) -> Operation[list[int | None]]:
    """Store, replace or (value None) delete items in one transaction; each input's fact id (None
    when it has no text or was deleted), in input order after the last-write-wins merge of repeated
    keys (see the module docstring for the locks and the facts kept consistent)."""
    valid = validate_items(items, now=now)
    if not valid:
        return []
    base: dict[str, Any] = {"dataset": scope.dataset, "project": scope.project, "schema": info.schema}
    keys = batch_json(valid)
    before = [
        sql_items.ItemFact(*row)
        for row in (yield from read_aside(sql_items.item_facts(info.schema), {**base, "items": keys})) or ()
    ]
    old_values = sorted({(r.subject, r.predicate, r.object) for r in before if r.subject and r.predicate and r.object})
    held: list[sql_items.ItemFact] = []
    learned_at: list[datetime] = []

    def under_item_locks(learned: datetime) -> Operation[None]:
        learned_at.append(learned)
        yield from execute(sql_items.lock_items(info.schema), {**base, "items": keys})
        rows = yield from execute_as(sql_items.ItemFact, sql_items.item_facts(info.schema), {**base, "items": keys})
        now_values = {(r.subject, r.predicate, r.object) for r in rows if r.subject and r.predicate and r.object}
        moved = sorted(now_values - set(old_values))
        if moved:  # another writer changed an item since the read above: lock its fact's relation too
            yield from lock_facts(info, scope, [], moved)
        held.extend(rows)

    writing = [n for n, item in enumerate(valid) if item.fact is not None]
    facts = [item.fact for item in valid if item.fact is not None]
    if facts:
        ids = yield from write_facts(
            info, scope, facts, None, standalone=True, also_lock=old_values, guard=under_item_locks, item_owned=True
        )
    else:
        learned = (yield from lock_facts(info, scope, [], old_values)).learned_at
        yield from under_item_locks(learned)
        ids = []
    new_fact = dict(zip(writing, ids, strict=True))
    stored = [n for n, item in enumerate(valid) if item.value_json is not None]
    if stored:
        kept = [valid[n] for n in stored]
        columns = {
            "namespaces": [list(item.namespace) for item in kept],
            "keys": [item.key for item in kept],
            "values": [item.value_json for item in kept],
            "fact_ids": [new_fact.get(n) for n in stored],
            "ttl_minutes": [item.ttl_minutes for item in kept],
        }
        yield from insert_rows(info, inserts.ITEMS, {**base, "now": now, **columns})
    gone = [item for item in valid if item.value_json is None]
    if gone:
        yield from execute(sql_items.delete_items(info.schema), {**base, "items": batch_json(gone)})
    yield from end_orphans(info, scope, valid, new_fact, held, now, learned_at[0])
    yield from ensure_tenant_indexes(info, scope)
    return [new_fact.get(n) for n in range(len(valid))]


def get_item(
    info: StoreInfo, scope: Scope, namespace: Namespace, key: str, *, refresh_at: datetime | None = None
) -> Operation[StoredItem | None]:
    """The item, or None; with `refresh_at`, its TTL (if it has one) counted again from then."""
    params = {"dataset": scope.dataset, "project": scope.project, "namespace": list(namespace), "key": key}
    rows = yield from execute_as(sql_items.ItemRow, sql_items.get_item(info.schema), params)
    if not rows:
        return None
    if refresh_at is not None and rows[0].expires_at is not None:
        (found,) = yield from refresh_items(info, [rows[0].stored()], refresh_at)
        return found
    return rows[0].stored()


def refresh_items(info: StoreInfo, items: Sequence[StoredItem], at: datetime) -> Operation[list[StoredItem]]:
    """`items` with the expiry of those with a TTL moved to `at` + their TTL (LangGraph's refresh
    on read), in their order; scope by scope."""
    now: dict[tuple[str, str, Namespace, str], StoredItem] = {}
    for dataset, project in sorted({(i.dataset, i.project) for i in items if i.expires_at is not None}):
        batch = [i for i in items if (i.dataset, i.project) == (dataset, project) and i.expires_at is not None]
        keys = "[" + ", ".join(json.dumps({"namespace": list(i.namespace), "key": i.key}) for i in batch) + "]"
        params = {"dataset": dataset, "project": project, "items": keys, "now": at}
        for row in (yield from execute_as(sql_items.ItemRow, sql_items.refresh_items(info.schema), params)):
            now[(row.dataset, row.project, tuple(row.namespace), row.key)] = row.stored()
    refreshed = []
    for item in items:
        found = now.get((item.dataset, item.project, item.namespace, item.key))
        refreshed.append(item if found is None else dataclasses.replace(found, score=item.score))
    return refreshed


def search_items(
    info: StoreInfo,
    project: str,
    dataset: str | None,
    prefix: Namespace,
    *,
    query: str | None,
    conditions: list[Condition],
    limit: int,
    offset: int,
    recall_in: RecallIn,
    embed_timeout_s: float,
) -> Operation[list[StoredItem]]:
    """Items under `prefix` matching `conditions`, in the scope (`dataset` None: in every dataset of
    the project holding such items), a page of `limit` after `offset`. No query: most recently
    updated first. A query ranks every matching item (`_ranked_page`)."""
    filters, filter_params = sql_items.filter_sql(conditions)
    params: dict[str, Any] = {**sql_items.prefix_params(prefix), **filter_params, "project": project}
    if query is None:
        statement = sql_items.recent_items(info.schema, filters, scoped=dataset is not None)
        page = {"dataset": dataset, "limit": limit, "offset": offset}
        rows = yield from execute_as(sql_items.ItemRow, statement, {**params, **page})
        return [row.stored() for row in rows]
    if dataset is not None:
        datasets = [dataset]
    else:
        found = yield from execute(sql_items.item_scopes(info.schema), {**params, "limit": MAX_SEARCH_SCOPES + 1})
        if len(found) > MAX_SEARCH_SCOPES:
            raise LimitError(
                f"items under namespace {prefix!r} lie in more than {MAX_SEARCH_SCOPES} datasets; a search by "
                "query runs one recall per dataset: search a longer namespace prefix"
            )
        datasets = [str(row[0]) for row in found]
    scopes = [Scope(dataset=name, project=project) for name in datasets]
    within = (yield from _filtered_facts(info, dataset, filters, params)) if conditions else None
    return (
        yield from _ranked_page(
            info, scopes, dataset, query, filters, params, limit, offset, recall_in, embed_timeout_s, within
        )
    )


def _filtered_facts(
    info: StoreInfo, dataset: str | None, filters: sql.Composable, params: Mapping[str, Any]
) -> Operation[dict[str, list[int]] | None]:
    """The facts of the items the search's prefix and filter select (`params`, `filters`), by
    dataset, ascending; None when they are more than `MAX_WITHIN_FACTS`."""
    statement = sql_items.filtered_facts(info.schema, filters, scoped=dataset is not None)
    rows = yield from execute(statement, {**params, "dataset": dataset, "limit": MAX_WITHIN_FACTS + 1})
    if len(rows) > MAX_WITHIN_FACTS:
        return None
    by_dataset: dict[str, set[int]] = {}
    for name, fact_id in rows:
        by_dataset.setdefault(str(name), set()).add(int(fact_id))
    return {name: sorted(ids) for name, ids in by_dataset.items()}


def _ranked_page(
    info: StoreInfo,
    scopes: Sequence[Scope],
    dataset: str | None,
    query: str,
    filters: sql.Composable,
    params: Mapping[str, Any],
    limit: int,
    offset: int,
    recall_in: RecallIn,
    embed_timeout_s: float,
    within: Mapping[str, Sequence[int]] | None,
) -> Operation[list[StoredItem]]:
    """A page of the matching items (`params`: the prefix, the filter, the project; all applied in
    SQL before anything is ranked) in the order of a search by query: first those whose fact a
    recall of its scope keeps (up to `MAX_K` facts a scope: RRF over vector, anchor and keyword
    signals), by that fused score; then the other items with a fact, nearest the query first
    (score 0.0); last those with no text to search (score None), most recently updated first,
    as LangGraph's `InMemoryStore` puts its unindexed items after the scored ones. With `within`
    (dataset -> the facts of the matching items: `_filtered_facts`), each recall ranks those facts
    only, and a scope without any is not recalled."""
    try:
        vector: Vector | None = yield from embed_query(query, embed_timeout_s)
    except EmbeddingError:  # recall says so in its own result; the rest is ranked by recency
        vector = None
    scored: list[tuple[float, int, StoredItem]] = []
    kept: list[tuple[str, int]] = []
    for each in scopes:
        among = None if within is None else within.get(each.dataset, ())
        if among is not None and not among:
            continue
        result = yield from recall_in(each, MAX_K, vector, among)
        order = {s.fact.id: (s.score, rank) for rank, s in enumerate(result.facts, start=1)}
        if not order:
            continue
        kept.extend((each.dataset, fact_id) for fact_id in order)
        rows = yield from execute_as(
            sql_items.ItemRow,
            sql_items.items_of_facts(info.schema, filters),
            {**params, "dataset": each.dataset, "project": each.project, "fact_ids": sorted(order)},
        )
        for row in rows:
            assert row.fact_id is not None
            score, rank = order[row.fact_id]
            scored.append((score, rank, row.stored(score)))
    scored.sort(key=lambda entry: (-entry[0], entry[1]))
    page = [item for _, _, item in scored[offset : offset + limit]]
    if len(page) == limit:
        return page
    statement = sql_items.unkept_items(info.schema, filters, scoped=dataset is not None, by_vector=vector is not None)
    rest = {
        "dataset": dataset,
        "kept_datasets": [name for name, _ in kept],
        "kept_ids": [fact_id for _, fact_id in kept],
        "qvec": vector,
        "limit": limit - len(page),
        "offset": max(0, offset - len(scored)),
    }
    rows = yield from execute_as(sql_items.ItemRow, statement, {**params, **rest})
    return page + [row.stored(None if row.fact_id is None else 0.0) for row in rows]


def list_item_namespaces(
    info: StoreInfo,
    project: str,
    dataset: str | None,
    match: NamespaceMatch,
    *,
    max_depth: int | None,
    limit: int,
    offset: int,
) -> Operation[list[Namespace]]:
    """Distinct namespaces of items matching `match` (cut to `max_depth` labels), in LangGraph's
    order, a page; in the scope, or (`dataset` None) in every dataset of the project."""
    params: dict[str, Any] = {
        "positions": list(match.positions),
        "labels": list(match.labels),
        "min_labels": match.min_labels,
        "max_depth": max_depth,
        "limit": limit,
        "offset": offset,
        "dataset": dataset,
        "project": project,
    }
    rows = yield from execute(sql_items.list_namespaces(info.schema, scoped=dataset is not None), params)
    return [tuple(row[0]) for row in rows]


def sweep_items(info: StoreInfo, project: str | None, at: datetime | None) -> Operation[int]:
    """Delete the items expired at `at` (None: the transaction's time), of `project` or of every
    project, with their facts (`_sweep_scope`), scope by scope in one transaction; how many items."""
    if at is None:
        ((at,),) = yield from execute(sql_retention.transaction_time())
    scopes = yield from execute_as(Scope, sql_items.expired_scopes(info.schema), {"at": at, "project": project})
    swept = 0
    for scope in scopes:
        swept += yield from _sweep_scope(info, scope, at)
    return swept


def _sweep_scope(info: StoreInfo, scope: Scope, at: datetime) -> Operation[int]:
    """Delete the scope's expired items, and the facts no item refers to any more that they leave,
    with the item's past texts (the facts those superseded): an expired item leaves nothing
    behind. Under every relation lock of the scope (`forgetting.hold_scope`) and the items' own locks, in a put's order,
    so a concurrent put or refresh of one of them comes wholly before or after."""
    base: dict[str, Any] = {"dataset": scope.dataset, "project": scope.project, "schema": info.schema, "at": at}
    rows = yield from execute_as(sql_items.ExpiredItem, sql_items.expired_items(info.schema), base)
    yield from hold_scope(info, scope)
    keys = "[" + ", ".join(json.dumps({"namespace": r.namespace, "key": r.key}) for r in rows) + "]"
    yield from execute(sql_items.lock_items(info.schema), {**base, "items": keys})
    gone = yield from execute(sql_items.delete_expired_items(info.schema), {**base, "items": keys})
    ids = sorted({int(fact_id) for (fact_id,) in gone if fact_id is not None})
    if ids:
        doomed = sql_items.expired_item_facts(info.schema, sql_reconcile.CHAIN_DEPTH)
        yield from delete_fact_set(info, scope, doomed, {**base, "ids": ids})
    return len(gone)

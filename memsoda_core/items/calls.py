"""The item operation builders of a memory (`memsoda_core.items.values`); arguments are checked
here, eagerly, so bad input raises at the call. Each method's checks are also a pure function,
`CHECKS[method](**its keywords)`, for a caller that makes several calls (LangGraph's `batch`) and
must refuse bad input before its first write."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from memsoda_core.checks import check_bool
from memsoda_core.embedders.protocol import Vector
from memsoda_core.items import operations as items_ops
from memsoda_core.items.values import (
    MAX_LIST_LIMIT,
    Condition,
    ItemInput,
    Namespace,
    NamespaceMatch,
    StoredItem,
    check_item_scope,
    check_key,
    check_max_depth,
    check_namespace,
    check_page,
    parse_filter,
    parse_match,
    validate_items,
)
from memsoda_core.memory_context import MemoryContext
from memsoda_core.models import RecallResult
from memsoda_core.recall.calls import top_facts_op
from memsoda_core.runner.steps import Operation
from memsoda_core.validation import Scope, check_query, check_scope, parse_time


def check_put_items(items: Sequence[ItemInput | Mapping[str, Any]], *, dataset: str, project: str) -> None:
    """`put_items`' checks (the scope, every item), with no I/O."""
    check_scope(dataset, project)
    validate_items(items, now=datetime.now(UTC))  # the time only dates the items' facts


def check_get_item(
    namespace: Sequence[str], key: str, *, dataset: str, project: str, refresh_ttl: Any = False
) -> tuple[Scope, Namespace, str, bool]:
    """`get_item`'s checks: its scope, namespace, key and refresh."""
    return check_scope(dataset, project), check_namespace(namespace), check_key(key), _check_refresh(refresh_ttl)


def check_search_items(
    namespace_prefix: Sequence[str] = (),
    *,
    project: str,
    dataset: str | None = None,
    query: str | None = None,
    filter: Mapping[str, Any] | None = None,
    limit: int = 10,
    offset: int = 0,
    refresh_ttl: Any = False,
) -> tuple[tuple[str | None, str], Namespace, str | None, list[Condition], bool]:
    """`search_items`' checks: ((dataset, project), prefix, query text, filter conditions, refresh)."""
    refresh = _check_refresh(refresh_ttl)
    where, prefix = check_item_scope(dataset, project), check_namespace(namespace_prefix, empty=True)
    text, conditions = check_query(query), parse_filter(filter)
    check_page(limit, offset, most=MAX_LIST_LIMIT)
    return where, prefix, text, conditions, refresh


def check_list_item_namespaces(
    *,
    match: Sequence[tuple[str, Sequence[str]]] = (),
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
    project: str,
    dataset: str | None = None,
) -> tuple[tuple[str | None, str], NamespaceMatch, int | None]:
    """`list_item_namespaces`' checks: ((dataset, project), patterns, max_depth)."""
    where, patterns = check_item_scope(dataset, project), parse_match(match)
    check_page(limit, offset, most=MAX_LIST_LIMIT)
    return where, patterns, check_max_depth(max_depth)


CHECKS: Mapping[str, Callable[..., object]] = {
    "put_items": check_put_items,
    "get_item": check_get_item,
    "search_items": check_search_items,
    "list_item_namespaces": check_list_item_namespaces,
}
"""The checks of each item method of `Memory` / `AsyncMemory`, by name, taking its keywords."""


def put_items_op(
    context: MemoryContext, items: Sequence[ItemInput | Mapping[str, Any]], dataset: str, project: str
) -> Operation[list[int | None]]:
    scope = check_scope(dataset, project)
    return context.resizing(scope, items_ops.put_items(context.info, scope, items, now=context.now()))


def get_item_op(
    context: MemoryContext, namespace: Sequence[str], key: str, dataset: str, project: str, refresh_ttl: Any = False
) -> Operation[StoredItem | None]:
    scope, labels, key, refresh = check_get_item(
        namespace, key, dataset=dataset, project=project, refresh_ttl=refresh_ttl
    )
    at = context.now() if refreshes(context, refresh) else None
    return items_ops.get_item(context.info, scope, labels, key, refresh_at=at)


def search_items_op(
    context: MemoryContext,
    namespace_prefix: Sequence[str],
    project: str,
    dataset: str | None,
    query: str | None,
    filter: Mapping[str, Any] | None,
    limit: int,
    offset: int,
    refresh_ttl: Any = False,
) -> Operation[list[StoredItem]]:
    (dataset, project), prefix, text, conditions, checked_refresh = check_search_items(
        namespace_prefix,
        project=project,
        dataset=dataset,
        query=query,
        filter=filter,
        limit=limit,
        offset=offset,
        refresh_ttl=refresh_ttl,
    )
    refresh = refreshes(context, checked_refresh)

    def recall_in(where: Scope, keep: int, vector: Vector | None) -> Operation[RecallResult]:
        return top_facts_op(context, where, text, keep, query_embedding=vector)

    found = items_ops.search_items(
        context.info,
        project,
        dataset,
        prefix,
        query=text,
        conditions=conditions,
        limit=limit,
        offset=offset,
        recall_in=recall_in,
        embed_timeout_s=context.options.embed_timeout_s,
    )
    return _refreshing(context, found) if refresh else found


def _refreshing(context: MemoryContext, op: Operation[list[StoredItem]]) -> Operation[list[StoredItem]]:
    """`op`'s items, their TTLs counted again from now."""
    found = yield from op
    return (yield from items_ops.refresh_items(context.info, found, context.now()))


def sweep_items_op(context: MemoryContext, project: str | None, at: Any) -> Operation[int]:
    if project is not None:
        check_scope("-", project)
    return items_ops.sweep_items(context.info, project, parse_time(at, "at"))


def list_item_namespaces_op(
    context: MemoryContext,
    match: Sequence[tuple[str, Sequence[str]]],
    max_depth: int | None,
    limit: int,
    offset: int,
    project: str,
    dataset: str | None,
) -> Operation[list[tuple[str, ...]]]:
    (dataset, project), patterns, depth = check_list_item_namespaces(
        match=match, max_depth=max_depth, limit=limit, offset=offset, project=project, dataset=dataset
    )
    return items_ops.list_item_namespaces(
        context.info, project, dataset, patterns, max_depth=depth, limit=limit, offset=offset
    )


def refreshes(context: MemoryContext, refresh_ttl: Any) -> bool:
    """Whether a read of items refreshes their TTLs (a write): when asked (`refresh_ttl`, True or
    False) and the memory can write. A read-only memory (a replica, a read-only role) never
    refreshes, so its reads stay reads; the items' expiry is moved by reads on a writable one."""
    return _check_refresh(refresh_ttl) and not context.info.read_only


def _check_refresh(refresh_ttl: Any) -> bool:
    return check_bool(refresh_ttl, "refresh_ttl")

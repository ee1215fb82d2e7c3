"""The item operation builders of a memory (`memsoda_core.items.values`); arguments are checked
here, eagerly, so bad input raises at the call. Each read method's checks are a pure function,
`CHECKS[method](**its keywords)`, returning its arguments checked (`ItemGet`, `ItemSearch`,
`NamespaceListing`), the one form its operation builder takes; a caller that makes several calls
(LangGraph's `batch`) runs them all to refuse bad input before its first write."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
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


@dataclass(frozen=True, kw_only=True)
class ItemGet:
    """`get_item`'s arguments, checked (`check_get_item`): what `get_item_op` takes."""

    scope: Scope
    namespace: Namespace
    key: str
    refresh: bool


def check_get_item(
    namespace: Sequence[str], key: str, *, dataset: str, project: str, refresh_ttl: Any = False
) -> ItemGet:
    """`get_item`'s checks: its scope, namespace, key and refresh."""
    return ItemGet(
        scope=check_scope(dataset, project),
        namespace=check_namespace(namespace),
        key=check_key(key),
        refresh=_check_refresh(refresh_ttl),
    )


@dataclass(frozen=True, kw_only=True)
class ItemSearch:
    """`search_items`' arguments, checked (`check_search_items`): what `search_items_op` takes.
    `dataset` None: every dataset of `project`; `query` None: no query."""

    project: str
    dataset: str | None
    prefix: Namespace
    query: str | None
    conditions: tuple[Condition, ...]
    limit: int
    offset: int
    refresh: bool


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
) -> ItemSearch:
    """`search_items`' checks: its refresh, scope, prefix, query, filter and page, in that order."""
    refresh = _check_refresh(refresh_ttl)
    where, prefix = check_item_scope(dataset, project), check_namespace(namespace_prefix, empty=True)
    text, conditions = check_query(query), tuple(parse_filter(filter))
    check_page(limit, offset, most=MAX_LIST_LIMIT)
    return ItemSearch(
        project=where.project,
        dataset=where.dataset,
        prefix=prefix,
        query=text,
        conditions=conditions,
        limit=limit,
        offset=offset,
        refresh=refresh,
    )


@dataclass(frozen=True, kw_only=True)
class NamespaceListing:
    """`list_item_namespaces`' arguments, checked (`check_list_item_namespaces`): what
    `list_item_namespaces_op` takes."""

    project: str
    dataset: str | None
    match: NamespaceMatch
    max_depth: int | None
    limit: int
    offset: int


def check_list_item_namespaces(
    *,
    match: Sequence[tuple[str, Sequence[str]]] = (),
    max_depth: int | None = None,
    limit: int = 100,
    offset: int = 0,
    project: str,
    dataset: str | None = None,
) -> NamespaceListing:
    """`list_item_namespaces`' checks: its scope, patterns, page and depth."""
    where, patterns = check_item_scope(dataset, project), parse_match(match)
    check_page(limit, offset, most=MAX_LIST_LIMIT)
    return NamespaceListing(
        project=where.project,
        dataset=where.dataset,
        match=patterns,
        max_depth=check_max_depth(max_depth),
        limit=limit,
        offset=offset,
    )


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


def get_item_op(context: MemoryContext, get: ItemGet) -> Operation[StoredItem | None]:
    at = context.now() if refreshes(context, get.refresh) else None
    return items_ops.get_item(context.info, get.scope, get.namespace, get.key, refresh_at=at)


def search_items_op(context: MemoryContext, search: ItemSearch) -> Operation[list[StoredItem]]:
    def recall_in(
        where: Scope, keep: int, vector: Vector | None, within: Sequence[int] | None
    ) -> Operation[RecallResult]:
        return top_facts_op(context, where, search.query, keep, query_embedding=vector, within=within)

    found = items_ops.search_items(
        context.info,
        search.project,
        search.dataset,
        search.prefix,
        query=search.query,
        conditions=list(search.conditions),
        limit=search.limit,
        offset=search.offset,
        recall_in=recall_in,
        embed_timeout_s=context.options.embed_timeout_s,
    )
    return _refreshing(context, found) if refreshes(context, search.refresh) else found


def _refreshing(context: MemoryContext, op: Operation[list[StoredItem]]) -> Operation[list[StoredItem]]:
    """`op`'s items, their TTLs counted again from now."""
    found = yield from op
    return (yield from items_ops.refresh_items(context.info, found, context.now()))


def sweep_items_op(context: MemoryContext, project: str | None, at: Any) -> Operation[int]:
    if project is not None:
        check_scope("-", project)
    return items_ops.sweep_items(context.info, project, parse_time(at, "at"))


def list_item_namespaces_op(context: MemoryContext, listing: NamespaceListing) -> Operation[list[tuple[str, ...]]]:
    return items_ops.list_item_namespaces(
        context.info,
        listing.project,
        listing.dataset,
        listing.match,
        max_depth=listing.max_depth,
        limit=listing.limit,
        offset=listing.offset,
    )


def refreshes(context: MemoryContext, refresh: bool) -> bool:
    """Whether a read of items refreshes their TTLs (a write): when asked (`refresh`, checked by the
    read's check) and the memory can write. A read-only memory (a replica, a read-only role) never
    refreshes, so its reads stay reads; the items' expiry is moved by reads on a writable one."""
    return refresh and not context.info.read_only


def _check_refresh(refresh_ttl: Any) -> bool:
    return check_bool(refresh_ttl, "refresh_ttl")

"""What `Memory` and `AsyncMemory` share for items (`memsoda_core.items`): their operation builders,
arguments checked eagerly as in `memory_base`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memsoda_core.items import (
    MAX_LIST_LIMIT,
    ItemInput,
    StoredItem,
    check_item_scope,
    check_key,
    check_max_depth,
    check_namespace,
    check_page,
    parse_filter,
    parse_match,
)
from memsoda_core.limits import MAX_K
from memsoda_core.memory_base import MemoryBase
from memsoda_core.models import RecallResult
from memsoda_core.ops import items as items_ops
from memsoda_core.runner.steps import Operation
from memsoda_core.validation import Scope, check_query, check_scope


class ItemsBase(MemoryBase):
    """MemoryBase with the item operation builders."""

    def _put_items_op(
        self, items: Sequence[ItemInput | Mapping[str, Any]], dataset: str, project: str
    ) -> Operation[list[int | None]]:
        scope = check_scope(dataset, project)
        return self._resizing(scope, items_ops.put_items(self._info, scope, items, now=self._now()))

    def _get_item_op(
        self, namespace: Sequence[str], key: str, dataset: str, project: str
    ) -> Operation[StoredItem | None]:
        return items_ops.get_item(self._info, check_scope(dataset, project), check_namespace(namespace), check_key(key))

    def _search_items_op(
        self,
        namespace_prefix: Sequence[str],
        project: str,
        dataset: str | None,
        query: str | None,
        filter: Mapping[str, Any] | None,
        limit: int,
        offset: int,
    ) -> Operation[list[StoredItem]]:
        (dataset, project), prefix = check_item_scope(dataset, project), check_namespace(namespace_prefix, empty=True)
        text, conditions = check_query(query), parse_filter(filter)
        check_page(limit, offset, most=MAX_LIST_LIMIT if text is None else MAX_K)

        def recall_in(where: Scope, keep: int) -> Operation[RecallResult]:
            return self._top_facts_op(where, text, keep)

        return items_ops.search_items(
            self._info,
            project,
            dataset,
            prefix,
            query=text,
            conditions=conditions,
            limit=limit,
            offset=offset,
            recall_in=recall_in,
        )

    def _list_item_namespaces_op(
        self,
        match: Sequence[tuple[str, Sequence[str]]],
        max_depth: int | None,
        limit: int,
        offset: int,
        project: str,
        dataset: str | None,
    ) -> Operation[list[tuple[str, ...]]]:
        (dataset, project), patterns = check_item_scope(dataset, project), parse_match(match)
        check_page(limit, offset, most=MAX_LIST_LIMIT)
        return items_ops.list_item_namespaces(
            self._info, project, dataset, patterns, max_depth=check_max_depth(max_depth), limit=limit, offset=offset
        )

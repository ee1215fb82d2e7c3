"""What ties items to their facts, shared by a put (`items.operations`) and an import
(`items.transfer`): a batch of items as the statements bind it, and the end of the facts of items'
own that no item refers to any more."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime

from memsoda_core.items import statements as sql_items
from memsoda_core.items.values import ValidItem
from memsoda_core.runner.steps import Operation, execute
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope
from memsoda_core.writing import reconcile_statements as sql_reconcile


def batch_json(items: Sequence[ValidItem], fact_ids: Mapping[int, int] | None = None) -> str:
    """The jsonb array the statements read (`items.statements._BATCH`): values are already JSON text."""
    parts = []
    for n, item in enumerate(items):
        head = {
            "namespace": list(item.namespace),
            "key": item.key,
            "fact_id": (fact_ids or {}).get(n),
            "ttl_minutes": item.ttl_minutes,
        }
        body = json.dumps(head, ensure_ascii=False)
        parts.append(body if item.value_json is None else body[:-1] + ', "value": ' + item.value_json + "}")
    return "[" + ", ".join(parts) + "]"


def end_orphans(
    info: StoreInfo,
    scope: Scope,
    valid: Sequence[ValidItem],
    new_fact: Mapping[int, int],
    held: Sequence[sql_items.ItemFact],
    now: datetime,
    learned: datetime,
) -> Operation[None]:
    """End each fact of items' own the items referred to before this write that no item refers to
    now, superseded by its item's new fact when it has one."""
    position = {(item.namespace, item.key): n for n, item in enumerate(valid)}
    successor: dict[int, int | None] = {}
    for row in held:
        if row.fact_id is None:
            continue
        replaced_by = new_fact.get(position[(tuple(row.namespace), row.key)])
        if replaced_by != row.fact_id and successor.get(row.fact_id) is None:
            successor[row.fact_id] = replaced_by
    if not successor:
        return
    base = {"dataset": scope.dataset, "project": scope.project}
    rows = yield from execute(sql_items.orphaned_facts(info.schema), {**base, "ids": sorted(successor), "now": now})
    ended = [int(row[0]) for row in rows]
    if ended:
        params = {
            **base,
            "ids": ended,
            "ats": [now] * len(ended),
            "bys": [successor[i] for i in ended],
            "expireds": [learned] * len(ended),
        }
        yield from execute(sql_reconcile.end_facts(info.schema), params)

"""Retention: a scope's rules of how long facts are kept, and the purge of the facts they have
outlived (operations; `forgetting.retention_statements` says what a fact's age is).

A purge deletes facts as `forget_source` does (`forgetting.delete_fact_set`: their links,
sources and items, their counts, and the pointers of the facts they had superseded), scope by
scope, under the reconciliation locks of the facts it deletes, all in the operation's one
transaction. `maintain` runs it first.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from memsoda_core.forgetting import retention_statements as sql_retention
from memsoda_core.forgetting.operations import delete_fact_set, hold_scope
from memsoda_core.forgetting.rules import Purge, RetentionReport, RetentionRule
from memsoda_core.runner.steps import Operation, execute, execute_as
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.schema import SCOPE_RULE
from memsoda_core.validation import Scope


def _rule(row: sql_retention.RuleRow) -> RetentionRule:
    purge: Purge = "all" if row.purge == "all" else "ended"
    return RetentionRule(predicate=row.predicate or None, max_age=row.max_age, purge=purge)


def retention_rules(info: StoreInfo, scope: Scope) -> Operation[list[RetentionRule]]:
    """The scope's rules: its own (predicate None) first, then by predicate."""
    params = {"dataset": scope.dataset, "project": scope.project}
    rows = yield from execute_as(sql_retention.RuleRow, sql_retention.list_rules(info.schema), params)
    return [_rule(row) for row in rows]


def set_retention(
    info: StoreInfo, scope: Scope, *, max_age: timedelta | None, purge: Purge, predicate: str | None
) -> Operation[list[RetentionRule]]:
    """Set (or, `max_age` None, remove) the scope's rule for `predicate` (None: its own rule);
    returns the scope's rules."""
    params: dict[str, Any] = {
        "dataset": scope.dataset,
        "project": scope.project,
        "predicate": SCOPE_RULE if predicate is None else predicate,
        "max_age": max_age,
        "purge": purge,
    }
    statement = sql_retention.remove_rule if max_age is None else sql_retention.set_rule
    yield from execute(statement(info.schema), params)
    return (yield from retention_rules(info, scope))


def purge_scope(info: StoreInfo, scope: Scope, at: datetime | None) -> Operation[tuple[int, int]]:
    """Delete the scope's facts its rules have outlived at `at` (None: the transaction's time);
    (facts, items) deleted."""
    params: dict[str, Any] = {"dataset": scope.dataset, "project": scope.project}
    yield from hold_scope(info, scope)
    if at is None:
        ((at,),) = yield from execute(sql_retention.transaction_time())
    params["at"] = at
    rows = yield from execute_as(sql_retention.Outlived, sql_retention.outlived_facts(info.schema), params)
    if not rows:
        return 0, 0
    params["ids"] = sorted(r.fact_id for r in rows)
    deleted = yield from delete_fact_set(info, scope, sql_retention.outlived_facts(info.schema, only_ids=True), params)
    return deleted.facts, deleted.items


def apply_retention(info: StoreInfo, at: datetime | None) -> Operation[RetentionReport]:
    """Purge every scope with rules (see the module docstring)."""
    scopes = yield from execute_as(Scope, sql_retention.ruled_scopes(info.schema))
    purged: list[tuple[str, str, int]] = []
    items = 0
    for scope in scopes:
        facts, gone_items = yield from purge_scope(info, scope, at)
        items += gone_items
        if facts:
            purged.append((scope.dataset, scope.project, facts))
    return RetentionReport(facts=sum(n for _, _, n in purged), items=items, scopes=tuple(purged))

"""Forgetting (operations): an entity or a whole scope (`forget`), and what was learned from a source,
a thread or messages (`forget_source`).

A fact `remember` wrote records each message it was learned from (`fact_sources`). Forgetting a
source deletes the facts learned from it alone, and only the source rows of the facts also learned
elsewhere; the items that referred to a deleted fact and, when a whole thread is forgotten, the
thread's episodes go with them. One transaction, under every reconciliation lock of the scope,
as `forget` takes them (`hold_scope`).
"""

from __future__ import annotations

from typing import Any

from memsoda_core.forgetting import deleting as sql_deleting
from memsoda_core.forgetting.rules import ForgetReport, SourceSelection
from memsoda_core.learning import sources as sql_sources
from memsoda_core.ops.maintenance import drop_tenant_indexes
from memsoda_core.runner.steps import Operation, execute, execute_as
from memsoda_core.store import lexemes as sql_lexemes
from memsoda_core.store import statements as sql_store
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope
from memsoda_core.writing import reconcile_statements as sql_reconcile
from memsoda_core.writing.operation import hold_dataset


def hold_scope(info: StoreInfo, scope: Scope) -> Operation[None]:
    """What every delete of facts takes first: the dataset's hold, then every reconciliation lock of
    the scope (`reconcile.lock_scope`, the first lock of the write order), so every writer into the
    scope has committed before and the next ones wait: no writer holds an entity, fact, lexeme or
    scope row the delete changes (no deadlock), and a supersede naming a deleted fact came before."""
    yield from hold_dataset(info, scope)
    params = {"dataset": scope.dataset, "project": scope.project, "schema": info.schema}
    yield from execute(sql_reconcile.lock_scope(info.schema), params)


def delete_fact_set(
    info: StoreInfo, scope: Scope, doomed: Any, params: dict[str, Any]
) -> Operation[sql_deleting.Deleted]:
    """Delete the facts `doomed` selects (`deleting.delete_facts`), then the entities and lexeme
    counts no fact holds any more (`params["name"]`: an entity to delete with them). The caller
    holds the scope (`hold_scope`)."""
    (deleted,) = yield from execute_as(sql_deleting.Deleted, sql_deleting.delete_facts(info.schema, doomed), params)
    base = {"dataset": scope.dataset, "project": scope.project}
    if deleted.facts:
        yield from execute(sql_store.delete_orphan_entities(info.schema), {**base, "name": params.get("name")})
        yield from execute(sql_lexemes.delete_spent_lexemes(info.schema), base)
    return deleted


def forget_source(info: StoreInfo, scope: Scope, source: SourceSelection) -> Operation[ForgetReport]:
    """Forget `source` in the scope (see the module docstring); what went, counted."""
    params: dict[str, Any] = {"dataset": scope.dataset, "project": scope.project, **source.params}
    shape = source.shape
    yield from hold_scope(info, scope)
    ((kept,),) = yield from execute(sql_sources.drop_shared_sources(info.schema, **shape), params)
    deleted = yield from delete_fact_set(info, scope, sql_sources.only_sourced_facts(info.schema, **shape), params)
    episodes = 0
    if source.thread_id is not None and source.message_ids is None:
        ((episodes,),) = yield from execute(sql_sources.delete_thread_episodes(info.schema), params)
    return ForgetReport(facts_deleted=deleted.facts, facts_kept=int(kept), episodes=int(episodes), items=deleted.items)


def forget(info: StoreInfo, scope: Scope, entity: str | None) -> Operation[int]:
    """Delete an entity and every fact touching it, or (entity=None) the whole scope.
    Returns the number of facts deleted.

    A fact that a deleted fact superseded keeps its end, as history, and its `superseded_by` is
    cleared (ended, not replaced): no pointer is left naming a deleted fact, and forgetting where
    someone moved does not make the old place live again.

    It first takes every reconciliation lock of the scope (`writing.reconcile_statements.lock_scope`), as the
    first lock of the write order (`writing.reconcile_statements.lock_relations`): every write into the scope
    that started before has committed, the next ones wait, and no writer holds an entity, fact,
    lexeme or scope row while forget changes them; a supersede pointing at a fact it deletes has
    committed before, and is cleared."""
    base: dict[str, Any] = {"dataset": scope.dataset, "project": scope.project}
    yield from hold_scope(info, scope)
    if entity is None:
        ((count,),) = yield from execute(sql_store.count_facts(info.schema), base)
        for statement in sql_store.forget_scope(info.schema):
            yield from execute(statement, base)
        yield from drop_tenant_indexes(info, scope)
        return int(count)
    deleted = yield from delete_fact_set(info, scope, sql_store.entity_facts(info.schema), {**base, "name": entity})
    if not deleted.facts:  # an entity no fact touches (none should be left): delete it alone
        yield from execute(sql_store.delete_orphan_entities(info.schema), {**base, "name": entity})
    return deleted.facts

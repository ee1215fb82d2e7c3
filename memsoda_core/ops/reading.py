"""Reading facts as data, and the scope's registry of single-valued predicates (operations)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memsoda_core import limits
from memsoda_core.checks import check_int
from memsoda_core.errors import NotFoundError, ValidationError
from memsoda_core.models import Fact, FactPage
from memsoda_core.runner.steps import Operation, execute, execute_as, outside_transaction
from memsoda_core.store import fact_reads as sql_reads
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope, check_batch_size, check_entity_name, check_line, integer
from memsoda_core.writing import reconcile_statements as sql_reconcile
from memsoda_core.writing import statements as sql_write
from memsoda_core.writing.operation import hold_dataset

MAX_PAGE = 1000
"""The most facts one `list_facts` page holds."""


def check_fact_id(fact_id: Any) -> int:
    checked = integer(fact_id)
    if checked is None:
        raise ValidationError(f"fact_id must be an int, got {type(fact_id).__name__}")
    return checked


def get_fact(info: StoreInfo, scope: Scope, fact_id: int) -> Operation[Fact]:
    """Fact `fact_id` of the scope, or `NotFoundError`."""
    params = {"dataset": scope.dataset, "project": scope.project, "id": check_fact_id(fact_id)}
    rows = yield from execute_as(sql_reads.FactRow, sql_reads.get_fact(info.schema), params)
    if not rows:
        raise NotFoundError(f"no fact {fact_id} in dataset={scope.dataset!r} project={scope.project!r}")
    return rows[0].fact


def check_list_args(subject: Any, predicate: Any, entity: Any, status: Any, limit: Any, after: Any) -> dict[str, Any]:
    """The filters of `list_facts`, checked and normalized (names as they are stored)."""
    if status not in sql_reads.STATUSES:
        raise ValidationError(f"status must be one of {list(sql_reads.STATUSES)}, got {status!r}")
    check_int(limit, "limit", low=1, high=MAX_PAGE)
    if after is not None:
        check_fact_id(after)
    return {
        "subject": None if subject is None else check_entity_name(subject),
        "predicate": None if predicate is None else check_line(predicate, "predicate", limits.MAX_PREDICATE_CHARS),
        "entity": None if entity is None else check_entity_name(entity),
        "status": status,
        "limit": limit,
        "after": after or 0,
    }


def list_facts(
    info: StoreInfo, scope: Scope, filters: dict[str, Any], as_of: datetime, known_at: datetime | None = None
) -> Operation[FactPage]:
    """One keyset page of the scope's facts (`check_list_args`' filters) in id order; with
    `known_at`, only those memory knew then, each as it knew it (`Fact.as_known_at`)."""
    params = {**filters, "dataset": scope.dataset, "project": scope.project, "as_of": as_of, "known_at": known_at}
    params["limit"] = filters["limit"] + 1  # one more: whether there is a next page
    rows = yield from execute_as(sql_reads.FactRow, sql_reads.list_facts(info.schema), params)
    facts = tuple(row.fact if known_at is None else row.fact.as_known_at(known_at) for row in rows[: filters["limit"]])
    more = len(rows) > filters["limit"]
    return FactPage(facts=facts, next_after=facts[-1].id if more else None)


def history(info: StoreInfo, scope: Scope, fact_id: int) -> Operation[list[Fact]]:
    """The supersede chain of `fact_id`, oldest first (`NotFoundError` if there is no such fact)."""
    params = {"dataset": scope.dataset, "project": scope.project, "id": check_fact_id(fact_id)}
    rows = yield from execute_as(sql_reads.FactRow, sql_reads.history(info.schema), params)
    if not rows:
        raise NotFoundError(f"no fact {fact_id} in dataset={scope.dataset!r} project={scope.project!r}")
    return [row.fact for row in rows]


def check_predicates(predicates: Any) -> list[str]:
    if isinstance(predicates, str) or not isinstance(predicates, Sequence):
        raise ValidationError("predicates must be a list of strings")
    check_batch_size(len(predicates), "predicates")
    return [check_line(p, "predicate", limits.MAX_PREDICATE_CHARS) for p in predicates]


def set_single_valued(
    info: StoreInfo, scope: Scope, predicates: Sequence[str], single_valued: bool
) -> Operation[list[str]]:
    """Register (or, `single_valued=False`, unregister) predicates as single-valued in the scope;
    returns the scope's single-valued predicates. First every reconciliation lock of the scope, as
    `forget` takes them: the writes in flight commit under the registry they locked by, and the
    registry holds still while a writer holds its locks (`learning.applying.check_single_valued`)."""
    params = {"dataset": scope.dataset, "project": scope.project, "predicates": list(predicates)}
    if not (yield from _lock_scope(info, scope, params)):
        # lock_scope finds the scope's locks through its row: a scope never written gets it first, committed
        # on its own (a row this transaction held would close a wait cycle with a first write's count bump).
        # Only then: a step outside the transaction keeps the runner from running the operation again when
        # it loses a wait cycle (with a writer that locks its relation late, `late_relations`).
        yield from outside_transaction(sql_write.ensure_scope(info.schema), params)
        yield from _lock_scope(info, scope, params)
    change = sql_reconcile.add_single_valued if single_valued else sql_reconcile.remove_single_valued
    yield from execute(change(info.schema), params)
    return (yield from single_valued_predicates(info, scope))


def _lock_scope(info: StoreInfo, scope: Scope, params: dict[str, Any]) -> Operation[int]:
    """What the layout holds of the dataset, then every lock of the scope (`lock_scope`); how many
    it took: none when the scope has no row."""
    yield from hold_dataset(info, scope)
    (locked,) = yield from execute_as(
        sql_reconcile.Locked, sql_reconcile.lock_scope(info.schema), {**params, "schema": info.schema}
    )
    return locked.locks


def single_valued_predicates(info: StoreInfo, scope: Scope) -> Operation[list[str]]:
    """The scope's single-valued predicates (case folded), sorted."""
    rows = yield from execute(
        sql_reconcile.list_single_valued(info.schema), {"dataset": scope.dataset, "project": scope.project}
    )
    return [str(row[0]) for row in rows]

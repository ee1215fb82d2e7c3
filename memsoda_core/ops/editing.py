"""Changing stored facts: invalidate, supersede, episodes, forget (operations)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from memsoda_core.embedders.protocol import Vector
from memsoda_core.errors import (
    IntervalError,
    NotFoundError,
    NotLiveError,
    ValidationError,
)
from memsoda_core.models import EpisodeInput, FactInput
from memsoda_core.ops.maintenance import ensure_tenant_indexes
from memsoda_core.ops.reading import check_fact_id
from memsoda_core.runner.steps import Operation, embed_documents, execute, execute_as, read_aside
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import (
    Scope,
    ValidEpisode,
    check_batch_size,
    parse_time,
    validate_episode,
    validate_facts,
)
from memsoda_core.writing import reconcile_statements as sql_reconcile
from memsoda_core.writing import statements as sql_write
from memsoda_core.writing.operation import lock_facts, write_facts


def _state(info: StoreInfo, scope: Scope, fact_id: int, *, lock: bool) -> Operation[sql_reconcile.FactState]:
    params = {"dataset": scope.dataset, "project": scope.project, "id": fact_id}
    rows = yield from execute_as(sql_reconcile.FactState, sql_reconcile.fact_state(info.schema, lock=lock), params)
    if not rows:
        raise NotFoundError(f"no fact {fact_id} in dataset={scope.dataset!r} project={scope.project!r}")
    return rows[0]


def check_live(
    info: StoreInfo, scope: Scope, fact_id: int, *, at: datetime, verb: str
) -> Operation[sql_reconcile.FactState]:
    """Lock fact `fact_id` FOR UPDATE (its relation's lock is held) and check that it is live and
    began before `at` (a fact with no known start began before any `at`): `NotLiveError` names
    the fact live now in its chain; `IntervalError`."""
    state = yield from _state(info, scope, fact_id, lock=True)
    if state.valid_at is not None and at <= state.valid_at:
        raise IntervalError(
            f"cannot {verb} fact {fact_id} at {at.isoformat()}: it only became valid at {state.valid_at.isoformat()}"
        )
    if state.superseded_by is not None or (state.invalid_at is not None and state.invalid_at <= at):
        (end,) = yield from execute_as(
            sql_reconcile.ChainEnd,
            sql_reconcile.chain_end(info.schema),
            {"dataset": scope.dataset, "project": scope.project, "id": fact_id},
        )
        live = end.id if end.invalid_at is None and end.id != fact_id else None
        how = (
            f"it was superseded by fact {state.superseded_by}"
            if state.superseded_by is not None
            else f"it ended at {state.invalid_at.isoformat() if state.invalid_at else '?'}"
        )
        now_live = f"fact {live} is live now in its chain" if live is not None else "no fact of its chain is live"
        raise NotLiveError(f"cannot {verb} fact {fact_id}: {how}; {now_live}", fact_id=fact_id, live_id=live)
    return state


def invalidate(info: StoreInfo, scope: Scope, fact_id: int, *, at: Any) -> Operation[bool]:
    """End a live fact at `at` (default: now, when memory learns it), under its relation's lock;
    memory records that it learned the end then (`expired_at`). A fact that has ended (or was
    superseded) raises `NotLiveError`; `at` at or before its start, `IntervalError`."""
    fact_id = check_fact_id(fact_id)
    given = parse_time(at, "at")
    state = yield from _state(info, scope, fact_id, lock=False)
    learned = (yield from lock_facts(info, scope, [], [(state.subject, state.predicate, state.object)])).learned_at
    when = given if given is not None else learned
    yield from check_live(info, scope, fact_id, at=when, verb="invalidate")
    params = {
        "dataset": scope.dataset,
        "project": scope.project,
        "ids": [fact_id],
        "ats": [when],
        "bys": [None],
        "expireds": [learned],
    }
    yield from execute(sql_reconcile.end_facts(info.schema), params)
    return True


def supersede(
    info: StoreInfo,
    scope: Scope,
    fact_id: int,
    new_fact: FactInput | Mapping[str, Any],
) -> Operation[int]:
    """Store `new_fact` (by the write rules of `writing.decisions`) and end the live fact `fact_id`
    at the new fact's valid_at, superseded by it, in one transaction; both relations are locked
    first. A new fact without valid_at starts when memory learns it (the write's time), and the
    old one ends then. `NotLiveError` if `fact_id` is not live; a new fact equal to it,
    `ValidationError`."""
    fact_id = check_fact_id(fact_id)
    (valid,) = validate_facts([new_fact])
    if valid.valid_at is None:
        valid = dataclasses.replace(valid, starts_when_learned=True)
    params = {"dataset": scope.dataset, "project": scope.project, "id": fact_id}
    found = yield from read_aside(sql_reconcile.fact_state(info.schema), params)
    if not found:  # not there, or the read failed: read it in the transaction
        state = yield from _state(info, scope, fact_id, lock=False)
    else:
        state = sql_reconcile.FactState(*found[0])

    learned: list[datetime] = []

    def guard(at: datetime) -> Operation[None]:
        learned.append(at)
        yield from check_live(info, scope, fact_id, at=valid.valid_at or at, verb="supersede")

    (new_id,) = yield from write_facts(
        info,
        scope,
        [valid],
        None,
        standalone=True,
        also_lock=[(state.subject, state.predicate, state.object)],
        guard=guard,
    )
    if new_id == fact_id:
        raise ValidationError(f"the new fact is equal to fact {fact_id}, which it would supersede")
    ended = {
        **params,
        "ids": [fact_id],
        "ats": [valid.valid_at or learned[0]],
        "bys": [new_id],
        "expireds": [learned[0]],
    }
    yield from execute(sql_reconcile.end_facts(info.schema), ended)
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


def write_episodes(
    info: StoreInfo, scope: Scope, episodes: Sequence[ValidEpisode], vectors: Sequence[Vector] | None = None
) -> Operation[list[int]]:
    """Store `episodes`, embedding their texts unless `vectors` are given."""
    if not episodes:
        return []
    if vectors is None:
        vectors = yield from embed_documents([e.text for e in episodes])
    base = {"dataset": scope.dataset, "project": scope.project}
    yield from execute(sql_write.ensure_scope(info.schema), base)
    rows = yield from execute(
        sql_write.insert_episodes(info.schema),
        {
            **base,
            "thread_ids": [e.thread_id for e in episodes],
            "texts": [e.text for e in episodes],
            "created_ats": [e.created_at for e in episodes],
            "embeddings": vectors,
        },
    )
    return sorted(int(row[0]) for row in rows)

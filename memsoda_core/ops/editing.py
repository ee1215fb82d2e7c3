"""Changing stored facts: invalidate, supersede, episodes, forget (operations)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from memsoda_core.errors import (
    IntervalError,
    NotFoundError,
    ValidationError,
)
from memsoda_core.models import EpisodeInput, FactInput
from memsoda_core.ops.maintenance import drop_tenant_indexes, ensure_tenant_indexes
from memsoda_core.ops.writing import write_facts
from memsoda_core.runner.steps import Operation, embed_documents, execute, execute_as
from memsoda_core.store import lexemes as sql_lexemes
from memsoda_core.store import statements as sql_store
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import (
    Scope,
    ValidEpisode,
    check_batch_size,
    parse_time,
    validate_episode,
    validate_facts,
)


def invalidate(info: StoreInfo, scope: Scope, fact_id: int, *, at: Any, now: datetime) -> Operation[bool]:
    """Mark a fact no longer true from `at` (default now). False if it already ended by then."""
    if isinstance(fact_id, bool) or not isinstance(fact_id, int):
        raise ValidationError(f"fact_id must be an int, got {type(fact_id).__name__}")
    when = parse_time(at, "at", default=now)
    assert when is not None
    params = {"dataset": scope.dataset, "project": scope.project, "id": fact_id, "at": when}
    rows = yield from execute_as(sql_store.Interval, sql_store.fact_interval(info.schema), params)
    if not rows:
        raise NotFoundError(f"no fact {fact_id} in dataset={scope.dataset!r} project={scope.project!r}")
    (interval,) = rows
    if when <= interval.valid_at:
        raise IntervalError(
            f"cannot invalidate fact {fact_id} at {when.isoformat()}: "
            f"it only became valid at {interval.valid_at.isoformat()}"
        )
    if interval.invalid_at is not None and interval.invalid_at <= when:
        return False
    changed = yield from execute(sql_store.invalidate_fact(info.schema), params)
    return bool(changed)


def supersede(
    info: StoreInfo,
    scope: Scope,
    fact_id: int,
    new_fact: FactInput | Mapping[str, Any],
    *,
    now: datetime,
) -> Operation[int]:
    """Store `new_fact` and end `fact_id` at the new fact's valid_at, in one transaction."""
    (valid,) = validate_facts([new_fact], now=now)
    (new_id,) = yield from write_facts(info, scope, [valid], None, peek=True)
    yield from invalidate(info, scope, fact_id, at=valid.valid_at, now=now)
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


def write_episodes(info: StoreInfo, scope: Scope, episodes: Sequence[ValidEpisode]) -> Operation[list[int]]:
    if not episodes:
        return []
    vectors = yield from embed_documents([e.text for e in episodes])
    base = {"dataset": scope.dataset, "project": scope.project}
    yield from execute(sql_store.ensure_scope(info.schema), base)
    rows = yield from execute(
        sql_store.insert_episodes(info.schema),
        {
            **base,
            "thread_ids": [e.thread_id for e in episodes],
            "texts": [e.text for e in episodes],
            "created_ats": [e.created_at for e in episodes],
            "embeddings": vectors,
        },
    )
    return sorted(int(row[0]) for row in rows)


def forget(info: StoreInfo, scope: Scope, entity: str | None) -> Operation[int]:
    """Delete an entity and every fact touching it, or (entity=None) the whole scope.
    Returns the number of facts deleted."""
    base: dict[str, Any] = {"dataset": scope.dataset, "project": scope.project}
    if entity is None:
        ((count,),) = yield from execute(sql_store.count_facts(info.schema), base)
        for statement in sql_store.forget_scope(info.schema):
            yield from execute(statement, base)
        yield from drop_tenant_indexes(info, scope)
        return int(count)
    params = {**base, "name": entity}
    ((count,),) = yield from execute(sql_store.forget_entity(info.schema), params)
    yield from execute(sql_store.delete_orphan_entities(info.schema), params)
    yield from execute(sql_lexemes.delete_spent_lexemes(info.schema), base)
    return int(count)

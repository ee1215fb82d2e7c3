"""Applying a checked extraction (`remember`): its facts, supersedes and ends in one transaction
through the write rules of `writing.decisions`, with the messages they came from (operations)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from memsoda_core.errors import NotFoundError
from memsoda_core.learning import sources as sql_sources
from memsoda_core.learning.operations import Checked, CheckedExtraction, unordered_if_single_valued
from memsoda_core.models import FactSource
from memsoda_core.ops.editing import check_live, write_episodes
from memsoda_core.ops.maintenance import ensure_tenant_indexes
from memsoda_core.ops.reading import single_valued_predicates
from memsoda_core.runner.steps import Operation, embed_documents, execute, execute_as, read_aside
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope, ValidEpisode
from memsoda_core.writing import inserts
from memsoda_core.writing import reconcile_statements as sql_reconcile
from memsoda_core.writing.insert_rows import insert_rows
from memsoda_core.writing.operation import lock_facts, write_facts


@dataclass(frozen=True, kw_only=True)
class Applied:
    """What `apply_extraction` wrote: per fact-bearing operation its fact id, the (old, new) pairs
    superseded, the facts ended, the episode."""

    added: tuple[int, ...]
    superseded: tuple[tuple[int, int], ...]
    ended: tuple[int, ...]
    episode_id: int | None


class SingleValuedChanged(Exception):
    """The write found predicates single-valued that the answer was checked as not (declared by
    `set_single_valued` after `remember` read them): nothing was written; `remember` checks the
    answer again against the scope's single-valued `predicates` and writes what passes."""

    def __init__(self, predicates: frozenset[str]) -> None:
        super().__init__(f"declared single-valued while remember ran: {sorted(predicates)}")
        self.predicates = predicates


def check_single_valued(info: StoreInfo, scope: Scope, checked: CheckedExtraction) -> Operation[None]:
    """Under the write's locks (which `set_single_valued` waits for), `SingleValuedChanged` when a
    predicate whose relation the answer gives two values without a start is single-valued now:
    the write rules cannot order them (`writing.decisions`). No read for an answer without such
    a relation."""
    at_risk = unordered_if_single_valued(checked)
    if not at_risk:
        return
    declared = frozenset((yield from single_valued_predicates(info, scope)))
    if declared & at_risk:
        raise SingleValuedChanged(declared)


class Ending(NamedTuple):
    """A shown fact this extraction ends: at `at`, superseded by fact `by` (None: ended)."""

    fact_id: int
    at: datetime
    by: int | None


def _end_at(operation: Checked) -> datetime:
    """When a supersede or end takes its target's end: the new fact's start, or the given end."""
    if operation.op == "end":
        assert operation.at is not None
        return operation.at
    assert operation.fact is not None and operation.fact.valid_at is not None  # set by the checks
    return operation.fact.valid_at


def apply_extraction(
    info: StoreInfo,
    scope: Scope,
    checked: CheckedExtraction,
    *,
    thread_id: str | None,
    episode: ValidEpisode | None,
) -> Operation[Applied]:
    """Write `checked` in one transaction (the episode is embedded, and the changed facts' keys
    read, before it opens): one batch of the new facts (one embedding call) under the
    locks of their relations and of the facts they supersede or end, each target checked live
    once the locks are held (`NotLiveError` when another writer ended it since it was shown: then
    nothing is written), as is the scope's registry of single-valued predicates
    (`SingleValuedChanged`), then the ends, the sources, and the episode."""
    if not checked.operations and episode is None:
        return Applied(added=(), superseded=(), ended=(), episode_id=None)  # no statement, no transaction
    base = {"dataset": scope.dataset, "project": scope.project}
    writes = [c for c in checked.operations if c.fact is not None]
    changes = [c for c in checked.operations if c.target is not None]
    episode_vectors = (yield from embed_documents([episode.text])) if episode is not None else None
    keys: list[sql_sources.TargetKey] = []
    if changes:
        params = {**base, "ids": [c.target for c in changes]}
        found = yield from read_aside(sql_sources.target_keys(info.schema), params)  # no transaction yet
        if found is None:
            keys = yield from execute_as(sql_sources.TargetKey, sql_sources.target_keys(info.schema), params)
        else:
            keys = [sql_sources.TargetKey(*row) for row in found]
        missing = sorted({c.target for c in changes if c.target is not None} - {k.id for k in keys})
        if missing:
            where = f"dataset={scope.dataset!r} project={scope.project!r}"
            raise NotFoundError(f"fact {missing[0]} is no longer in {where}")
    also = [(k.subject, k.predicate, k.object) for k in keys]

    learned: list[datetime] = []

    def guard(at: datetime) -> Operation[None]:
        learned.append(at)
        yield from check_single_valued(info, scope, checked)
        for change in changes:
            assert change.target is not None
            verb = "supersede" if change.op == "supersede" else "invalidate"
            yield from check_live(info, scope, change.target, at=_end_at(change), verb=verb)

    facts = [c.fact for c in writes if c.fact is not None]
    if facts:
        ids = yield from write_facts(info, scope, facts, None, standalone=True, also_lock=also, guard=guard)
    else:
        ids = []
        yield from guard((yield from lock_facts(info, scope, [], also)).learned_at)
    new_id = {c.index: fact_id for c, fact_id in zip(writes, ids, strict=True)}
    ends = [
        Ending(c.target, _end_at(c), new_id.get(c.index))
        for c in changes
        if c.target is not None and new_id.get(c.index) != c.target  # a "new" value equal to the old: kept
    ]
    if ends:
        yield from execute(
            sql_reconcile.end_facts(info.schema),
            {
                **base,
                "ids": [e.fact_id for e in ends],
                "ats": [e.at for e in ends],
                "bys": [e.by for e in ends],
                "expireds": [learned[0]] * len(ends),
            },
        )
    if writes:
        yield from insert_rows(
            info,
            inserts.SOURCES,
            {**base, "thread_id": thread_id, "fact_ids": ids, "message_ids": [c.message.id for c in writes]},
        )
    episode_ids = (yield from write_episodes(info, scope, [episode], episode_vectors)) if episode is not None else []
    if facts:
        yield from ensure_tenant_indexes(info, scope)
    return Applied(
        added=tuple(ids),
        superseded=tuple((e.fact_id, e.by) for e in ends if e.by is not None),
        ended=tuple(e.fact_id for e in ends if e.by is None),
        episode_id=episode_ids[0] if episode_ids else None,
    )


def fact_sources(info: StoreInfo, scope: Scope, fact_id: int) -> Operation[list[FactSource]]:
    """The messages fact `fact_id` was learned from, oldest first."""
    rows = yield from execute_as(
        sql_sources.SourceRow,
        sql_sources.fact_sources(info.schema),
        {"dataset": scope.dataset, "project": scope.project, "id": fact_id},
    )
    return [FactSource(**dataclasses.asdict(row)) for row in rows]

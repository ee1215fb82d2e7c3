"""Applying a checked extraction (`remember`): its facts, supersedes and ends in one transaction
through the write rules of `writing.decisions`, with the messages they came from (operations)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from memsoda_core.errors import ExtractionError, NotFoundError, UnorderedValueError
from memsoda_core.learning import sources as sql_sources
from memsoda_core.learning.operations import Checked, CheckedExtraction, unordered_if_single_valued
from memsoda_core.models import FactSource, RejectedOperation
from memsoda_core.ops.editing import check_live, write_episodes
from memsoda_core.ops.maintenance import ensure_tenant_indexes
from memsoda_core.ops.reading import single_valued_predicates
from memsoda_core.runner.steps import Operation, embed_documents, execute, execute_as, read_aside
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import Scope, ValidEpisode, ValidFact
from memsoda_core.writing import inserts
from memsoda_core.writing import reconcile_statements as sql_reconcile
from memsoda_core.writing.insert_rows import insert_rows
from memsoda_core.writing.operation import lock_facts, write_facts


@dataclass(frozen=True, kw_only=True)
class Applied:
    """What `apply_extraction` wrote: per fact-bearing operation written its fact id, the (old,
    new) pairs superseded, the facts ended, the episode, and the operations the write rules
    rejected (a value its relation's history cannot order, `UnorderedValueError`)."""

    added: tuple[int, ...]
    superseded: tuple[tuple[int, int], ...]
    ended: tuple[int, ...]
    episode_id: int | None
    rejected: tuple[RejectedOperation, ...] = ()


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
    on_invalid: str = "skip",
) -> Operation[Applied]:
    """Write `checked` in one transaction (the episode is embedded, and the changed facts' keys
    read, before it opens): one batch of the new facts (one embedding call) under the
    locks of their relations and of the facts they supersede or end, each target checked live
    once the locks are held (`NotLiveError` when another writer ended it since it was shown: then
    nothing is written), as is the scope's registry of single-valued predicates
    (`SingleValuedChanged`), then the ends, the sources, and the episode. An operation whose value
    the relation's history cannot order (another value starts with it, stored or in the answer:
    `UnorderedValueError`, raised before the batch writes anything) is rejected alone and the rest
    planned again in the same transaction, under the same locks and embeddings, or with
    `on_invalid="raise"` makes it raise `ExtractionError` (nothing written)."""
    if not checked.operations and episode is None:
        return Applied(added=(), superseded=(), ended=(), episode_id=None)  # no statement, no transaction
    base = {"dataset": scope.dataset, "project": scope.project}
    writes = [c for c in checked.operations if c.fact is not None]
    changes = [c for c in checked.operations if c.target is not None]  # `guard` reads it as it is then
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

    rejected: list[RejectedOperation] = []
    dropped: list[int] = []  # positions in `writes`

    def reject(position: int, exc: UnorderedValueError) -> None:
        write = writes[position]
        dropped.append(position)
        rejected.append(RejectedOperation(index=write.index, op=write.op, reason=str(exc)))
        if on_invalid == "raise":
            raise _refused(checked, rejected) from None

    facts = [c.fact for c in writes if c.fact is not None]
    ids = yield from _write(info, scope, facts, also, guard, reject)
    for write in (writes[position] for position in dropped):
        if write in changes:
            changes.remove(write)
    writes = [write for position, write in enumerate(writes) if position not in dropped]
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
                "expireds": [learned[-1]] * len(ends),
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
        rejected=tuple(rejected),
    )


def _write(
    info: StoreInfo,
    scope: Scope,
    facts: list[ValidFact],
    also: list[tuple[str, str, str]],
    guard: Callable[[datetime], Operation[None]],
    reject: Callable[[int, UnorderedValueError], None],
) -> Operation[list[int]]:
    """The batch of `facts` (`write_facts`; the ids of those it kept: one it cannot place is
    dropped and given to `reject`, the rest planned again under the same locks and embeddings), or
    for none the locks of the facts changed (`also`); `guard` runs once the locks are held."""
    if facts:
        return (
            yield from write_facts(
                info, scope, facts, None, standalone=True, also_lock=also, guard=guard, unordered=reject
            )
        )
    yield from guard((yield from lock_facts(info, scope, [], also)).learned_at)
    return []


def _refused(checked: CheckedExtraction, rejected: list[RejectedOperation]) -> ExtractionError:
    """`remember`'s error for an answer with an operation the write rules rejected (`on_invalid="raise"`),
    worded as `check_answer`'s."""
    reasons = tuple(f"operation {r.index} ({r.op}): {r.reason}" for r in rejected)
    return ExtractionError(f"{len(rejected)} of {checked.proposed} operations failed the write rules", rejected=reasons)


def fact_sources(info: StoreInfo, scope: Scope, fact_id: int) -> Operation[list[FactSource]]:
    """The messages fact `fact_id` was learned from, oldest first."""
    rows = yield from execute_as(
        sql_sources.SourceRow,
        sql_sources.fact_sources(info.schema),
        {"dataset": scope.dataset, "project": scope.project, "id": fact_id},
    )
    return [FactSource(**dataclasses.asdict(row)) for row in rows]

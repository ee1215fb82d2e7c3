"""Writing facts: entities, facts, links and the scope's counts in one transaction (operations)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from memsoda_core.embedders.protocol import Vector, check_vectors
from memsoda_core.errors import (
    EmbeddingError,
    StoreError,
    UnorderedValueError,
    ValidationError,
)
from memsoda_core.layouts import layout_of
from memsoda_core.models import FactInput
from memsoda_core.ops.maintenance import ensure_tenant_indexes, refresh_statistics, statistics_stale
from memsoda_core.runner.steps import Operation, embed_documents, execute, execute_as, read_aside, wrote
from memsoda_core.scope_growth import Growth, LatestFact
from memsoda_core.store.info import StoreInfo
from memsoda_core.validation import (
    Scope,
    ValidFact,
    validate_facts,
)
from memsoda_core.writing import inserts
from memsoda_core.writing import reconcile_statements as sql_reconcile
from memsoda_core.writing import statements as sql_write
from memsoda_core.writing.counts import CountDeltas, bump_counts, entity_rows
from memsoda_core.writing.decisions import Plan, Ref, plan_batch
from memsoda_core.writing.insert_rows import insert_rows, insert_rows_as

ENTITY_ROUNDS = 3
"""Rounds of `inserts.ENTITIES` a write may take: a second one is needed only when
another writer created and committed one of its new entities meanwhile (or a `forget` removed one
that another writer had created)."""


def write_facts(
    info: StoreInfo,
    scope: Scope,
    facts: Sequence[ValidFact],
    vectors: Sequence[Vector] | None,
    *,
    standalone: bool,
    also_lock: Sequence[tuple[str, str, str]] = (),
    guard: Callable[[datetime], Operation[None]] | None = None,
    learned: datetime | None = None,
    counts: CountDeltas | None = None,
    item_owned: bool = False,
    unordered: Callable[[int, UnorderedValueError], None] | None = None,
) -> Operation[list[int]]:
    """One whole write of a batch. One embedding call for the batch (the facts, unless their
    `vectors` are given, and the names of entities the scope does not have yet), then, under the
    locks of the batch's relations (and `also_lock`'s; `guard` runs once they are held, given the
    time memory learns the write, `writing.reconcile_statements.Locked`), the reconciliation with
    the facts they hold (`writing.decisions`), the inserts of entities the scope lacks, facts and
    links, the ends and merges it decided, and last what the new facts add to the counts
    (`bump_counts`); returns each input's fact id. Given `counts` (an import's batches, which bump
    once after them all), what they add is added to it instead.

    `standalone`: a write of its own, not one batch of an import. Then, as the operation's first
    step, which entities exist is read on a borrowed connection (`ReadAside`), so neither a
    connection nor a transaction is held while a model embeds; inside the transaction they are
    locked FOR KEY SHARE, a name a concurrent `forget` deleted in between is embedded there (a
    second, rare call), and a repeated fact counts in `times_seen`. An import's batches run in its
    open transaction, which holds their locks already: entities are read and locked after the
    reconciliation, the embedding runs inside that transaction, and repeats do not count (an import
    restores, it does not observe), and `learned` is the time its locks were taken.

    `item_owned`: the write of an item's text (`items.operations`): the facts it creates are items'
    own (`store.schema._v13`); any other write of a stored fact makes it no longer so.

    `unordered`: given, an input whose value its relation's history cannot order
    (`UnorderedValueError`, found by the plan before anything is written) is dropped, reported to
    it (its position in `facts`, the error; it may raise to end the write) and the rest planned
    again under the same locks, with the same embeddings (`_plan_placed`); the ids returned are
    then those of the inputs kept, in order. Without it the error is raised."""
    if not facts:
        return []
    base = {"dataset": scope.dataset, "project": scope.project}
    all_names = entity_rows(facts).names
    known: dict[str, int] = {}
    embedded: list[Vector] = []
    texts = [] if vectors is not None else [fact.embedding_text for fact in facts]
    relations_locked: Sequence[int] = range(1, len(facts) + 1)  # an import locked every relation of its facts
    if standalone:
        found = yield from read_aside(sql_write.known_entities(info.schema), {**base, "names": all_names})
        known = {name: int(eid) for name, eid in found or ()}
        new_names = [name for name in all_names if name not in known]
        embedded = (yield from embed_documents(texts + new_names)) if texts or new_names else []
        new_vectors = dict(zip(new_names, embedded[len(texts) :], strict=True))
        held = yield from lock_facts(info, scope, facts, also_lock)
        learned, relations_locked = held.learned_at, held.relations_locked
    if learned is None:
        raise ValueError("a batch of an import needs the time its locks were taken (learned)")
    if guard is not None:
        yield from guard(learned)
    plan, learned, kept = yield from _plan_placed(
        info,
        scope,
        facts,
        learned=learned,
        count_repeats=standalone,
        relations_locked=relations_locked,
        unordered=unordered,
    )
    if not kept:
        return []
    rows = plan.inserts
    entities = entity_rows(rows)
    names = entities.names
    entity_ids: dict[str, int] = {}
    given = list(vectors) if vectors is not None else None
    if standalone:
        fact_vectors = [given[kept[i]] if given is not None else embedded[kept[i]] for i in plan.sources]
        needed = sorted(set(known) & set(names))
        if needed:
            locked = yield from execute(sql_write.known_entities(info.schema, lock=True), {**base, "names": needed})
            entity_ids = {name: int(eid) for name, eid in locked}
            gone = sorted(set(needed) - set(entity_ids))
            if gone:
                new_vectors.update(zip(gone, (yield from embed_documents(gone)), strict=True))
    elif rows:
        found = yield from execute(sql_write.known_entities(info.schema, lock=True), {**base, "names": names})
        entity_ids = {name: int(eid) for name, eid in found}
        new_names = [name for name in names if name not in entity_ids]
        texts = [] if vectors is not None else [fact.embedding_text for fact in rows]
        embedded = (yield from embed_documents(texts + new_names)) if texts or new_names else []
        fact_vectors = [given[kept[i]] for i in plan.sources] if given is not None else embedded[: len(texts)]
        new_vectors = dict(zip(new_names, embedded[len(texts) :], strict=True))
    inserted = Inserted(ids=[], deltas=CountDeltas(), latest=())
    if rows:
        inserted = yield from _insert_new(
            info, scope, rows, plan.seen, fact_vectors, entity_ids, new_vectors, learned, item_owned
        )
    fact_ids, deltas = inserted.ids, inserted.deltas
    if rows:
        deltas.types = dict(zip(entities.names, entities.types, strict=True))
        deltas.touches = Counter(dict(zip(entities.names, entities.touches, strict=True)))
    yield from apply_plan(info, scope, plan, fact_ids, learned, item_owned=item_owned)
    if counts is None:
        facts_after = yield from bump_counts(info, scope, deltas)
        restated = tuple((fact_id, merge.repeats) for fact_id, merge in sorted(plan.merges.items()) if merge.repeats)
        yield from wrote(Growth(facts=facts_after, added=inserted.latest, restated=restated))
    else:
        counts.add(deltas)
    return [fact_ids[ref.number] if ref.kind == "new" else ref.number for ref in plan.resolved]


def _plan_placed(
    info: StoreInfo,
    scope: Scope,
    facts: Sequence[ValidFact],
    *,
    learned: datetime,
    count_repeats: bool,
    relations_locked: Sequence[int],
    unordered: Callable[[int, UnorderedValueError], None] | None,
) -> Operation[tuple[Plan, datetime, list[int]]]:
    """The plan of `facts` (`reconcile`) and when memory learns it; with `unordered`, each input
    the plan cannot place is dropped and reported to it, and the rest planned again (the plan has
    written nothing). Returns too the positions in `facts` of the inputs planned (none: all were
    dropped, and the plan is empty)."""
    kept = list(range(len(facts)))
    locked = set(relations_locked)  # 1-based positions in `facts`
    while True:
        batch = [facts[i] for i in kept]
        if not batch:
            return Plan(), learned, kept
        try:
            plan, learned = yield from reconcile(
                info,
                scope,
                batch,
                learned=learned,
                count_repeats=count_repeats,
                relations_locked=[n for n, i in enumerate(kept, start=1) if i + 1 in locked],
            )
            return plan, learned, kept
        except UnorderedValueError as exc:
            if unordered is None:
                raise
            unordered(kept.pop(exc.position), exc)


def hold_dataset(info: StoreInfo, scope: Scope) -> Operation[None]:
    """Before a write's first statement: what its layout holds of the dataset (`Layout.write_hold`:
    a partitioned store's move lock, shared). Taken alone and first, so a writer waiting for it
    holds no other lock a move could wait for."""
    hold = layout_of(info).write_hold(info.schema)
    if hold is not None:
        yield from execute(hold, {"dataset": scope.dataset})


def lock_facts(
    info: StoreInfo,
    scope: Scope,
    facts: Sequence[ValidFact],
    also: Sequence[tuple[str, str, str]] = (),
    *,
    relations: bool = False,
) -> Operation[sql_reconcile.Locked]:
    """The advisory locks of `facts` (`writing.reconcile_statements.lock_relations`; with
    `relations`, their relations' too, whatever the registry says) and of the stored facts `also`
    (subject, predicate, object: their value and relation both); returns the time memory learns
    what the write holds and which relations it locked (`writing.reconcile_statements.Locked`).
    First what the layout holds of the dataset (`hold_dataset`), so no tenant move runs meanwhile."""
    yield from hold_dataset(info, scope)
    (locked,) = yield from execute_as(
        sql_reconcile.Locked,
        sql_reconcile.lock_relations(info.schema),
        {
            "dataset": scope.dataset,
            "project": scope.project,
            "schema": info.schema,
            **{
                param: values + [key[i] for key in also]
                for i, (param, values) in enumerate(inserts.fact_arrays(facts, sql_reconcile.KEY_FIELDS).items())
            },
            "singles": [relations or f.single_valued for f in facts] + [True for _ in also],
        },
    )
    return locked


def reconcile(
    info: StoreInfo,
    scope: Scope,
    facts: Sequence[ValidFact],
    *,
    learned: datetime,
    count_repeats: bool,
    relations_locked: Sequence[int] = (),
) -> Operation[tuple[Plan, datetime]]:
    """The `Plan` of `facts` against the facts their relations hold (their locks are held; of the
    inputs `relations_locked`, their relations' too), and when memory learns it (`learned`). An
    input read as single-valued whose relation is not locked (declared so while the write waited
    for its locks: `reconcile_statements.late_relations`) has its relation locked now and is read
    again, learned once that lock is held (after the writers it waited for); taken out of the
    locks' order, that lock may close a wait cycle, whose victim is run again."""
    params = {
        "dataset": scope.dataset,
        "project": scope.project,
        **inserts.fact_arrays(facts, sql_reconcile.MET_FIELDS),
        "singles": [f.single_valued for f in facts],
        "learned_at": learned,
    }
    met = yield from execute_as(sql_reconcile.Met, sql_reconcile.met_facts(info.schema), params)
    late = sql_reconcile.late_relations(met, relations_locked)
    if late:
        relocked = yield from lock_facts(info, scope, [facts[i - 1] for i in late], relations=True)
        learned = relocked.learned_at
        params["learned_at"] = learned
        met = yield from execute_as(sql_reconcile.Met, sql_reconcile.met_facts(info.schema), params)
    return plan_batch(facts, met, learned=learned, count_repeats=count_repeats), learned


def apply_plan(
    info: StoreInfo, scope: Scope, plan: Plan, fact_ids: Sequence[int], learned: datetime, *, item_owned: bool = False
) -> Operation[None]:
    """The ends and merges of `plan` on stored facts, once its new facts have `fact_ids`; memory
    learns at `learned` that the stored facts it ends have ended (`expired_at`); a merge by a
    write that is not an item's (`item_owned` False) makes the fact no longer items' own."""
    base = {"dataset": scope.dataset, "project": scope.project}

    def fact_id(ref: Ref) -> int:
        return fact_ids[ref.number] if ref.kind == "new" else ref.number

    if plan.ends:
        yield from execute(
            sql_reconcile.end_facts(info.schema),
            {
                **base,
                "ids": [fact_id(end.fact) for end in plan.ends],
                "ats": [end.at for end in plan.ends],
                "bys": [None if end.by is None else fact_id(end.by) for end in plan.ends],
                "expireds": [learned if end.fact.kind == "old" and not end.ended_before else None for end in plan.ends],
            },
        )
    if plan.merges:
        ids = sorted(plan.merges)
        merges = [plan.merges[i] for i in ids]
        yield from execute(
            sql_reconcile.merge_facts(info.schema),
            {
                **base,
                "ids": ids,
                "confidences": [m.confidence for m in merges],
                "valid_ats": [m.valid_at for m in merges],
                "quotes": [m.quote for m in merges],
                "repeats": [m.repeats for m in merges],
                "item_owned": item_owned,
            },
        )


class Inserted(NamedTuple):
    """What `_insert_new` inserted: the facts' ids (ascending, in input order), what they add to
    the scope's counts, and the facts as the scope's statistics count them."""

    ids: list[int]
    deltas: CountDeltas
    latest: tuple[LatestFact, ...]


def _insert_new(
    info: StoreInfo,
    scope: Scope,
    facts: Sequence[ValidFact],
    seen: Sequence[int],
    fact_vectors: Sequence[Vector],
    entity_ids: dict[str, int],
    new_vectors: dict[str, Vector],
    learned: datetime,
    item_owned: bool,
) -> Operation[Inserted]:
    """Insert the entities `facts` need that `entity_ids` lacks, then the facts (learned at
    `learned`; items' own or not) and their links."""
    base = {"dataset": scope.dataset, "project": scope.project}
    entities = entity_rows(facts)
    names = entities.names
    type_of = dict(zip(names, entities.types, strict=True))
    missing = [name for name in names if name not in entity_ids]
    for _ in range(ENTITY_ROUNDS):  # again when another writer created one of them meanwhile
        if not missing:
            break
        rows = yield from insert_rows(
            info,
            inserts.ENTITIES,
            {
                **base,
                "names": missing,
                "types": [type_of[name] for name in missing],
                "embeddings": [new_vectors[name] for name in missing],
            },
        )
        entity_ids.update((name, int(eid)) for name, eid in rows)
        others = [name for name in missing if name not in entity_ids]
        if others:  # created by another writer meanwhile: read and locked (`inserts.ENTITIES` skips them)
            rows = yield from execute(sql_write.known_entities(info.schema, lock=True), {**base, "names": others})
            entity_ids.update((name, int(eid)) for name, eid in rows)
        missing = [name for name in missing if name not in entity_ids]
    if missing:
        raise StoreError("entities of this write kept changing under concurrent writers; try the write again")
    new = [
        inserts.NewFact(
            fact=f,
            subject_id=entity_ids[f.subject],
            object_id=entity_ids[f.object] if f.object_is_entity else None,
            anchor_id=entity_ids[f.anchor],
            seen=times,
            embedding=vector,
        )
        for f, times, vector in zip(facts, seen, fact_vectors, strict=True)
    ]
    inserted = yield from insert_rows_as(
        sql_write.InsertedFact,
        info,
        inserts.FACTS,
        {**base, **inserts.FACTS.params(new), "learned_at": learned, "item_owned": item_owned},
    )
    ordered = sorted(inserted, key=lambda row: int(row.id))  # the input's order
    fact_ids = [int(row.id) for row in ordered]
    lexeme_counts = Counter(lexeme for row in inserted for lexeme in row.lexemes)
    links = [
        (fact_id, entity_ids[name], roles)
        for fact_id, fact in zip(fact_ids, facts, strict=True)
        for name, roles in fact.entity_roles().items()
    ]
    yield from insert_rows(
        info,
        inserts.FACT_ENTITIES,
        {
            **base,
            "fact_ids": [link[0] for link in links],
            "entity_ids": [link[1] for link in links],
            "roles": [link[2] for link in links],
        },
    )
    table = layout_of(info).statistics_table()
    if table is not None:
        (pages,) = yield from execute_as(
            sql_write.TablePages, sql_write.facts_pages(), {"schema": info.schema, "table": table}
        )
        if statistics_stale(int(pages.analyzed), int(pages.current)):
            yield from refresh_statistics(info)
    latest = tuple(
        LatestFact(id=fact_id, subject_id=row.subject_id, lexemes=len(fact.lexemes), times_seen=row.seen)
        for fact_id, fact, row in zip(fact_ids, ordered, new, strict=True)
    )
    return Inserted(ids=fact_ids, deltas=CountDeltas(lexemes=lexeme_counts, facts=len(fact_ids)), latest=latest)


def add_facts(
    info: StoreInfo,
    scope: Scope,
    facts: Sequence[FactInput | Mapping[str, Any]],
    *,
    vectors: Sequence[Sequence[float]] | np.ndarray[Any, Any] | None = None,
) -> Operation[list[int]]:
    """Validate the whole batch (and `vectors`, one per fact, which replace embedding the facts'
    texts), then write it in one transaction, reconciled with the facts the scope holds
    (`writing.decisions`). Returns ids in input order: a fact equal to a live one gets its id."""
    valid = validate_facts(facts)
    given = None
    if vectors is not None:
        try:
            given = check_vectors(vectors, count=len(valid), dimensions=info.dimensions, source="got", items="facts")
        except EmbeddingError as exc:
            raise ValidationError(f"vectors are not usable: {exc}") from None
    ids = yield from write_facts(info, scope, valid, given, standalone=True)
    yield from ensure_tenant_indexes(info, scope)
    return ids

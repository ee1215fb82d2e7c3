"""Pure parts of recall: statement parameters, row decoding, explanations, fusion into a result."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, NamedTuple

import numpy as np

from memsoda_core.models import Entity, Episode, ScoredFact, SignalHit
from memsoda_core.options import GENERAL_OPTIONS, RecallOptions
from memsoda_core.recall.fusion import rrf_scores
from memsoda_core.recall.hits import HitRow
from memsoda_core.recall.render import anchor_entities, group_by_anchor, render
from memsoda_core.recall.signals import REGISTRY, RecallRequest, SignalSpec, by_name, shared_ctes, signal_order
from memsoda_core.recall.signals import plan_for as plan_for  # the registry's, beside statement_params
from memsoda_core.store.fact_columns import decode_fact
from memsoda_core.store.params import BigintArray

_SHARED = shared_ctes(REGISTRY)


def statement_params(request: RecallRequest, registry: Sequence[SignalSpec] = REGISTRY) -> dict[str, Any]:
    """Every bound value of the recall statements (those of every signal, whichever run: each
    derives its own from the request), and of the episodes' read. Options still left to the memory
    (`recall.adaptive` did not choose: a caller outside a recall) take the general values."""
    options = request.options.filled(GENERAL_OPTIONS)
    if options is not request.options:
        request = replace(request, options=options)
    scope = request.scope
    params: dict[str, Any] = {
        "dataset": scope.dataset,
        "project": scope.project,
        "at": request.at,
        "min_confidence": request.options.min_confidence,
        "rrf_k": request.options.rrf_k,
        "episodes_k": request.options.episodes_k,
    }
    if request.known_at is not None:  # only the statements of a `RecallPlan.known` take it
        params["known_at"] = request.known_at
    if request.within is not None:  # only those of a `RecallPlan.within`
        params["within"] = BigintArray(request.within)
    for shared in _SHARED if registry is REGISTRY else shared_ctes(registry):
        params.update(shared.params(request))
    for spec in registry:
        params.update(spec.params(request))
    if request.embedding is not None:
        params["qvec"] = np.asarray(request.embedding, dtype=np.float32)
    return params


def vector_similarities(rows: Iterable[HitRow]) -> list[float]:
    """The query's similarity to each fact the vector signal found (what relevance is judged by)."""
    return [row.similarity for row in rows if row.signal == "vector" and row.similarity is not None]


def explain(hit: HitRow, registry: Sequence[SignalSpec] = REGISTRY) -> SignalHit:
    """Why a signal picked a fact, in words a person can check (its spec's `explain`)."""
    return _explained(hit, by_name(registry)[hit.signal])


def _explained(hit: HitRow, spec: SignalSpec) -> SignalHit:
    similarity = None if hit.similarity is None else round(float(hit.similarity), 4)
    return SignalHit(signal=hit.signal, rank=int(hit.rank), reason=spec.explain(hit), similarity=similarity)


_SPECS = by_name(REGISTRY)
_ORDER = signal_order(REGISTRY)


class Kept(NamedTuple):
    """A fact fusion kept, before its columns are read: its id, RRF score and signal hits (a named
    tuple, as `HitRow`: a recall makes one per kept fact)."""

    fact_id: int
    score: float
    hits: tuple[SignalHit, ...]


def fuse_hits(
    rows: Iterable[HitRow],
    options: RecallOptions,
    registry: Sequence[SignalSpec] = REGISTRY,
    exclude: frozenset[int] = frozenset(),
) -> list[Kept]:
    """Hit rows of the recall statements -> the top `facts_in_context` fact ids by RRF, best first
    (ties: best single rank, then the more recent valid_at, then the larger id); each kept fact's
    hits explained in registry order. Facts in `exclude` (already in the prompt: a profile) are
    left out before the cut, keeping their ranks in each signal, so the others score as without it."""
    found: dict[int, list[HitRow]] = {}
    ranks: dict[int, dict[str, int]] = {}
    recency: dict[int, float] = {}
    for row in rows:
        fact_id = row.fact_id
        if fact_id in exclude:
            continue
        hits = found.get(fact_id)
        if hits is None:
            found[fact_id] = [row]
            ranks[fact_id] = {row.signal: row.rank}
            recency[fact_id] = row.valid_at_us
        else:
            hits.append(row)
            ranks[fact_id][row.signal] = row.rank
    fused = rrf_scores(ranks, k=options.rrf_k, tiebreak=recency, limit=options.facts_in_context)
    specs, order = (_SPECS, _ORDER) if registry is REGISTRY else (by_name(registry), signal_order(registry))
    kept: list[Kept] = []
    for fact_id, score in fused:  # explained only for the facts kept
        hits = found[fact_id]
        if len(hits) > 1:
            hits.sort(key=lambda hit: order[hit.signal])
        explained = tuple([_explained(hit, specs[hit.signal]) for hit in hits])
        kept.append(Kept(fact_id=int(fact_id), score=round(score, 9), hits=explained))
    return kept


def scored_facts(
    kept: Sequence[Kept], fact_rows: Iterable[Sequence[Any]], known_at: datetime | None = None
) -> list[ScoredFact]:
    """Attach the facts' columns to what fusion kept, in fusion's order; with `known_at`, each
    fact as memory knew it then (`Fact.as_known_at`). A fact deleted between the two reads (a
    concurrent `forget`) is left out."""
    facts = {fact.id: fact for fact in map(decode_fact, fact_rows)}
    if known_at is not None:
        facts = {fact_id: fact.as_known_at(known_at) for fact_id, fact in facts.items()}
    return [
        ScoredFact(fact=facts[entry.fact_id], score=entry.score, hits=entry.hits)
        for entry in kept
        if entry.fact_id in facts
    ]


def decode_episodes(rows: Sequence[Sequence[Any]]) -> list[Episode]:
    return [
        Episode(
            id=int(eid),
            thread_id=thread,
            text=text,
            created_at=created,
            similarity=None if sim is None else round(float(sim), 4),
        )
        for eid, thread, text, created, sim in rows
    ]


def render_context(scored: Sequence[ScoredFact], episodes: Sequence[Episode] = ()) -> tuple[str, list[Entity]]:
    """The context block of a recall's facts (grouped by anchor) and episodes, and the anchor
    entities it lists: what the operation packages, once, into its `RecallResult`."""
    groups = group_by_anchor(scored)
    entities = anchor_entities(groups)
    return render(groups, entities, episodes), entities

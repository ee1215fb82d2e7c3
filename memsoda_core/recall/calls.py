"""The recall operation builders of a memory: `recall`, `profile`, and the recalls that `remember`
and an item search make. Arguments are checked here, eagerly, so bad input raises at the call."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from memsoda_core.checks import check_int, check_number
from memsoda_core.embedders import check_vectors
from memsoda_core.embedders.protocol import Vector
from memsoda_core.errors import ConfigurationError, EmbeddingError, ValidationError
from memsoda_core.learning.call import Related, RememberCall
from memsoda_core.memory_context import MemoryContext
from memsoda_core.models import IncludeOption, RecallResult
from memsoda_core.ops.reading import single_valued_predicates
from memsoda_core.option_checks import check_options_type
from memsoda_core.options import RecallOptions
from memsoda_core.recall.operation import recall as recall_operation
from memsoda_core.recall.profile import MAX_FACTS as MAX_PROFILE_FACTS
from memsoda_core.recall.profile import Profile
from memsoda_core.recall.profile import profile as standing_profile
from memsoda_core.recall.signals.conversation import check_conversation
from memsoda_core.runner.steps import Operation
from memsoda_core.validation import Scope, check_entity_name, check_query, check_scope, check_times, integer

INCLUDE_OPTIONS: frozenset[str] = frozenset({"raw", "episodes", "synthesis"})


def recall_op(
    context: MemoryContext,
    query: str | None,
    *,
    dataset: str,
    project: str,
    include: Iterable[str],
    query_embedding: Sequence[float] | Vector | None,
    as_of: Any,
    options: RecallOptions | None,
    overrides: dict[str, Any],
    known_at: Any = None,
    conversation: Any = None,
    exclude: Any = (),
    within: Sequence[int] | None = None,
) -> Operation[RecallResult]:
    scope = check_scope(dataset, project)
    check_options_type(options, RecallOptions, "recall")
    text = check_query(query)
    turns = check_conversation(conversation)
    excluded = check_fact_ids(exclude, "exclude")
    chosen = (options or context.options).with_overrides({k: v for k, v in overrides.items() if v is not None})
    if isinstance(include, str):
        include = (include,)
    wanted = frozenset(include)
    unknown = sorted(wanted - INCLUDE_OPTIONS)
    if unknown:
        raise ValidationError(f"unknown include option(s) {unknown}; use any of {sorted(INCLUDE_OPTIONS)}")
    if "synthesis" in wanted and context.synthesizer is None:
        raise ConfigurationError("include=['synthesis'] needs Memory.open(synthesizer=...)")
    vector = None
    if query_embedding is not None:
        try:
            vector = check_vectors(
                [query_embedding], count=1, dimensions=context.info.dimensions, source="got", items="queries"
            )[0]
        except EmbeddingError as exc:
            raise ValidationError(f"query_embedding is not usable: {exc}") from None
    times = check_times(as_of, known_at)
    typed: frozenset[IncludeOption] = wanted  # type: ignore[assignment]
    return recall_operation(
        context.info,
        scope,
        text,
        options=chosen,
        include=typed,
        query_embedding=vector,
        as_of=times.as_of,
        now=context.now(),
        scope_sizes=context.scope_sizes,
        scope_stats=context.scope_stats,
        calibrations=context.calibrations,
        worker_reads=context.worker_reads,
        known_at=times.known_at,
        conversation=turns,
        exclude=excluded,
        within=within,
    )


def top_facts_op(
    context: MemoryContext,
    scope: Scope,
    query: str | None,
    keep: int,
    *,
    query_embedding: Vector | None = None,
    within: Sequence[int] | None = None,
) -> Operation[RecallResult]:
    """A recall with the memory's options but `keep` facts kept (and the query's embedding when
    the caller has it; of the facts `within` only, when given: `RecallRequest.within`): what
    `remember` shows its extractor and what an item search maps back to items."""
    return recall_op(
        context,
        query,
        dataset=scope.dataset,
        project=scope.project,
        include=(),
        query_embedding=query_embedding,
        as_of=None,
        options=None,
        overrides={"facts_in_context": keep},
        within=within,
    )


def related_op(context: MemoryContext, call: RememberCall) -> Operation[Related]:
    """The live facts recall finds for a `remember` window (none when `related` is 0), and the
    scope's single-valued predicates."""
    found = RecallResult(context="", facts=(), entities=())
    if call.related:
        found = yield from top_facts_op(context, call.scope, call.query(), call.related)
    predicates = yield from single_valued_predicates(context.info, call.scope)
    return Related(found=found, single_valued=frozenset(predicates))


def profile_op(
    context: MemoryContext, dataset: str, project: str, subject: Any, max_facts: Any, min_confidence: Any
) -> Operation[Profile]:
    scope = check_scope(dataset, project)
    name = check_entity_name(subject)
    check_int(max_facts, "max_facts", low=1, high=MAX_PROFILE_FACTS)
    floor = context.options.min_confidence if min_confidence is None else min_confidence
    check_number(floor, "min_confidence", low=0.0, high=1.0)
    return standing_profile(
        context.info, scope, subject=name, max_facts=max_facts, min_confidence=float(floor), at=context.now()
    )


def check_fact_ids(ids: Any, name: str) -> frozenset[int]:
    """A collection of fact ids (ints), as a frozenset."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise ValidationError(f"{name} must be a collection of fact ids (ints), got {type(ids).__name__}")
    checked = [integer(i) for i in ids]
    if None in checked:
        raise ValidationError(f"{name} must hold fact ids (ints) only")
    return frozenset(i for i in checked if i is not None)

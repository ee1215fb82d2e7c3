"""The fact operation builders of a memory: writes, reads, single-valued predicates, stats, export
and import. Arguments are checked here, eagerly, so bad input raises at the call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from memsoda_core import ops
from memsoda_core.checks import check_bool, check_int
from memsoda_core.errors import ValidationError
from memsoda_core.memory_context import MemoryContext
from memsoda_core.models import EpisodeInput, Fact, FactInput, FactPage
from memsoda_core.ops.reading import check_list_args, check_predicates
from memsoda_core.ops.transfer import ImportCounts, ParsedImport
from memsoda_core.runner.steps import Operation
from memsoda_core.validation import Scope, check_optional_scope, check_scope, check_times


def add_facts_op(
    context: MemoryContext,
    facts: Sequence[FactInput | Mapping[str, Any]],
    dataset: str,
    project: str,
    vectors: Sequence[Sequence[float]] | np.ndarray[Any, Any] | None,
) -> Operation[list[int]]:
    scope = check_scope(dataset, project)
    return context.growing(scope, ops.add_facts(context.info, scope, facts, vectors=vectors))


def invalidate_op(context: MemoryContext, fact_id: int, dataset: str, project: str, at: Any) -> Operation[bool]:
    return ops.invalidate(context.info, check_scope(dataset, project), fact_id, at=at)


def supersede_op(
    context: MemoryContext, fact_id: int, new_fact: FactInput | Mapping[str, Any], dataset: str, project: str
) -> Operation[int]:
    scope = check_scope(dataset, project)
    return context.growing(scope, ops.supersede(context.info, scope, fact_id, new_fact))


def add_episodes_op(
    context: MemoryContext, episodes: Sequence[EpisodeInput | Mapping[str, Any]], dataset: str, project: str
) -> Operation[list[int]]:
    return ops.add_episodes(context.info, check_scope(dataset, project), episodes, now=context.now())


def get_fact_op(context: MemoryContext, fact_id: int, dataset: str, project: str) -> Operation[Fact]:
    return ops.get_fact(context.info, check_scope(dataset, project), fact_id)


def list_facts_op(
    context: MemoryContext, dataset: str, project: str, as_of: Any, known_at: Any, **filters: Any
) -> Operation[FactPage]:
    scope = check_scope(dataset, project)
    checked = check_list_args(**filters)
    times = check_times(as_of, known_at)
    return ops.list_facts(context.info, scope, checked, times.as_of or context.now(), times.known_at)


def history_op(context: MemoryContext, fact_id: int, dataset: str, project: str) -> Operation[list[Fact]]:
    return ops.history(context.info, check_scope(dataset, project), fact_id)


def set_single_valued_op(
    context: MemoryContext, predicates: Sequence[str], dataset: str, project: str, single_valued: Any
) -> Operation[list[str]]:
    scope = check_scope(dataset, project)
    flag = check_bool(single_valued, "single_valued")
    return ops.set_single_valued(context.info, scope, check_predicates(predicates), flag)


def single_valued_op(context: MemoryContext, dataset: str, project: str) -> Operation[list[str]]:
    return ops.single_valued_predicates(context.info, check_scope(dataset, project))


def stats_op(context: MemoryContext, dataset: str | None, project: str | None) -> Operation[list[dict[str, Any]]]:
    return ops.stats(context.info, *check_optional_scope(dataset, project))


def export_op(context: MemoryContext, dataset: str, project: str) -> Operation[int]:
    return ops.export_jsonl(context.info, check_scope(dataset, project))


IMPORT_ON_ERROR = ("raise", "skip")


def check_import_args(on_error: str, batch_size: int, rebuild_index: bool | None) -> None:
    check_bool(rebuild_index, "rebuild_index", or_none=True)
    if on_error not in IMPORT_ON_ERROR:
        raise ValidationError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    check_int(batch_size, "batch_size", low=1, high=10_000)


def import_op(
    context: MemoryContext,
    scope: Scope,
    parsed: ParsedImport,
    batch_size: int,
    rebuild_index: bool | None,
    on_error: str = "raise",
) -> Operation[ImportCounts]:
    return context.resizing(
        scope,
        ops.import_records(
            context.info,
            scope,
            parsed.facts,
            parsed.episodes,
            batch_size=batch_size,
            rebuild_index=rebuild_index,
            items=parsed.items,
            now=context.now(),
            fact_numbers=parsed.fact_numbers,
            on_error=on_error,
        ),
    )


def restore_indexes_op(context: MemoryContext, scope: Scope) -> Operation[list[str]]:
    """After a failed import: build the scope's indexes it may have set aside."""
    return ops.ensure_tenant_indexes(context.info, scope)

"""The forgetting operation builders of a memory: forget, forget_source, retention rules and their
purge, maintain (with the repair of overlapping single-valued values). Arguments are checked here,
eagerly, so bad input raises at the call."""

from __future__ import annotations

from typing import Any

from memsoda_core.checks import check_bool
from memsoda_core.forgetting import retention as retention_ops
from memsoda_core.forgetting.operations import forget as forget_scope
from memsoda_core.forgetting.operations import forget_source
from memsoda_core.forgetting.rules import (
    ForgetReport,
    MaintainReport,
    RetentionReport,
    RetentionRule,
    check_retention,
    check_source,
)
from memsoda_core.memory_context import MemoryContext
from memsoda_core.ops.maintenance import maintain
from memsoda_core.ops.overlaps import repair_overlaps
from memsoda_core.runner.steps import Operation
from memsoda_core.validation import Scope, check_entity_name, check_scope, parse_time


def forget_op(context: MemoryContext, dataset: str, project: str, entity: str | None) -> Operation[int]:
    scope = check_scope(dataset, project)
    name = None if entity is None else check_entity_name(entity)
    return context.resizing(scope, forget_scope(context.info, scope, name))


def forget_source_op(
    context: MemoryContext, dataset: str, project: str, thread_id: Any, message_ids: Any
) -> Operation[ForgetReport]:
    scope = check_scope(dataset, project)
    source = check_source(thread_id, message_ids)
    return context.resizing(scope, forget_source(context.info, scope, source))


def maintain_op(context: MemoryContext, retention: Any = True) -> Operation[MaintainReport]:
    return _maintaining(context, check_bool(retention, "retention"))


def _maintaining(context: MemoryContext, retention: bool) -> Operation[MaintainReport]:
    """Retention's purge, the repair of overlapping single-valued values, then statistics and
    indexes (their builds commit what came before)."""
    purged = (yield from apply_retention_op(context, None)) if retention else None
    repaired = yield from repair_overlaps(context.info)
    built = yield from maintain(context.info)
    return MaintainReport(
        retention=purged, overlaps_repaired=repaired.ended, indexes=tuple(built), overlaps_left=repaired.left
    )


def set_retention_op(
    context: MemoryContext, dataset: str, project: str, max_age: Any, purge: Any, predicate: Any
) -> Operation[list[RetentionRule]]:
    scope = check_scope(dataset, project)
    age, chosen, folded = check_retention(max_age, purge, predicate)
    return retention_ops.set_retention(context.info, scope, max_age=age, purge=chosen, predicate=folded)


def retention_op(context: MemoryContext, dataset: str, project: str) -> Operation[list[RetentionRule]]:
    return retention_ops.retention_rules(context.info, check_scope(dataset, project))


def apply_retention_op(context: MemoryContext, at: Any) -> Operation[RetentionReport]:
    return _purging(context, retention_ops.apply_retention(context.info, parse_time(at, "at")))


def _purging(context: MemoryContext, op: Operation[RetentionReport]) -> Operation[RetentionReport]:
    """`op`, whose purged scopes' remembered sizes are dropped once it is done."""
    report = yield from op
    for dataset, project, _ in report.scopes:
        context.forget_scope(Scope(dataset=dataset, project=project))
    return report

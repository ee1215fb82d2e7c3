"""Repairing the facts of a single-valued relation that overlap in valid time (operations).

A store written before the single-valued history fix (CHANGELOG, "h-write") may hold two facts of
a relation its scope declares single-valued that are both true at some valid time; a write of the
relation repairs its history, and `maintain` repairs every relation, by the write path's placement
(`writing.decisions`): a fact ends where the next fact of the relation starts, if that is before
its own end, superseded by that one (memory learning the end now; a fact that had ended keeps when
it first learned that). An equal value (case folded) is such a next fact too: two runs of one
value at once would show it twice, so the earlier run ends where the later starts.

Left as they are: facts starting at the same instant as another of their relation. They have no
order (a write refuses to make them, `writing.decisions.UnorderedValueError`), and neither can end
at its own start (`invalid_at > valid_at`), so repairing them would delete what memory was told;
`maintain` counts them (`MaintainReport.overlaps_left`) and logs their ids, for the application
to end or forget one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from psycopg import sql

from memsoda_core.runner.steps import Operation, commit, execute, execute_as
from memsoda_core.store.info import StoreInfo
from memsoda_core.store.statements import tenant_statement
from memsoda_core.validation import Scope
from memsoda_core.writing.operation import lock_facts

logger = logging.getLogger(__name__)


def single_valued_scopes(schema: str) -> sql.Composed:
    """(dataset, project) of every scope that declares a single-valued predicate."""
    return sql.SQL("SELECT DISTINCT dataset, project FROM {s}.single_valued ORDER BY dataset, project").format(
        s=sql.Identifier(schema)
    )


@dataclass(frozen=True)
class Relation:
    """A row of `overlapping_relations`: a relation (subject, case-folded predicate) and one of its
    values, the key its locks are taken on (`reconcile_statements.lock_relations`)."""

    subject: str
    predicate: str
    object: str


_OVERLAPPING = """{s}.facts f
           CROSS JOIN LATERAL (
               SELECT g.id, g.valid_at FROM {s}.facts g
               WHERE {tenant_g} AND g.subject = f.subject AND lower(g.predicate) = lower(f.predicate)
                 AND g.valid_at > f.valid_at
               ORDER BY g.valid_at, g.id LIMIT 1) n
           WHERE {tenant_f}
             AND lower(f.predicate) IN (SELECT sv.predicate FROM {s}.single_valued sv WHERE {tenant_sv})
             AND (f.invalid_at IS NULL OR f.invalid_at > n.valid_at)"""
"""The FROM and WHERE of a fact `f` of the scope's single-valued relations still true when the
next fact of its relation `n` starts (the first by start, then id; of any value)."""


def overlapping_relations(schema: str) -> sql.Composed:
    """The scope's single-valued relations in which a fact is still true when the next starts."""
    return tenant_statement(
        """SELECT DISTINCT ON (f.subject, lower(f.predicate))
                  f.subject, lower(f.predicate) AS predicate, lower(f.object) AS object
           FROM {overlapping}
           ORDER BY f.subject, lower(f.predicate)""",
        schema,
        overlapping=tenant_statement(_OVERLAPPING, schema),
    )


def end_overlaps(schema: str) -> sql.Composed:
    """End, in the scope's single-valued relations (%(subjects)s, %(predicates)s), each fact still
    true when the next fact of its relation starts, there, superseded by that one; memory learns
    it at %(learned)s (a fact that had ended keeps its `expired_at`). Returns the facts ended."""
    return tenant_statement(
        """WITH placed AS (
               SELECT f.id, n.id AS by, n.valid_at AS at, f.invalid_at IS NOT NULL AS ended_before
               FROM {overlapping}
                 AND (f.subject, lower(f.predicate)) IN (
                     SELECT * FROM unnest(%(subjects)s::text[], %(predicates)s::text[])))
           UPDATE {s}.facts f
           SET invalid_at = p.at, superseded_by = p.by,
               expired_at = CASE WHEN p.ended_before THEN f.expired_at ELSE %(learned)s END
           FROM placed p
           WHERE {tenant_f} AND f.id = p.id
           RETURNING f.id""",
        schema,
        overlapping=tenant_statement(_OVERLAPPING, schema),
    )


def same_start_facts(schema: str) -> sql.Composed:
    """The ids of the facts of the scope's single-valued relations that start at the same instant
    as another fact of their relation (both unknown included: -infinity), in id order."""
    return tenant_statement(
        """SELECT f.id FROM {s}.facts f
           WHERE {tenant_f}
             AND lower(f.predicate) IN (SELECT sv.predicate FROM {s}.single_valued sv WHERE {tenant_sv})
             AND EXISTS (SELECT 1 FROM {s}.facts g
                         WHERE {tenant_g} AND g.subject = f.subject AND lower(g.predicate) = lower(f.predicate)
                           AND g.valid_at = f.valid_at AND g.id <> f.id)
           ORDER BY f.id""",
        schema,
    )


@dataclass(frozen=True)
class Repaired:
    """What `repair_overlaps` did: the facts it ended, and those it left overlapping (the module
    docstring)."""

    ended: int
    left: int


def repair_overlaps(info: StoreInfo) -> Operation[Repaired]:
    """In every scope with single-valued predicates, end the values that overlap another (see the
    module docstring), under the locks of their relations (a write of one waits, and then meets a
    repaired history); scope by scope in one order, each scope's repair committed before the next
    (the locks of every scope at once would not fit PostgreSQL's lock table), then the facts left
    overlapping counted and logged."""
    scopes = yield from execute_as(Scope, single_valued_scopes(info.schema))
    ended = left = 0
    for scope in scopes:
        repaired = yield from _repair_scope(info, scope)
        if repaired:
            yield from commit()
        ended += repaired
        left += yield from _same_starts(info, scope)
    return Repaired(ended=ended, left=left)


def _same_starts(info: StoreInfo, scope: Scope) -> Operation[int]:
    rows = yield from execute(same_start_facts(info.schema), {"dataset": scope.dataset, "project": scope.project})
    if rows:
        logger.warning(
            "dataset=%r project=%r: %d fact(s) of single-valued relations start at the same instant as another "
            "of their relation and overlap it; maintain cannot order them: end or forget one (ids %s)",
            scope.dataset,
            scope.project,
            len(rows),
            [int(row[0]) for row in rows],
        )
    return len(rows)


def _repair_scope(info: StoreInfo, scope: Scope) -> Operation[int]:
    base = {"dataset": scope.dataset, "project": scope.project}
    relations = yield from execute_as(Relation, overlapping_relations(info.schema), base)
    if not relations:
        return 0
    values = [(r.subject, r.predicate, r.object) for r in relations]
    learned = (yield from lock_facts(info, scope, [], values)).learned_at  # their values' and relations' locks
    rows = yield from execute(
        end_overlaps(info.schema),
        {
            **base,
            "subjects": [r.subject for r in relations],
            "predicates": [r.predicate for r in relations],
            "learned": learned,
        },
    )
    return len(rows)

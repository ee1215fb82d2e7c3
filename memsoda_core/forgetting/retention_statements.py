"""SQL of retention (`schema._v11`): a scope's rules of how long facts are kept, and which facts a
rule has outlived. Pure.

A fact follows its predicate's rule if the scope has one (case folded), else the scope's rule
(`schema.SCOPE_RULE`). Its age, against the time %(at)s the purge runs at:
- purge "ended": only a fact that has ended (valid time: `invalid_at` set, superseded or not), aged
  from the later of its end and when memory learned of the end (`expired_at`; for a fact written
  ended, its `created_at`), so a history imported today, or an end still to come, is not purged
  before it has been ended, and known ended, for the whole `max_age`;
- purge "all": every fact, live or not, aged from when memory learned it (`created_at`: a
  repetition that raised `times_seen` does not make it younger).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from psycopg import sql

from memsoda_core.store.schema import SCOPE_RULE
from memsoda_core.store.statements import tenant_statement


@dataclass(frozen=True)
class RuleRow:
    predicate: str
    max_age: timedelta
    purge: str


def set_rule(schema: str) -> sql.Composed:
    """Keep the scope's facts of predicate %(predicate)s (`SCOPE_RULE`: of every predicate) for
    %(max_age)s, purging %(purge)s."""
    return tenant_statement(
        """INSERT INTO {s}.retention (dataset, project, predicate, max_age, purge)
           VALUES (%(dataset)s, %(project)s, %(predicate)s, %(max_age)s, %(purge)s)
           ON CONFLICT (dataset, project, predicate) DO UPDATE
           SET max_age = EXCLUDED.max_age, purge = EXCLUDED.purge""",
        schema,
    )


def remove_rule(schema: str) -> sql.Composed:
    return tenant_statement("DELETE FROM {s}.retention WHERE {tenant} AND predicate = %(predicate)s", schema)


def list_rules(schema: str) -> sql.Composed:
    """The scope's `RuleRow`s, its own rule first, then by predicate."""
    return tenant_statement(
        "SELECT predicate, max_age, purge FROM {s}.retention WHERE {tenant} ORDER BY predicate", schema
    )


def ruled_scopes(schema: str) -> sql.Composed:
    """(dataset, project) of every scope with a rule."""
    return sql.SQL("SELECT DISTINCT dataset, project FROM {s}.retention ORDER BY dataset, project").format(
        s=sql.Identifier(schema)
    )


@dataclass(frozen=True)
class Outlived:
    """A row of `outlived_facts`."""

    fact_id: int
    subject: str
    predicate: str
    object: str


def transaction_time() -> sql.Composed:
    """The time a purge runs at when none is given: its transaction's."""
    return sql.SQL("SELECT now()").format()


_OUTLIVED = """SELECT f.id AS fact_id, f.subject, f.predicate, f.object
           FROM {s}.facts f
           CROSS JOIN LATERAL (
               SELECT r.max_age, r.purge FROM {s}.retention r
               WHERE {tenant_r} AND r.predicate IN ({scope_rule}, lower(f.predicate))
               ORDER BY r.predicate DESC LIMIT 1) r
           WHERE {tenant_f}{only}
             AND CASE WHEN r.purge = 'all' THEN f.created_at < %(at)s - r.max_age
                      ELSE f.invalid_at IS NOT NULL
                           AND greatest(f.invalid_at, coalesce(f.expired_at, f.created_at)) < %(at)s - r.max_age
                 END"""


def outlived_facts(schema: str, *, only_ids: bool = False) -> sql.Composed:
    """The scope's facts its rules have outlived at %(at)s (id as `fact_id`, and the value's key
    for the locks; see the module docstring); with `only_ids`, of facts %(ids)s alone. The specific
    rule sorts after `SCOPE_RULE` (the empty string), so DESC takes it first."""
    only = sql.SQL(" AND f.id = ANY(%(ids)b::bigint[])") if only_ids else sql.SQL("")
    return tenant_statement(_OUTLIVED, schema, scope_rule=sql.Literal(SCOPE_RULE), only=only)

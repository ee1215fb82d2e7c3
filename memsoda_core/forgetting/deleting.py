"""SQL that deletes a chosen set of a scope's facts with everything that hangs on them (pure).

One builder, `delete_facts`, for every delete of facts by id (forgetting a source, retention's
purge, expired items): the rule of what a deleted fact takes with it is written once.
"""

from __future__ import annotations

from dataclasses import dataclass

from psycopg import sql

from memsoda_core.store.lexemes import fact_lexemes
from memsoda_core.store.statements import tenant_statement


@dataclass(frozen=True)
class Deleted:
    """A row of `delete_facts`: the facts deleted and the items that referred to them."""

    facts: int
    items: int


def delete_facts(schema: str, doomed: sql.Composable) -> sql.Composed:
    """Delete the scope's facts that `doomed` selects (a query on the scope returning a column
    `fact_id`), and with them: their entity links and sources (ON DELETE CASCADE), the items that
    refer to them (an item is a document over its fact), their share of the entities', lexemes'
    and scope's counts. A fact another one ended into (`superseded_by` one of them) keeps its end as
    history and loses the pointer, so no fact points to a fact that is gone. Returns one `Deleted`.
    Entities left with no fact (`statements.delete_orphan_entities`) and spent lexemes are the
    caller's next statements."""
    return tenant_statement(
        """WITH doomed AS MATERIALIZED ({doomed}),
           touched AS (
               SELECT fe.entity_id, count(*) AS n FROM {s}.fact_entities fe
               WHERE {tenant_fe} AND fe.fact_id IN (SELECT fact_id FROM doomed)
               GROUP BY fe.entity_id),
           recount AS (
               UPDATE {s}.entities e SET fact_count = e.fact_count - touched.n
               FROM touched
               WHERE {tenant_e} AND e.id = touched.entity_id),
           unlinked AS (
               UPDATE {s}.facts p SET superseded_by = NULL
               WHERE {tenant_p} AND p.superseded_by IN (SELECT fact_id FROM doomed)
                 AND p.id NOT IN (SELECT fact_id FROM doomed)),
           items_gone AS (
               DELETE FROM {s}.items i
               WHERE {tenant_i} AND i.fact_id IN (SELECT fact_id FROM doomed)
               RETURNING 1),
           gone AS (
               DELETE FROM {s}.facts f
               WHERE {tenant_f} AND f.id IN (SELECT fact_id FROM doomed)
               RETURNING f.id, f.tsv),
           uncounted AS (
               UPDATE {s}.lexemes l SET facts = l.facts - d.n
               FROM (SELECT x.lexeme, count(*) AS n
                     FROM gone g CROSS JOIN LATERAL unnest({lexemes}) AS x(lexeme)
                     GROUP BY x.lexeme) d
               WHERE {tenant_l} AND l.lexeme = d.lexeme),
           scope AS (
               UPDATE {s}.scopes sc SET fact_count = sc.fact_count - (SELECT count(*) FROM gone)
               WHERE {tenant_sc})
           SELECT (SELECT count(*) FROM gone) AS facts, (SELECT count(*) FROM items_gone) AS items""",
        schema,
        doomed=doomed,
        lexemes=fact_lexemes("g"),
    )
